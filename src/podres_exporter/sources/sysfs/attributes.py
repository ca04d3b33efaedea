"""Reading sysfs attributes the plain way: each file opened, read and closed.

Every file and directory the sysfs readers open goes through one
:class:`AttributeReader`, built on an :data:`Opener` (``os.open`` unless a caller, a
test counting what is opened, passes another). A file that is missing or unreadable
(``EINVAL`` for the carrier of a link that is down, ``ENODEV`` for a device going
away, ``EACCES``), or whose content does not parse, reads as None.

Plain ``os`` calls, not ``open()``: a poll of a large node reads thousands of
attributes, and a file object costs several times the three system calls.
"""

from __future__ import annotations

import os
import re
from typing import Protocol

from podres_exporter.core.ids import normalize_pci

__all__ = [
    "CHUNK",
    "AttributeDir",
    "AttributeReader",
    "FdDir",
    "Opener",
    "device_pci_address",
    "link_name",
    "listdir",
    "numbered",
    "parse_int",
    "parse_text",
    "read_fd",
]

# A sysfs attribute is at most a page: most are read whole by the first read.
CHUNK = 4096

FILE_FLAGS = os.O_RDONLY | os.O_CLOEXEC
# A directory opened to read its attributes relative to it: one lookup of its path for
# them all (sysfs paths run through symlinks: ``class/net/eth0`` -> ``devices/...``).
DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


class Opener(Protocol):
    """``os.open``'s shape, as the readers call it: a descriptor, or OSError."""

    def __call__(self, path: str, flags: int, *, dir_fd: int | None = None) -> int: ...


class AttributeDir(Protocol):
    """A directory whose attributes are read by name."""

    def read(self, name: str) -> bytes | None: ...


def read_fd(fd: int) -> bytes:
    """The rest of an open file (one read for a sysfs attribute)."""
    data = os.read(fd, CHUNK)
    if len(data) < CHUNK:
        return data
    chunks = [data]
    while data:
        data = os.read(fd, CHUNK)
        chunks.append(data)
    return b"".join(chunks)


def parse_int(data: bytes | None) -> int | None:
    if data is None:
        return None
    try:
        return int(data)  # the bytes as they are: int() takes ASCII digits and whitespace
    except ValueError:
        return None


def parse_text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace").strip()


class AttributeReader:
    """Opens and reads attribute files through ``opener``; each path is relative to
    ``dir_fd`` when one is given."""

    __slots__ = ("opener",)

    def __init__(self, opener: Opener = os.open) -> None:
        self.opener = opener

    def read_bytes(self, path: str, dir_fd: int | None = None) -> bytes | None:
        """The content of a sysfs file; None when it cannot be read."""
        try:
            fd = self.opener(path, FILE_FLAGS, dir_fd=dir_fd)
        except OSError:  # ENOENT, EACCES ...
            return None
        try:
            return read_fd(fd)
        except OSError:  # EINVAL, ENODEV, EIO, EISDIR ...
            return None
        finally:
            os.close(fd)

    def read_text(self, path: str, dir_fd: int | None = None) -> str | None:
        """The stripped text of a sysfs file; None when it cannot be read."""
        return parse_text(self.read_bytes(path, dir_fd))

    def read_int(self, path: str, dir_fd: int | None = None) -> int | None:
        """An integer attribute; None when it cannot be read or does not parse."""
        return parse_int(self.read_bytes(path, dir_fd))

    def open_dir(self, path: str, dir_fd: int | None = None) -> int | None:
        """A directory's O_PATH descriptor (the caller closes it); None when it is not one."""
        try:
            return self.opener(path, DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            return None


class FdDir:
    """A directory's attributes, each opened, read and closed relative to the
    directory's descriptor (a read without a cache)."""

    __slots__ = ("fd", "reader")

    def __init__(self, reader: AttributeReader, fd: int) -> None:
        self.reader = reader
        self.fd = fd

    def read(self, name: str) -> bytes | None:
        return self.reader.read_bytes(name, self.fd)


def listdir(path: str) -> list[str]:
    """A directory's names; empty when it cannot be listed."""
    try:
        return os.listdir(path)
    except OSError:
        return []


def link_name(path: str, dir_fd: int | None = None) -> str | None:
    """The last component of a symlink's target (``driver`` -> ``"ice"``)."""
    try:
        target = os.readlink(path, dir_fd=dir_fd)
    except OSError:
        return None
    return os.path.basename(target.rstrip("/")) or None


def device_pci_address(directory: str) -> str | None:
    """The PCI function the ``device`` symlink of ``directory`` points to, if any.

    The link points to the function itself, or, for virtio devices, to a
    ``virtioN`` device whose parent is the PCI function.
    """
    device_link = os.path.join(directory, "device")
    name = link_name(device_link)
    if name is None:
        return None
    address = normalize_pci(name)
    if address is not None:
        return address
    if name.startswith("virtio"):
        parent = os.path.basename(os.path.dirname(os.path.realpath(device_link)))
        return normalize_pci(parent)
    return None


def numbered(directory: str, pattern: re.Pattern[str]) -> list[str]:
    """The entries of ``directory`` that ``pattern`` matches (``hwmon3``, ``card0``), by
    the number it captures."""
    found = [(int(m.group(1)), name) for name in listdir(directory) if (m := pattern.match(name))]
    return [name for _, name in sorted(found)]
