"""The kubelet's configuration file (``--kubelet-config``), read on the node.

The file is the ``KubeletConfiguration`` the kubelet was started with (``--config``;
kubeadm writes ``/var/lib/kubelet/config.yaml``), YAML or JSON. Only the file is read:
the kubelet's own command-line flags (``--reserved-cpus``, ``--cpu-manager-policy``,
``--topology-manager-policy`` ...) override it, and a kubelet started with those flags
is not seen here. The decoded data becomes a
:class:`~podres_exporter.core.kubeletfiles.KubeletConfig` (defaults filled in) in the core.

Reads are bounded (:data:`MAX_CONFIG_BYTES`) and a file unchanged since the last read
(the same device, inode, size and modification time) is not opened again. A failure is a
:class:`~podres_exporter.core.errors.SourceError` naming the file and the flag to set.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Generic, TypeVar

import yaml

from podres_exporter.core.errors import SourceError
from podres_exporter.core.kubeletfiles import KubeletConfig, kubelet_config

MAX_CONFIG_BYTES = 1 << 20
"""A kubelet configuration is a few KiB; 1 MiB is far beyond any."""

_T = TypeVar("_T")


def read_bounded(path: str, max_bytes: int, flag: str) -> tuple[tuple[int, ...], bytes]:
    """The file's identity (device, inode, size, mtime) and its bytes, at most
    ``max_bytes``; SourceError naming ``path`` and ``flag`` when it cannot be read or is
    larger."""
    hint = f"set {flag} to the kubelet's file"
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(max_bytes + 1)
    except OSError as err:
        raise SourceError(f"cannot read {path}: {err.strerror or err} ({hint})") from err
    if len(data) > max_bytes:
        raise SourceError(f"{path}: larger than {max_bytes} bytes ({hint})")
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), data


class FileReader(Generic[_T]):
    """Reads one file with ``decode`` and keeps the result while the file is unchanged."""

    def __init__(self, path: str, flag: str, max_bytes: int, decode: Callable[[bytes], _T]) -> None:
        self.path, self.flag, self.max_bytes = path, flag, max_bytes
        self._decode = decode
        self._key: tuple[int, ...] | None = None
        self._value: _T | None = None

    def read(self) -> _T:
        """The decoded file; SourceError naming the file and the flag when it cannot be
        read or decoded. A file whose identity is unchanged is not opened."""
        if self._value is not None:
            try:
                st = os.stat(self.path)
            except OSError:
                pass  # said below, by the read itself
            else:
                if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == self._key:
                    return self._value
        key, data = read_bounded(self.path, self.max_bytes, self.flag)
        try:
            value = self._decode(data)
        except RecursionError:
            raise SourceError(
                f"{self.path}: nested too deeply (set {self.flag} to the kubelet's file)"
            ) from None
        except (ValueError, yaml.YAMLError) as err:
            raise SourceError(
                f"{self.path}: {err} (set {self.flag} to the kubelet's file)"
            ) from err
        self._key, self._value = key, value
        return value


def decode_kubelet_config(data: bytes) -> KubeletConfig:
    """A configuration file's bytes (YAML, or JSON, which YAML reads too)."""
    try:
        text = data.decode()
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 text: {err}") from None
    return kubelet_config(yaml.safe_load(text))


def kubelet_config_reader(path: str) -> FileReader[KubeletConfig]:
    """The reader of the kubelet configuration at ``path`` (``--kubelet-config``)."""
    return FileReader(path, "--kubelet-config", MAX_CONFIG_BYTES, decode_kubelet_config)
