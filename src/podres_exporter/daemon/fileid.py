"""The identity of a file, to notice that a socket was re-created at the same path."""

from __future__ import annotations

import os

FileIdentity = tuple[int, int, int]
"""(device, inode, mtime in ns) of a file. A file deleted and created again at the same
path often gets the old inode number back at once (the kubelet re-creates its sockets so
at every start); its modification time is new, so the three together tell the files apart.
Not the change time: a new hard link or a chmod changes that on the same file, and nothing
writes to a socket file's data, so its mtime stays its creation time."""


def file_identity(path: str) -> FileIdentity | None:
    """The identity of the file at ``path``, or None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns)
