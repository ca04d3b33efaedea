"""The identity of a file, to notice that a socket was re-created at the same path."""

from __future__ import annotations

import os

FileIdentity = tuple[int, int, int]
"""(device, inode, ctime in ns) of a file. A file deleted and created again at the same
path often gets the old inode number back at once (the kubelet re-creates its sockets so
at every start); its change time is new, so the three together tell the files apart."""


def file_identity(path: str) -> FileIdentity | None:
    """The identity of the file at ``path``, or None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_ctime_ns)
