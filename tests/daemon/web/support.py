"""Helpers the web server's tests share: a raw connection, an answer read off it, its close seen."""

from __future__ import annotations

import socket
import weakref

from podres_exporter.daemon.web import WebServer

# What a read_response call received past its response: the next one's start.
_AHEAD: weakref.WeakKeyDictionary[socket.socket, bytes] = weakref.WeakKeyDictionary()


def connect(server: WebServer, timeout: float = 5) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response from ``sock``: status, headers, body (by Content-Length). Bytes
    received past it (pipelined answers can come in one segment) start the next call's."""
    data = _AHEAD.pop(sock, b"")
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response head: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    length = int(headers["Content-Length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside a response body")
        body += chunk
    if len(body) > length:
        body, _AHEAD[sock] = body[:length], body[length:]
    return int(status_line.split(" ")[1]), headers, body


def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """Whether the server closes ``sock`` within ``within_s`` (what it sends is read)."""
    sock.settimeout(within_s)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True
