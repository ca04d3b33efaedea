"""The server's one answer path on real sockets: a scrape that arrives with its
connection, in parts, kept alive, pipelined or refused gets the same answer; a body larger
than the kernel takes goes out whole and in order, within the write deadline, and stop
lets it finish."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.daemon.web import Index, Limits, Site, WebServer
from podres_exporter.daemon.web.send import slices
from tests.daemon.web.support import closed_by_server, connect, read_response

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
TEXT_BODY = b"# HELP up Whether up.\n# TYPE up gauge\nup 1\n"
OM_BODY = b"# HELP up Whether up.\n# TYPE up gauge\nup 1\n# EOF\n"
LIVE = b"# HELP age Seconds.\n# TYPE age gauge\nage 0.5\n"
TEXT = TEXT_BODY + LIVE  # what a text scrape gets
QUICK = Limits(head_timeout_s=0.5, idle_timeout_s=0.5, stop_grace_s=3.0)


def ready_site(text: bytes = TEXT_BODY) -> Site:
    """A Site whose /metrics is always ready on the loop (as the exporter's is once it
    has polled): in the text format, ``text`` and :data:`LIVE` as two pieces (as the
    exporter gives its cached and live parts); :data:`OM_BODY` in OpenMetrics."""

    def ready(*, openmetrics: bool, gz: bool) -> bytes | tuple[bytes, bytes]:
        if gz:
            return gzip.compress(OM_BODY if openmetrics else text + LIVE, mtime=0)
        return OM_BODY if openmetrics else (text, LIVE)

    def metrics(*, openmetrics: bool, gz: bool) -> bytes:
        body = ready(openmetrics=openmetrics, gz=gz)
        return body if isinstance(body, bytes) else b"".join(body)

    return Site(
        metrics=metrics,
        metrics_ready=ready,
        health=lambda: (True, "ok"),
        readiness=lambda: (True, "ready"),
        index=Index("t", "0", "s", "h", "r"),
    )


@pytest.fixture
def server() -> Iterator[WebServer]:
    started = WebServer(("127.0.0.1", 0), ready_site(), limits=QUICK)
    started.start("test-http")
    yield started
    started.stop()


def get(path: str = "/metrics", *headers: str, method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(sock: socket.socket, method: str) -> tuple[int, dict[str, str], bytes]:
    """:func:`read_response`, or for HEAD the head alone (its Content-Length is GET's)."""
    if method != "HEAD":
        return read_response(sock)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response head: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    assert rest == b""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    return int(status_line.split(" ")[1]), dict(x.split(": ", 1) for x in lines), b""


def without_date(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k != "Date"}


def sent(server: WebServer, *requests: bytes) -> list[socket.socket]:
    """A connection for each of ``requests``, each sent whole at once."""
    socks = [connect(server) for _ in requests]
    for sock, data in zip(socks, requests, strict=True):
        sock.sendall(data)
    return socks


# ------------------------------------------------------------------ one answer path


@pytest.mark.parametrize(
    ("headers", "method", "body"),
    [
        ((), "GET", TEXT),
        (
            (f"Accept: {OPENMETRICS}", "Accept-Encoding: gzip"),
            "GET",
            gzip.compress(OM_BODY, mtime=0),
        ),
        ((), "HEAD", b""),
    ],
    ids=["text", "openmetrics-gzip", "head"],
)
def test_a_scrape_sent_whole_and_one_sent_in_parts_get_the_same_answer(
    server: WebServer, headers: tuple[str, ...], method: str, body: bytes
) -> None:
    """A request sent with its connection and one whose head comes in two parts: the
    same status, headers and body (the body given as two pieces, written as one)."""
    request = get("/metrics", *headers, "Connection: close", method=method)
    (whole,) = sent(server, request)
    with whole:
        status, first, got = read_answer(whole, method)
        assert (status, got) == (200, body)
        assert first["Connection"] == "close"
        assert closed_by_server(whole, 2)
    with connect(server) as parts:
        parts.sendall(request[:20])
        time.sleep(0.05)
        parts.sendall(request[20:])
        status, second, got = read_answer(parts, method)
    assert (status, got) == (200, body)
    assert without_date(first) == without_date(second)


def test_a_kept_alive_connection_serves_scrape_after_scrape_then_idles_out(
    server: WebServer,
) -> None:
    """Scrape after scrape on one connection, in either format, a probe and pipelined
    scrapes between them, answered in order; ``Connection: close`` closes it, and left
    alone it closes after ``idle_timeout_s``."""
    om_gzip = ("Accept: " + OPENMETRICS, "Accept-Encoding: gzip")
    with connect(server) as sock:
        for headers, body in [((), TEXT), (om_gzip, gzip.compress(OM_BODY, mtime=0))] * 3:
            sock.sendall(get("/metrics", *headers))
            status, got_headers, got = read_response(sock)
            assert (status, got) == (200, body)
            assert "Connection" not in got_headers
        sock.sendall(get("/healthz"))
        assert read_response(sock)[::2] == (200, b"ok\n")
        sock.sendall(get() + get())  # pipelined: both answered, in order
        assert [read_response(sock)[::2] for _ in range(2)] == [(200, TEXT)] * 2
        sock.sendall(get("/metrics", "Connection: close"))
        status, got_headers, got = read_response(sock)
        assert (status, got_headers["Connection"], got) == (200, "close", TEXT)
        assert closed_by_server(sock, 2)
    with connect(server) as idle:
        idle.sendall(get())
        assert read_response(idle)[::2] == (200, TEXT)
        assert closed_by_server(idle, 2)


def test_http_1_0_has_its_own_keep_alive_rule(server: WebServer) -> None:
    """HTTP/1.0 closes unless it asks to keep the connection, and then is told so."""
    closes, keeps = sent(
        server,
        b"GET /metrics HTTP/1.0\r\n\r\n",
        b"GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    )
    with closes, keeps:
        status, headers, body = read_response(closes)
        assert (status, headers["Connection"], body) == (200, "close", TEXT)
        assert closed_by_server(closes, 2)
        status, headers, body = read_response(keeps)
        assert (status, headers["Connection"], body) == (200, "keep-alive", TEXT)
        keeps.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        assert read_response(keeps)[::2] == (200, b"ok\n")


@pytest.mark.parametrize(
    ("first", "more", "answers"),
    [
        (b"GET /metrics HTTP/1.1\r\nHo", b"st: x\r\nConnection: close\r\n\r\n", [(200, TEXT)]),
        (
            get("/metrics") + get("/healthz", "Connection: close"),
            b"",
            [(200, TEXT), (200, b"ok\n")],
        ),
        (get("/healthz", "Connection: close"), b"", [(200, b"ok\n")]),
        (get("/nope", "Connection: close"), b"", [(404, None)]),
        (get("/metrics", method="POST"), b"", [(405, None)]),
        (get("/metrics", "Content-Length: 2") + b"hi", b"", [(400, None)]),
        (b"GET /metrics HTTP/1.1\nHost: x\r\n\r\n", b"", [(400, None)]),
        (get("/metrics", "X-Big: " + "a" * 9000), b"", [(431, None)]),
    ],
    ids=["partial", "pipelined", "probe", "not-found", "post", "body", "bare-lf", "too-large"],
)
def test_partial_pipelined_and_refused_requests_are_answered_in_order(
    server: WebServer, first: bytes, more: bytes, answers: list[tuple[int, bytes | None]]
) -> None:
    """A head not yet whole, pipelined requests, other paths and requests the server
    refuses: each answered, in order, then the connection closes."""
    (sock,) = sent(server, first)
    with sock:
        if more:
            time.sleep(0.05)
            sock.sendall(more)
        got = [read_response(sock) for _ in answers]
        assert [status for status, _, _ in got] == [status for status, _ in answers]
        for (_, _, body), (_, want) in zip(got, answers, strict=True):
            assert want is None or body == want
        assert closed_by_server(sock, 2)


# ------------------------------------------------------------- more than the kernel takes


def test_a_large_answer_goes_out_whole_and_the_connection_goes_on() -> None:
    """An answer larger than the socket takes at once (16 MiB, as two pieces): it
    arrives whole and in order, read slowly, and the connection serves its next
    requests."""
    body = bytes(range(256)) * (1 << 16)  # 16 MiB
    server = WebServer(("127.0.0.1", 0), ready_site(body), limits=Limits(idle_timeout_s=10))
    server.start("test-http")
    try:
        with connect(server) as sock:
            for path in ("/healthz", "/metrics", "/metrics", "/readyz", "/metrics"):
                sock.sendall(get(path))
                status, _, got = read_response(sock)
                assert status == 200
                assert got == {"/healthz": b"ok\n", "/readyz": b"ready\n"}.get(path, body + LIVE)
    finally:
        server.stop()


def test_stop_lets_a_large_answer_being_sent_finish() -> None:
    """The connection is busy while its answer is out: stop() waits for it (within
    ``stop_grace_s``) instead of dropping it as idle."""
    body = b"x" * (32 << 20)
    server = WebServer(("127.0.0.1", 0), ready_site(body), limits=QUICK)
    server.start("test-http")
    stopper = threading.Thread(target=server.stop)
    try:
        (sock,) = sent(server, get())
        with sock:
            head = sock.recv(256)
            assert head.startswith(b"HTTP/1.1 200 OK")
            time.sleep(0.2)  # the rest waits for the client
            stopper.start()
            time.sleep(0.2)
            received = len(head.partition(b"\r\n\r\n")[2])
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
            assert received == len(body) + len(LIVE)
        stopper.join(5)
        assert not stopper.is_alive()
    finally:
        server.stop()


def test_a_client_that_leaves_an_answer_unread_is_dropped_at_the_write_deadline(
    debug_logs: list[dict[str, Any]],
) -> None:
    """A kept-alive scrape whose large answer is never read: the connection is dropped at
    the write deadline (one debug event), nothing of it is left open, and the server
    goes on serving."""
    body = b"x" * (64 << 20)
    limits = Limits(write_timeout_s=0.5, idle_timeout_s=10)
    server = WebServer(("127.0.0.1", 0), ready_site(body), limits=limits)
    server.start("test-http")
    try:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(5)
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(get("/healthz"))
            assert read_response(sock)[::2] == (200, b"ok\n")
            sock.sendall(get())
            start = time.monotonic()
            while not any(e["event"] == "http_write_timeout" for e in debug_logs):
                assert time.monotonic() < start + 5, debug_logs
                time.sleep(0.02)
            assert time.monotonic() - start >= 0.45
            assert closed_by_server(sock, 5)
        deadline = time.monotonic() + 5
        while server.open_connections:
            assert time.monotonic() < deadline, "the dropped connection is still open"
            time.sleep(0.01)
        with connect(server) as other:
            other.sendall(get("/healthz", "Connection: close"))
            assert read_response(other)[::2] == (200, b"ok\n")
    finally:
        server.stop()


def unread_capacity() -> int:
    """About the most a loopback connection holds for a client that does not read: the
    sender's largest buffer (``tcp_wmem``), doubled for the receiver's side."""
    try:
        largest = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    except (OSError, IndexError, ValueError):
        largest = 4 << 20
    return 2 * largest


@contextlib.contextmanager
def stalled_scrapes(server: WebServer, body: bytes) -> Iterator[socket.socket]:
    """A kept-alive connection sent more scrapes than the kernel holds the answers of,
    none read yet. Yields the socket."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", server.port))
    with sock:
        sock.sendall(get("/healthz"))
        assert read_response(sock)[::2] == (200, b"ok\n")
        for _ in range(unread_capacity() // len(body) + 4):
            sock.sendall(get())
        time.sleep(0.2)
        yield sock


@pytest.mark.parametrize("size", [200 << 10, 4 << 20], ids=["200KiB", "4MiB"])
def test_stop_lets_a_kept_alive_answer_finish_then_closes(size: int) -> None:
    """stop() while kept-alive answers wait for a client that reads them late: the one
    being sent finishes whole, then the connection closes; none is cut short."""
    body = bytes(range(256)) * (size // 256)
    server = WebServer(("127.0.0.1", 0), ready_site(body), limits=QUICK)
    server.start("test-http")
    stopper = threading.Thread(target=server.stop)
    try:
        with stalled_scrapes(server, body) as sock:
            stopper.start()
            time.sleep(0.2)
            answered = 0
            with pytest.raises(ConnectionError, match="before a response head"):
                while True:  # whole answers, then the close: none cut short
                    status, _, got = read_response(sock)
                    assert status == 200 and got == body + LIVE
                    answered += 1
            assert answered > 0
        stopper.join(5)
        assert not stopper.is_alive()
    finally:
        server.stop()


def test_a_ready_body_that_raises_is_a_500_at_once_and_the_server_keeps_serving(
    debug_logs: list[dict[str, Any]],
) -> None:
    """``metrics_ready`` raising, on a new and on a kept-alive connection: a generic 500
    and an error event each time; the server goes on."""

    def broken(*, openmetrics: bool, gz: bool) -> bytes:
        raise RuntimeError("cannot read /var/lib/secret/state.db")

    site = ready_site()
    server = WebServer(("127.0.0.1", 0), dataclasses.replace(site, metrics_ready=broken))
    server.start("test-http")
    try:
        (sock,) = sent(server, get())
        with sock:
            assert read_response(sock)[::2] == (500, b"internal error\n")
            sock.sendall(get())
            assert read_response(sock)[::2] == (500, b"internal error\n")
            sock.sendall(get("/healthz"))
            assert read_response(sock)[::2] == (200, b"ok\n")
        failed = [e for e in debug_logs if e["event"] == "http_request_failed"]
        assert len(failed) == 2 and all("RuntimeError" in e["error"] for e in failed)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("sizes", "slice_size"),
    [((5,), 8), ((8,), 8), ((20,), 8), ((3, 3, 3), 8), ((3, 17, 0, 2), 8), ((0,), 8), ((), 8)],
)
def test_slices_are_the_pieces_in_order_and_copy_at_most_a_slice(
    sizes: tuple[int, ...], slice_size: int
) -> None:
    """Every slice but the last is ``slice_size`` long; a slice within one piece is a
    view of it, and only a slice made of parts of several is a (slice-sized) copy."""
    pieces = tuple(bytes([65 + i]) * n for i, n in enumerate(sizes))
    got = list(slices(b"", pieces, slice_size))
    assert b"".join(got) == b"".join(pieces)
    assert all(len(s) == slice_size for s in got[:-1])
    assert all(0 < len(s) <= slice_size for s in got)
    for piece_slice in got:
        if len(set(bytes(piece_slice))) == 1:  # from one piece
            assert isinstance(piece_slice, memoryview)
            assert any(piece_slice.obj is p for p in pieces)
