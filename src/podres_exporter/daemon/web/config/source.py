"""Reading a web-config file and the files it names (bounded, never blocking), and
errors that name the file and the key."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import stat
from dataclasses import dataclass, field
from typing import Any, NoReturn

from podres_exporter.core.errors import ConfigError

_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "a boolean"),  # before int: a bool is an int
    ((int, float), "a number"),
    (str, "a string"),
    (list, "a list"),
    (dict, "a mapping"),
    (dt.date, "a date"),
)


def kind(value: object) -> str:
    """What a YAML value is, in the words of an error message."""
    if value is None:
        return "empty"
    for types, words in _KINDS:
        if isinstance(value, types):
            return words
    return type(value).__name__


_MAX_FILE_BYTES = 1 << 20  # a web-config, certificate, key or CA file: 1 MiB at most


@dataclass(frozen=True, slots=True)
class Source:
    """The file being read, for error messages that name it and the key; ``digest``
    takes in every file read, so that a re-read that changed nothing is told apart."""

    path: str
    digest: Any = field(default_factory=hashlib.sha256, compare=False, repr=False)

    def fail(self, key: str, problem: str) -> NoReturn:
        where = f"{key}: " if key else ""
        raise ConfigError(f"web config {self.path}: {where}{problem}")

    def mapping(self, value: object, key: str, allowed: tuple[str, ...]) -> dict[str, object]:
        """``value`` as a mapping with only ``allowed`` keys (null: empty)."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(key, f"is {kind(value)}, not a mapping")
        out: dict[str, object] = {}
        for name, item in value.items():
            if not isinstance(name, str):
                self.fail(key, f"the key {name!r} is {kind(name)}, not a string")
            if name not in allowed:
                inside = f"{key}.{name}" if key else name
                self.fail(inside, f"unknown key (known: {', '.join(allowed)})")
            out[name] = item
        return out

    def string(self, value: object, key: str) -> str:
        if not isinstance(value, str):
            self.fail(key, f"is {kind(value)}, not a string")
        return value

    def boolean(self, value: object, key: str) -> bool:
        if not isinstance(value, bool):
            self.fail(key, f"is {kind(value)}, not true or false")
        return value

    def strings(self, value: object, key: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(key, f"is {kind(value)}, not a list of strings")
        return [self.string(item, f"{key}[{i}]") for i, item in enumerate(value)]

    def read(self, path: str, key: str) -> bytes:
        """The bytes of the regular file ``path`` (1 MiB at most). Opened without
        blocking, so that a FIFO or a device named by mistake is refused, not waited on
        or read forever."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            self._unreadable(path, key, err.strerror or str(err))
        except ValueError as err:  # a NUL byte in the path
            self._unreadable(path, key, str(err))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                self._unreadable(path, key, "not a regular file")
            chunks: list[bytes] = []
            size = 0
            while size <= _MAX_FILE_BYTES:
                chunk = os.read(fd, _MAX_FILE_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
        except OSError as err:
            self._unreadable(path, key, err.strerror or str(err))
        finally:
            os.close(fd)
        if len(data) > _MAX_FILE_BYTES:
            self._unreadable(path, key, f"larger than {_MAX_FILE_BYTES} bytes")
        self.digest.update(b"%d:%s\0%d:" % (len(path), path.encode("utf-8", "replace"), len(data)))
        self.digest.update(data)
        return data

    def _unreadable(self, path: str, key: str, reason: str) -> NoReturn:
        shown = path if path.isprintable() else repr(path)  # a NUL byte, a line break
        self.fail(key, f"cannot read {shown}: {reason}" if key else f"cannot be read: {reason}")
