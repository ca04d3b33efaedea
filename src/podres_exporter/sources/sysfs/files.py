"""The counter files a poller keeps open between reads (:class:`OpenFiles`).

A held attribute file is read again with ``pread`` at offset 0: sysfs then calls the
attribute's ``show()`` anew, so the value is as fresh as a new open's, for one system
call instead of three and no path lookup. A directory's files are valid while the
directory has the same identity (:data:`DirId`): a device that goes makes its open
attributes fail with ``ENODEV``, and a new one at the same path is a new directory.
"""

from __future__ import annotations

import errno
import os
import weakref

from podres_exporter.sources.sysfs.attributes import (
    CHUNK,
    FILE_FLAGS,
    AttributeReader,
    read_fd,
)

__all__ = ["DEFAULT_OPEN_FILES", "DirId", "HeldDir", "OpenFiles"]

# A directory's identity: device, inode and mtime (a replaced device is a new directory).
DirId = tuple[int, int, int]

_RETRY_MISSING_EVERY = 30  # reads: 5 minutes at a 10 s poll

DEFAULT_OPEN_FILES = 4096
"""How many attribute files a poller keeps open at most (see :class:`OpenFiles`)."""

_PLAIN = AttributeReader()


class HeldDir:
    """The attribute files of one directory, kept open from one read to the next.

    On a file system other than sysfs a file replaced by a rename changes the
    directory's mtime, so it is opened anew too."""

    __slots__ = ("_owner", "device", "files", "ident", "lost", "missing", "path")

    def __init__(self, owner: OpenFiles, path: str, ident: DirId) -> None:
        self.files: dict[str, int] = {}
        self.missing: set[str] = set()  # names not there (tried again now and then)
        self.lost = 0  # reads that found a file gone (ENODEV) or not there (ENOENT)
        # The PCI function its ``device`` link names, once read (a network interface's
        # parent device does not change while its directory is the same one).
        self.device: tuple[str | None] | None = None
        self.ident = ident
        self.path = path
        # No reference cycle: the files close as soon as their owner is dropped.
        self._owner = weakref.ref(owner)

    def read(self, name: str) -> bytes | None:
        fd = self.files.get(name)
        if fd is None and name in self.missing:
            return None
        if fd is not None:
            try:
                data = os.pread(fd, CHUNK, 0)
            except OSError as err:
                if err.errno != errno.ENODEV:
                    return None  # EINVAL (the speed of a link that is down), EIO ...
                # The attribute went (its device, or a group of attributes, removed):
                # drop it, and look the name up again in case it was re-created.
                self.lost += 1
                del self.files[name]
                os.close(fd)
                if (owner := self._owner()) is not None:
                    owner.held -= 1
            else:
                return data if len(data) < CHUNK else _pread_rest(fd, data)
        owner = self._owner()
        opener = (_PLAIN if owner is None else owner.reader).opener
        try:
            fd = opener(f"{self.path}/{name}", FILE_FLAGS)
        except OSError as err:
            if err.errno == errno.ENOENT:
                self.lost += 1
                self.missing.add(name)
            return None
        try:
            value: bytes | None = read_fd(fd)
        except OSError:
            value = None  # kept open all the same: the file is there, its value not now
        if owner is not None and owner.admit():
            self.files[name] = fd
        else:
            os.close(fd)
        return value

    def close(self) -> int:
        """Close the files held; how many there were."""
        for fd in self.files.values():
            os.close(fd)
        count = len(self.files)
        self.files.clear()
        return count


def _pread_rest(fd: int, first: bytes) -> bytes:
    chunks = [first]
    offset = len(first)
    while True:
        data = os.pread(fd, CHUNK, offset)
        if not data:
            return b"".join(chunks)
        chunks.append(data)
        offset += len(data)


class OpenFiles:
    """The counter files of the devices a poller reads, kept open between polls.

    A large GPU node has some 2,000 of them (11 per network interface); opening,
    reading and closing each costs three system calls and a path lookup (15 µs on
    sysfs), re-reading an open one a single ``pread`` (2 µs). The price is kernel
    memory: sysfs keeps a page-sized buffer for each file read while it is open (about
    4 KiB, charged to the container's memory cgroup), and a descriptor each. At most
    ``capacity`` files are held (0: none, every file opened and closed at every
    read); beyond it, files are read the plain way. A directory not seen by a read is
    closed at its end, so what is held follows the node. Files are opened through the
    reader of the read in progress (:meth:`begin`).
    """

    def __init__(self, capacity: int = DEFAULT_OPEN_FILES) -> None:
        self.capacity = capacity
        self.held = 0  # descriptors open
        self.reader = _PLAIN
        self._dirs: dict[str, HeldDir] = {}
        self._seen: set[str] = set()
        self._reads = 0

    def __len__(self) -> int:
        return self.held

    def __del__(self) -> None:
        self.close()

    def admit(self) -> bool:
        """Whether one more file may be kept (counted when it may)."""
        if self.held >= self.capacity:
            return False
        self.held += 1
        return True

    def directory(self, path: str) -> HeldDir | None:
        """The held files of the directory at ``path`` (links followed), checked
        against its identity once per read; None when it is gone."""
        if path in self._seen:
            held = self._dirs.get(path)
            if held is not None:
                return held
        try:
            st = os.stat(path)
        except OSError:
            return None
        ident = (st.st_dev, st.st_ino, st.st_mtime_ns)
        self._seen.add(path)
        held = self._dirs.get(path)
        if held is not None:
            if held.ident == ident:
                return held
            self.held -= held.close()
        held = self._dirs[path] = HeldDir(self, path, ident)
        return held

    def begin(self, reader: AttributeReader) -> None:
        """Start a read whose files open through ``reader``: no directory seen yet."""
        self.reader = reader
        self._seen = set()
        self._reads += 1
        if self._reads % _RETRY_MISSING_EVERY == 0:
            # A sysfs directory's mtime does not follow its entries: look for the
            # attributes that were not there again, now and then.
            for held in self._dirs.values():
                held.missing.clear()

    def end(self) -> None:
        """Close the directories the read did not see."""
        for path in self._dirs.keys() - self._seen:
            self.held -= self._dirs.pop(path).close()

    def close(self) -> None:
        for held in self._dirs.values():
            self.held -= held.close()
        self._dirs.clear()
