"""A hostile HTTP peer for ``podres top``: a real TCP server that reads a request's head
and then answers with whatever a test hands it (raw bytes, or a function that writes to
the socket at its own pace), never anything HTTP would call valid unless asked to."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Answer = Callable[[socket.socket, threading.Event], None]


def raw(data: bytes) -> Answer:
    """An answer of exactly ``data``, then the connection closed."""

    def answer(sock: socket.socket, _stop: threading.Event) -> None:
        sock.sendall(data)

    return answer


def http_200(body: bytes, content_type: str = "text/plain; version=0.0.4") -> Answer:
    """A well-formed 200 answer carrying ``body``."""
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return raw(head + body)


def trickle(head: bytes, every_s: float = 0.5) -> Answer:
    """``head``, then one byte every ``every_s`` for as long as the client reads."""

    def answer(sock: socket.socket, stop: threading.Event) -> None:
        sock.sendall(head)
        while not stop.wait(every_s):
            sock.sendall(b"x")

    return answer


def endless(head: bytes, chunk: bytes) -> Answer:
    """``head``, then ``chunk`` again and again until the client closes."""

    def answer(sock: socket.socket, stop: threading.Event) -> None:
        sock.sendall(head)
        while not stop.is_set():
            sock.sendall(chunk)

    return answer


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(5)
        seen = b""
        deadline = time.monotonic() + 5
        while b"\r\n\r\n" not in seen and len(seen) < 65536 and time.monotonic() < deadline:
            data = sock.recv(4096)
            if not data:
                return
            seen += data
        self.server.heads.append(seen)
        # OSError: the client left, which is what it should do with a hostile answer.
        with contextlib.suppress(OSError):
            self.server.answer(sock, self.server.stop)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, answer: Answer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        self.stop = threading.Event()
        self.heads: list[bytes] = []


@contextmanager
def serving(answer: Answer) -> Iterator[_Server]:
    """A server on a free loopback port answering every request with ``answer``; stopped
    (and every answer it is writing ended) when the block ends."""
    server = _Server(answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def url_of(server: socketserver.TCPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"
