"""Large pieces of a body that closes its connection go to a plain socket by sendfile
from a memory file, on real TCP sockets: the bytes are the same as sendmsg's, what the
kernel does not take is left in order, a piece's file is written once and reused, only
the last few files are kept, and without memory files the pieces go by sendmsg. A
kept-alive answer goes whole by sendmsg, with no file."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from podres_exporter.daemon import web
from podres_exporter.daemon.web import WebServer, _BodyFiles, _send
from tests.test_web_at_once import QUICK, get, ready_site
from tests.test_web_limits import connect, read_response

LARGE = bytes(range(256)) * (web._SENDFILE_MIN // 256 + 1000)  # over the threshold
LIVE = b"# HELP age Seconds.\n# TYPE age gauge\nage 0.5\n"


def body_files() -> list[str]:
    """The memory files this process holds open for bodies."""
    out = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed while listed
        if target.startswith("/memfd:podres-body"):
            out.append(fd.name)
    return out


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected TCP pair on loopback: (the server's side, non-blocking; the client's)."""
    with socket.create_server(("127.0.0.1", 0)) as listening:
        client = socket.create_connection(listening.getsockname())
        server, _ = listening.accept()
    server.setblocking(False)
    with server, client:
        yield server, client


def read_all(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    sock.settimeout(5)
    while len(data) < size:
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed after {len(data)} of {size} bytes"
        data += chunk
    return bytes(data)


def test_a_large_piece_goes_by_sendfile_with_the_same_bytes(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    server, client = pair
    files = _BodyFiles()
    try:
        for _ in range(2):  # the piece's file is written once, then reused
            assert _send(server, b"HEAD\r\n\r\n", (LARGE, LIVE), files) == ()
            want = b"HEAD\r\n\r\n" + LARGE + LIVE
            assert read_all(client, len(want)) == want
        assert len(body_files()) == 1
        assert files.fd(LARGE) == files.fd(LARGE)
    finally:
        files.close()
    assert body_files() == []


def test_what_the_kernel_does_not_take_is_left_in_order(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """A client that does not read: the kernel takes part of the file's piece; the rest
    is views of the pieces from there on, and the whole arrives in order."""
    server, client = pair
    wmem = Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()
    rmem = Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()
    # More than the sender's largest buffer and a window the unread receiver offers.
    big = LARGE * ((int(wmem[2]) + 4 * int(rmem[1])) // len(LARGE) + 2)
    files = _BodyFiles()
    try:
        rest = _send(server, b"HEAD\r\n\r\n", (big, LIVE), files)
        left = sum(map(len, rest))
        assert 0 < left < len(big)
        assert bytes(rest[-1]) == LIVE
        sent = len(big) + len(LIVE) + 8 - left
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(read_all(client, sent + left)))
        reader.start()
        server.setblocking(True)
        server.sendall(b"".join(rest))
        reader.join(10)
        assert got == [b"HEAD\r\n\r\n" + big + LIVE]
    finally:
        files.close()


def test_a_piece_gets_its_file_when_sent_again_and_only_the_last_few_keep_theirs() -> None:
    """A piece seen once (a body made for one answer) gets no file; seen again it does,
    and only the last few pieces seen are remembered, their files closed as they go."""
    files = _BodyFiles()
    pieces = [bytes([i]) * web._SENDFILE_MIN for i in range(web._BODY_FILES + 3)]
    try:
        assert [files.fd(p) for p in pieces] == [None] * len(pieces)
        assert body_files() == []
        last = pieces[-web._BODY_FILES :]
        fds = [files.fd(p) for p in last]  # seen again: each gets its file
        for fd, piece in zip(fds, last, strict=True):
            assert fd is not None
            assert os.pread(fd, len(piece), 0) == piece
        assert len(body_files()) == web._BODY_FILES
        assert files.fd(last[-1]) == fds[-1]  # the same file again
        assert files.fd(pieces[0]) is None  # forgotten: new again, the oldest file closed
        assert len(body_files()) == web._BODY_FILES - 1
    finally:
        files.close()
    assert body_files() == []


def test_without_memory_files_the_pieces_go_by_sendmsg(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*_: object) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "memfd_create", refused)
    server, client = pair
    files = _BodyFiles()
    for _ in range(2):  # the second time would have written the file
        assert _send(server, b"HEAD\r\n\r\n", (LARGE, LIVE), files) == ()
        assert read_all(client, len(LARGE) + len(LIVE) + 8) == b"HEAD\r\n\r\n" + LARGE + LIVE
    assert body_files() == []


def test_with_no_files_given_the_pieces_go_by_sendmsg(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """A kept-alive answer: no file is written however often the piece is sent."""
    server, client = pair
    for _ in range(3):
        assert _send(server, b"HEAD\r\n\r\n", (LARGE, LIVE), None) == ()
        assert read_all(client, len(LARGE) + len(LIVE) + 8) == b"HEAD\r\n\r\n" + LARGE + LIVE
    assert body_files() == []


@pytest.mark.parametrize("keep_alive", [False, True], ids=["close", "keep-alive"])
def test_the_server_answers_a_large_body_from_its_file_when_it_closes(keep_alive: bool) -> None:
    """The server's answers of a large ready body are the body. Each on a connection of
    its own, from the second on they are sent from a memory file the server keeps while
    it serves (stop closes it); kept alive, by sendmsg with no file."""
    server = WebServer(("127.0.0.1", 0), ready_site(LARGE), limits=QUICK)
    server.start("test-http")
    try:
        if keep_alive:
            with connect(server) as sock:
                for _ in range(3):
                    sock.sendall(get())
                    status, _, body = read_response(sock)
                    assert (status, body[: len(LARGE)]) == (200, LARGE)
        else:
            for _ in range(3):
                with connect(server) as sock:
                    sock.sendall(get("/metrics", "Connection: close"))
                    status, _, body = read_response(sock)
                    assert (status, body[: len(LARGE)]) == (200, LARGE)
        assert len(body_files()) == (0 if keep_alive else 1)
    finally:
        server.stop()
    assert body_files() == []
