"""The unix socket path limit: bytes of the encoded path, 107 at most."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from podres_exporter.daemon.unixsock import MAX_SOCKET_PATH, socket_path_too_long


def test_the_limit_is_107_bytes() -> None:
    """107 bytes fit, 108 do not; str, bytes and Path are measured alike."""
    fits = "/" + "s" * (MAX_SOCKET_PATH - 1)
    assert MAX_SOCKET_PATH == 107
    assert not socket_path_too_long(fits)
    assert not socket_path_too_long(fits.encode())
    assert not socket_path_too_long(Path(fits))
    assert socket_path_too_long(fits + "s")
    assert socket_path_too_long(Path(fits + "s"))


def test_the_limit_counts_encoded_bytes_not_characters() -> None:
    """A non-ASCII name takes more bytes than characters."""
    path = "/" + "é" * 60  # 61 characters, 121 bytes in UTF-8
    assert len(path) <= MAX_SOCKET_PATH
    assert socket_path_too_long(path)


def test_the_limit_is_what_a_socket_can_bind(tmp_path: Path) -> None:
    """A path of exactly the limit binds; one byte more cannot be bound."""
    base = str(tmp_path.absolute()) + "/"
    if len(base) > MAX_SOCKET_PATH - 2:
        pytest.skip("the temporary directory's path is too long to build the socket paths")
    longest = base + "s" * (MAX_SOCKET_PATH - len(base))
    assert not socket_path_too_long(longest)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(longest)
    assert socket_path_too_long(longest + "s")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, pytest.raises(OSError):
        sock.bind(longest + "s")
