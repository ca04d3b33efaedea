"""The length limit of a unix socket path. Pure.

A socket is bound or dialled through ``sockaddr_un``, whose ``sun_path`` holds 108
bytes on Linux, the terminating NUL included: a longer path can be neither served nor
dialled, and gRPC's error says little about why. The limit counts bytes of the path
as the file system sees it (``os.fsencode``), not characters.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["MAX_SOCKET_PATH", "socket_path_too_long"]

MAX_SOCKET_PATH: Final = 107  # bytes: sockaddr_un.sun_path less its terminating NUL


def socket_path_too_long(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> bool:
    """Whether ``path`` is longer than a unix socket path may be (``MAX_SOCKET_PATH``)."""
    return len(os.fsencode(path)) > MAX_SOCKET_PATH
