"""The web server's bounds, on real sockets: slow, idle, oversized, surplus and departing
clients; what it answers to requests it does not serve; how it stops."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import http.client
import os
import resource
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog

from podres_exporter.daemon.web import Index, Limits, Site, WebServer, connection_cap
from podres_exporter.daemon.web.limits import (
    CONNECTION_BYTES,
    Connection,
    Connections,
    MemoryPressure,
    memory_cap,
    memory_limit,
    resident_bytes,
)
from podres_exporter.daemon.web.send import drop
from podres_exporter.daemon.web.trim import TRIM_AFTER_CLOSED, TRIM_INTERVAL_S, Trimmer
from tests.daemon.web.support import closed_by_server, connect, read_response

# A small test's limits: deadlines short enough to watch them pass.
QUICK = Limits(head_timeout_s=0.5, idle_timeout_s=0.5, stop_grace_s=1.0)


def site(
    body: bytes = b"up 1\n",
    *,
    fail: bool = False,
    gate: threading.Event | None = None,
) -> Site:
    """A Site whose /metrics is ``body``; it raises when ``fail``, and waits for ``gate``."""

    def metrics(*, openmetrics: bool, gz: bool) -> bytes:
        if gate is not None:
            gate.wait(10)
        if fail:
            raise RuntimeError("cannot read /var/lib/secret/state.db")
        return body

    return Site(
        metrics=metrics,
        health=lambda: (True, "ok"),
        readiness=lambda: (True, "ready"),
        index=Index("t", "0", "s", "h", "r"),
    )


Serve = Callable[..., WebServer]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start a WebServer on 127.0.0.1 with the given site and limits; stopped at teardown."""
    servers: list[WebServer] = []

    def start(the_site: Site | None = None, limits: Limits = QUICK) -> WebServer:
        server = WebServer(("127.0.0.1", 0), the_site or site(), limits=limits)
        server.start("test-http")
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


def get(server: WebServer, path: str = "/metrics", timeout: float = 5) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


# ------------------------------------------------------------------ many slow clients


def test_slow_and_idle_clients_hold_no_thread_and_do_not_delay_a_scrape(serve: Serve) -> None:
    """200 slowloris clients and 1,000 idle connections: the thread count stays at the
    pools' size, and a scrape on a new connection is served while they are all open."""
    threads_before = threading.active_count()
    limits = Limits()  # the defaults: the deadlines do not pass during the test
    server = serve(limits=limits)  # raises the open-file limit for its cap where it can
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    slow, idle = 200, 1000
    if soft < 2 * (slow + idle) + 200:  # client and server ends live in this process
        scale = (soft - 200) / (2 * (slow + idle))
        slow, idle = int(slow * scale), int(idle * scale)
    attackers: list[socket.socket] = []
    try:
        for _ in range(idle):
            attackers.append(connect(server))
        loris = [connect(server) for _ in range(slow)]
        attackers += loris
        for sock in loris:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        for _ in range(3):
            for sock in loris:
                sock.sendall(b"X")  # never the blank line that ends the head
            assert get(server, timeout=10) == 200
        # Served after every attacker was accepted (the loop accepts in order), and with
        # at most the loop's thread and the pools' threads added.
        assert threading.active_count() <= threads_before + 1 + limits.workers
        assert [get(server, path, timeout=10) for path in ("/healthz", "/readyz")] == [200, 200]
        assert threading.active_count() <= (
            threads_before + 1 + limits.workers + limits.probe_workers
        )
        server.stop()
        assert all(closed_by_server(sock, 5) for sock in attackers)
    finally:
        for sock in attackers:
            sock.close()


# ---------------------------------------------------------------------- deadlines


def test_a_slowloris_client_is_closed_at_the_head_deadline(serve: Serve) -> None:
    """A head trickled in a byte at a time is cut off at head_timeout_s, not later."""
    server = serve()
    with connect(server) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        start = time.monotonic()
        closed = False
        while not closed and time.monotonic() - start < 5:
            try:
                sock.sendall(b"X")
            except OSError:
                closed = True
            closed = closed or closed_by_server(sock, 0.05)
        elapsed = time.monotonic() - start
    assert closed and elapsed >= QUICK.head_timeout_s * 0.9


def test_a_connection_that_sends_nothing_is_closed_at_the_head_deadline(serve: Serve) -> None:
    """A new connection must send its request head within head_timeout_s."""
    server = serve()
    with connect(server) as sock:
        start = time.monotonic()
        assert closed_by_server(sock, 5)
        assert time.monotonic() - start >= QUICK.head_timeout_s * 0.9


def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout(serve: Serve) -> None:
    """Between requests a connection may idle for idle_timeout_s; then it is closed."""
    server = serve(limits=Limits(idle_timeout_s=0.3, head_timeout_s=5))
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, _ = read_response(sock)
        assert status == 200 and "Connection" not in headers  # kept alive
        start = time.monotonic()
        assert closed_by_server(sock, 5)
        assert time.monotonic() - start >= 0.25


def test_a_connection_busy_past_every_deadline_stays_open(serve: Serve) -> None:
    """The deadlines move with each request: a connection that asks again and again,
    for longer than the head and idle deadlines together, is never cut off."""
    server = serve(limits=Limits(head_timeout_s=0.3, idle_timeout_s=0.3))
    with connect(server) as sock:
        start = time.monotonic()
        answered, answered_at = 0, start
        while time.monotonic() - start < 1.5:  # five times either deadline
            time.sleep(0.1)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock)[0] == 200
            answered, answered_at = answered + 1, time.monotonic()
        assert answered >= 10  # one request per 0.1 s
        assert closed_by_server(sock, 5)  # then idle: closed at the idle deadline
        assert time.monotonic() - answered_at >= 0.25


def test_a_head_arriving_a_byte_at_a_time_is_answered(serve: Serve) -> None:
    """A head in one-byte segments (a CR and its LF apart) within its deadline is read
    whole; a second request sent along with the end of the first is answered next."""
    server = serve(limits=Limits(head_timeout_s=5))
    first = b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: slow\r\n\r\n"
    second = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
    with connect(server) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for byte in first[:-1]:
            sock.sendall(bytes([byte]))
            time.sleep(0.001)
        sock.sendall(first[-1:] + second[:20])
        assert read_response(sock)[::2] == (200, b"ok\n")
        sock.sendall(second[20:])
        assert read_response(sock)[::2] == (200, b"ready\n")


def test_a_client_that_does_not_read_is_dropped_at_the_write_deadline(
    serve: Serve, debug_logs: list[structlog.typing.EventDict]
) -> None:
    """A response the client leaves unread is given write_timeout_s, then the connection
    is dropped (one debug event) and the server goes on serving."""
    server = serve(site(b"x" * (64 << 20)), limits=Limits(write_timeout_s=0.5))
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(5)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        start = time.monotonic()
        deadline = start + 5
        while not any(e["event"] == "http_write_timeout" for e in debug_logs):
            assert time.monotonic() < deadline, debug_logs
            time.sleep(0.02)
        assert time.monotonic() - start >= 0.45
        assert closed_by_server(sock, 5)  # what was sent, then the end (or a reset)
    assert get(server, "/healthz") == 200
    assert [e["event"] for e in debug_logs if e["event"].startswith("http_")] == [
        "http_write_timeout"
    ]


# ---------------------------------------------------------------------- sizes, caps


def test_an_oversized_request_head_is_431_and_closed(serve: Serve) -> None:
    """A head over max_head_bytes: 431, Connection: close, then the connection ends."""
    server = serve()
    with connect(server) as sock:
        big = b"X-Big: " + b"a" * (4 * QUICK.max_head_bytes) + b"\r\n"
        sock.sendall(b"GET /metrics HTTP/1.1\r\n" + big + b"\r\n")
        status, headers, _ = read_response(sock)
        assert (status, headers["Connection"]) == (431, "close")
        assert closed_by_server(sock, 5)
    assert get(server) == 200


def test_a_head_of_many_short_lines_over_the_limit_is_431(serve: Serve) -> None:
    """The head's limit is on the whole head, not on each line."""
    server = serve()
    with connect(server) as sock:
        lines = b"".join(b"X-%d: v\r\n" % i for i in range(QUICK.max_head_bytes // 8))
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + lines + b"\r\n")
        assert read_response(sock)[0] == 431
        assert closed_by_server(sock, 5)


def test_at_the_cap_a_new_connection_closes_the_longest_idle_one(serve: Serve) -> None:
    """max_connections open and idle (one kept alive after a request, two that sent
    nothing): a new connection is served, and the one idle longest is closed for it,
    so a client holding idle connections cannot lock out a probe."""
    server = serve(
        limits=Limits(
            max_connections=3, max_connections_per_address=3, head_timeout_s=30, idle_timeout_s=30
        )
    )
    held = [connect(server) for _ in range(3)]
    try:
        held[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(held[0])[0] == 200  # then idle: back at the end of the line
        time.sleep(0.1)  # every one accepted before the newcomer
        with connect(server) as newcomer:
            newcomer.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(newcomer)[0] == 200
        assert closed_by_server(held[1], 5)
        assert not closed_by_server(held[0], 0.2)
    finally:
        for sock in held:
            sock.close()


def test_over_the_cap_of_busy_connections_a_new_one_gets_503_and_is_closed(
    serve: Serve,
) -> None:
    """max_connections all busy answering: the next one is answered 503 at once and
    closed; once they finish, new connections are served again."""
    gate = threading.Event()
    server = serve(site(gate=gate), limits=Limits(max_connections=3, max_connections_per_address=3))
    held = [connect(server) for _ in range(3)]
    try:
        for sock in held:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.2)  # each request read and waiting for the site
        with connect(server) as surplus:
            status, headers, body = read_response(surplus)
            assert (status, headers["Connection"], body) == (
                503,
                "close",
                b"too many connections\n",
            )
            assert closed_by_server(surplus, 5)
        gate.set()
        for sock in held:
            assert read_response(sock)[0] == 200
        assert get(server) == 200
    finally:
        gate.set()
        for sock in held:
            sock.close()


@pytest.mark.skipif(
    int(Path("/proc/sys/net/core/somaxconn").read_text()) < 200,
    reason="net.core.somaxconn caps every backlog under 200 here",
)
def test_out_of_descriptors_the_connection_waits_and_is_served_after(
    serve: Serve, debug_logs: list[structlog.typing.EventDict]
) -> None:
    """accept() failing for lack of descriptors (EMFILE): one warning, the connection
    waits in the listen queue, and it is served once descriptors are free again (one
    event), with no busy loop meanwhile."""
    server = serve()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    client = socket.socket()
    client.settimeout(5)
    fillers: list[int] = []
    try:
        highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 8, hard))
        with contextlib.suppress(OSError):  # every free descriptor under the limit
            while True:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
        client.connect(("127.0.0.1", server.port))
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 5
        while not any(e["event"] == "http_accept_failed" for e in debug_logs):
            assert time.monotonic() < deadline, debug_logs
            time.sleep(0.02)
        cpu = time.process_time()
        time.sleep(0.6)  # more than one retry (0.5 s)
        assert time.process_time() - cpu < 0.3  # waiting, not spinning
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    with client:
        assert read_response(client)[::2] == (200, b"ok\n")
    events = [e["event"] for e in debug_logs if e["event"].startswith("http_accept")]
    assert events == ["http_accept_failed", "http_accept_recovered"]


def test_the_listen_backlog_holds_200_connections_before_any_accept() -> None:
    """Bound and listening but not accepting: 200 connections complete their handshake
    (a backlog of 5, the old default, would leave the seventh waiting)."""
    server = WebServer(("127.0.0.1", 0), site())
    socks: list[socket.socket] = []
    try:
        for _ in range(200):
            socks.append(connect(server, timeout=5))
        server.start()
        assert get(server) == 200
    finally:
        server.stop()
        for sock in socks:
            sock.close()


def test_connection_cap_fits_the_open_file_limit() -> None:
    """The soft limit is raised as far as the hard one allows; what it cannot hold, the
    cap gives up (a reserve of descriptors stays for the rest of the daemon)."""
    inf = resource.RLIM_INFINITY
    assert connection_cap(4096, 1_048_576, 1_048_576) == (4096, 1_048_576)
    assert connection_cap(4096, inf, inf) == (4096, inf)
    assert connection_cap(4096, 1024, 524_288) == (4096, 4096 + 256)
    assert connection_cap(4096, 1024, inf) == (4096, 4096 + 256)
    assert connection_cap(4096, 1024, 2048) == (2048 - 256, 2048)
    assert connection_cap(4096, 1024, 1024) == (1024 - 256, 1024)
    assert connection_cap(4096, 256, 256) == (128, 256)


def test_the_open_file_limit_is_raised_for_the_cap(
    debug_logs: list[structlog.typing.EventDict],
) -> None:
    """A soft RLIMIT_NOFILE under the cap is raised to hold it, with one log event."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096 + 256:
        pytest.skip(f"the hard open-file limit ({hard}) cannot hold the test's cap")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        server = WebServer(("127.0.0.1", 0), site(), limits=Limits(max_connections=4096))
        server.stop()
        assert server.max_connections == 4096
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 4096 + 256
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    raised = [e for e in debug_logs if e["event"] == "open_file_limit_raised"]
    assert raised == [
        {"event": "open_file_limit_raised", "log_level": "info", "old": 1024, "new": 4352}
    ]


# ------------------------------------------------------------------ what is served


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "get"])
def test_only_get_and_head_are_served(serve: Serve, method: str) -> None:
    """Any other method: 405 naming the allowed ones, and the connection closes."""
    server = serve()
    with connect(server) as sock:
        sock.sendall(
            f"{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody".encode()
        )
        status, headers, _ = read_response(sock)
        assert (status, headers["Allow"], headers["Connection"]) == (405, "GET, HEAD", "close")
        assert closed_by_server(sock, 5)


@pytest.mark.parametrize(
    "header", ["Content-Length: 5", "Transfer-Encoding: chunked", "Content-Length: x"]
)
def test_a_request_with_a_body_is_refused(serve: Serve, header: str) -> None:
    """GET with a body (or a length that is not 0): 400 and closed, the body never read."""
    server = serve()
    with connect(server) as sock:
        sock.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\n{header}\r\n\r\nhello".encode())
        status, headers, _ = read_response(sock)
        assert (status, headers["Connection"]) == (400, "close")
        assert closed_by_server(sock, 5)


@pytest.mark.parametrize(
    "head",
    [
        b"GET /metrics\r\n\r\n",
        b"GET  /metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/2.0\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nNo-Colon\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nName : v\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nA: b\r\n folded\r\n\r\n",
        # request smuggling: whatever a proxy in front could read differently
        b"GET /metrics HTTP/1.1\r\nHost: x\nContent-Length: 5\r\n\r\nhello",
        b"GET /metrics HTTP/1.1\r\nHost: x\rContent-Length: 5\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\x00y\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nA: b\x01c\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nA: b\x7f\r\n\r\n",
        b"GET /met\x00rics HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nA(b): v\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
    ],
)
def test_a_malformed_request_is_400_and_closed(serve: Serve, head: bytes) -> None:
    """A request line or header the server cannot read: 400, then the connection ends."""
    server = serve()
    with connect(server) as sock:
        sock.sendall(head)
        status, headers, body = read_response(sock)
        assert (status, headers["Connection"], body) == (400, "close", b"bad request\n")
        assert closed_by_server(sock, 5)


@pytest.mark.parametrize(
    "head",
    [
        b"GET /metrics HTTP/1.1\nHost: x\n\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\n\n",
        b"\n",
    ],
)
def test_a_head_of_bare_line_feeds_is_400_before_its_deadline(serve: Serve, head: bytes) -> None:
    """A head whose lines end in a bare LF is refused as soon as such a line arrives,
    not left to wait for a CRLF CRLF until the head's deadline."""
    server = serve(limits=Limits(head_timeout_s=30))
    with connect(server, timeout=5) as sock:
        sock.sendall(head)
        assert read_response(sock)[0] == 400  # the 5 s socket timeout is the pass mark
        assert closed_by_server(sock, 5)


def test_http_1_0_needs_no_host_and_lowercase_names_and_tabs_pass(serve: Serve) -> None:
    """What strictness must not refuse: HTTP/1.0 without Host, any case of a header
    name, a tab inside a value."""
    server = serve()
    for head in (
        b"GET /healthz HTTP/1.0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nuser-agent: a\tb\r\n\r\n",
    ):
        with connect(server) as sock:
            sock.sendall(head)
            assert read_response(sock)[0] == 200


def test_http_1_0_closes_unless_asked_to_keep_alive(serve: Serve) -> None:
    """HTTP/1.0: closed after the response, unless the request said keep-alive."""
    server = serve()
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        status, headers, body = read_response(sock)
        assert (status, headers["Connection"], body) == (200, "close", b"ok\n")
        assert closed_by_server(sock, 5)
    with connect(server) as sock:
        for _ in range(2):
            sock.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            status, headers, _ = read_response(sock)
            assert (status, headers["Connection"]) == (200, "keep-alive")


def test_pipelined_requests_are_answered_in_order(serve: Serve) -> None:
    """Several requests sent at once are answered one after the other, in order."""
    server = serve()
    with connect(server) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        answers = [read_response(sock) for _ in range(3)]
        assert [(s, b) for s, _, b in answers] == [
            (200, b"ok\n"),
            (200, b"ready\n"),
            (200, b"up 1\n"),
        ]
        assert answers[2][1]["Connection"] == "close"
        assert closed_by_server(sock, 5)


# -------------------------------------------------------------------- quiet on abuse


def test_a_client_leaving_mid_response_is_one_debug_event_and_no_traceback(
    serve: Serve,
    debug_logs: list[structlog.typing.EventDict],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A reset in the middle of a large body: one debug event, nothing on stderr, and
    the server goes on serving."""
    server = serve(site(b"x" * (32 << 20)))
    with connect(server) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 200 OK")
        # SO_LINGER 0: close with a reset, as a client that crashes would.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    deadline = time.monotonic() + 5
    while not any(e["event"] == "http_client_gone" for e in debug_logs):
        assert time.monotonic() < deadline, debug_logs
        time.sleep(0.02)
    assert get(server, "/healthz") == 200
    events = [e for e in debug_logs if e["event"].startswith("http_")]
    assert [(e["event"], e["log_level"], e["path"]) for e in events] == [
        ("http_client_gone", "debug", "/metrics")
    ]
    assert capfd.readouterr().err == ""


def test_closing_after_a_large_response_leaves_no_error_behind(
    debug_logs: list[structlog.typing.EventDict],
) -> None:
    """Connection: close after a body still in the send buffer, read slowly to the end:
    the connection closes once the body is out, and nothing fails afterwards (a closed
    transport is not aborted again)."""
    body = b"x" * (8 << 20)
    server = WebServer(("127.0.0.1", 0), site(body))
    server.start()
    try:
        for _ in range(2):
            with socket.socket() as sock:
                # A small receive window, set before connecting (no autotuning), and a
                # slow reader: the body's end waits in the server's buffer at close.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
                sock.settimeout(10)
                sock.connect(("127.0.0.1", server.port))
                sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                received = b""
                while chunk := sock.recv(65536):
                    received += chunk
                    time.sleep(0.0005)
                assert received.endswith(b"\r\n\r\n" + body)
    finally:
        server.stop()
    gc.collect()  # a task that ended with an error says so when it is collected
    assert [e for e in debug_logs if e["log_level"] != "debug"] == []


def test_a_closed_connection_leaves_nothing_for_the_garbage_collector(serve: Serve) -> None:
    """Connections opened and closed (by the client, by the server after Connection:
    close, and kept alive over several requests) leave no object that only the garbage
    collector would free: refcounting frees each one's transport at once, so a stream of
    new connections never builds up a young generation whose collection pauses the loop."""
    server = serve()

    def one_by_one(close: bool) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        try:
            for _ in range(3):
                conn.request("GET", "/metrics", headers={"Connection": "close"} if close else {})
                assert conn.getresponse().read() == b"up 1\n"
                if close:
                    break
        finally:
            conn.close()

    one_by_one(close=True)  # the loop's own first-time objects
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for i in range(40):
            one_by_one(close=i % 2 == 0)
        deadline = time.monotonic() + 5
        while server.open_connections and time.monotonic() < deadline:
            time.sleep(0.01)  # the last connections' ends, on the loop
        time.sleep(0.1)
        gc.collect()
        left = [type(o).__qualname__ for o in gc.garbage if "Transport" in type(o).__qualname__]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


def test_a_connection_closed_after_flushing_is_dropped_without_error() -> None:
    """A transport closed with data still buffered closes once the data is out; dropping
    it afterwards (as every connection's end does) must not fail: Python 3.11's socket
    transport raises on abort() then, and the connection's task would end in an error."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        ours, peer = socket.socketpair()
        with peer:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            peer.setblocking(False)
            _, writer = await asyncio.open_connection(sock=ours)
            writer.write(b"x" * (1 << 20))  # more than the kernel takes: the rest waits
            writer.close()
            while await loop.sock_recv(peer, 65536):
                pass
            await writer.wait_closed()
            drop(writer.transport)
            assert writer.transport.is_closing()

    asyncio.run(scenario())


def test_a_failing_site_is_a_generic_500_and_one_event(
    serve: Serve, debug_logs: list[structlog.typing.EventDict]
) -> None:
    """An exception in a Site callable: 500 with a generic body (no exception text, no
    path), one http_request_failed event; the connection stays usable."""
    server = serve(site(fail=True))
    with connect(server) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body = read_response(sock)
        assert (status, body) == (500, b"internal error\n")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock)[0] == 200
    failed = [e for e in debug_logs if e["event"] == "http_request_failed"]
    assert len(failed) == 1 and failed[0]["path"] == "/metrics"
    assert "secret" in failed[0]["error"]  # the log says what went wrong; the answer not


# ----------------------------------------------------------------------------- stop


def test_stop_lets_a_response_in_flight_finish_and_closes_the_rest() -> None:
    """stop() from another thread: the port closes at once, an idle connection is
    closed, the scrape in flight is answered (Connection: close), all within seconds."""
    gate = threading.Event()
    server = WebServer(("127.0.0.1", 0), site(gate=gate), limits=Limits(stop_grace_s=3))
    server.start()
    assert server.alive()
    idle = connect(server)
    busy = connect(server)
    busy.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    stopper = threading.Thread(target=server.stop)
    time.sleep(0.1)  # the scrape is in the pool, waiting for the gate
    start = time.monotonic()
    stopper.start()
    try:
        assert closed_by_server(idle, 2)
        with pytest.raises(ConnectionRefusedError):
            connect(server).close()
        gate.set()
        status, headers, body = read_response(busy)
        assert (status, headers["Connection"], body) == (200, "close", b"up 1\n")
        stopper.join(5)
        assert not stopper.is_alive() and time.monotonic() - start < 3
        assert not server.alive()
    finally:
        gate.set()
        idle.close()
        busy.close()
        server.stop()  # a second stop is harmless


def test_stop_drops_a_response_that_outlasts_the_grace_period() -> None:
    """A Site call that does not return within stop_grace_s: stop() still ends."""
    gate = threading.Event()
    server = WebServer(("127.0.0.1", 0), site(gate=gate), limits=Limits(stop_grace_s=0.3))
    server.start()
    try:
        with connect(server) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.1)
            start = time.monotonic()
            server.stop()
            assert time.monotonic() - start < 3
            assert closed_by_server(sock, 2)
            assert not server.alive()
    finally:
        gate.set()


def test_alive_until_stopped() -> None:
    """alive(): False before start, True while serving, False after stop."""
    server = WebServer(("127.0.0.1", 0), site())
    assert not server.alive()
    server.start("alive-http")
    assert server.alive()
    assert "alive-http" in {t.name for t in threading.enumerate()}
    server.stop()
    assert not server.alive()
    assert "alive-http" not in {t.name for t in threading.enumerate()}


def test_limits_refuse_a_value_that_is_not_positive() -> None:
    """A zero or negative limit is an error naming the field."""
    with pytest.raises(ValueError, match=r"Limits\.max_connections must be positive"):
        Limits(max_connections=0)
    with pytest.raises(ValueError, match=r"Limits\.head_timeout_s must be positive"):
        Limits(head_timeout_s=-1)


def test_a_server_starts_once_and_not_after_stop() -> None:
    """start() twice, or after stop(), is an error rather than a server on a closed socket."""
    server = WebServer(("127.0.0.1", 0), site())
    server.start()
    with pytest.raises(RuntimeError, match="starts once"):
        server.start()
    server.stop()
    stopped = WebServer(("127.0.0.1", 0), site())
    stopped.stop()
    with pytest.raises(RuntimeError, match="not after stop"):
        stopped.start()


def cgroup_tree(tmp_path: Path, self_cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A /proc/self/cgroup and a /sys/fs/cgroup tree with ``files`` under it."""
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(self_cgroup)
    for name, value in files.items():
        (cgroup / name).parent.mkdir(parents=True, exist_ok=True)
        (cgroup / name).write_text(value)
    return proc, cgroup


@pytest.mark.parametrize(
    ("self_cgroup", "files", "expected"),
    [
        ("0::/\n", {"memory.max": "671088640\n"}, 671088640),  # v2, in a container
        ("0::/kubepods/pod1/c1\n", {"kubepods/pod1/c1/memory.max": "134217728\n"}, 134217728),
        ("0::/\n", {"memory.max": "max\n"}, None),
        (
            "4:memory:/docker/abc\n0::/\n",
            {"memory/docker/abc/memory.limit_in_bytes": "1048576"},
            1048576,
        ),
        (
            "4:memory:/\n",
            {"memory/memory.limit_in_bytes": "9223372036854771712"},
            None,
        ),  # v1 unlimited
        ("0::/\n", {}, None),  # no controller mounted
        (  # v1 without a cgroup namespace: the mount shows the container's subtree
            "4:memory:/host/ctr/bench\n",
            {
                "memory/bench/memory.limit_in_bytes": "671088640",
                "memory/memory.limit_in_bytes": "9223372036854771712",
            },
            671088640,
        ),
    ],
)
def test_the_memory_limit_is_read_from_the_process_cgroup(
    tmp_path: Path, self_cgroup: str, files: dict[str, str], expected: int | None
) -> None:
    """cgroup v2's memory.max of the process's own cgroup, v1's memory.limit_in_bytes as
    the fallback; "max", v1's unlimited and a missing file are no limit."""
    proc, cgroup = cgroup_tree(tmp_path, self_cgroup, files)
    assert memory_limit(proc, cgroup) == expected


def test_the_connection_cap_is_what_half_the_memory_limit_holds() -> None:
    """640 MiB: half of it at CONNECTION_BYTES each; 128 MiB likewise; no limit: the
    wanted cap; a tiny limit: still a few connections."""
    assert memory_cap(4096, 640 * 2**20, 0.5) == 320 * 2**20 // CONNECTION_BYTES
    assert memory_cap(4096, 128 * 2**20, 0.5) == 64 * 2**20 // CONNECTION_BYTES
    assert memory_cap(4096, None, 0.5) == 4096
    assert memory_cap(4096, 2**20, 0.5) == 16
    assert memory_cap(100, 2**40, 0.5) == 100


def test_connections_of_one_address_give_way_to_its_newcomer() -> None:
    """At the per-address cap, a newcomer of that address closes its longest idle
    connection, then its longest waiting one; other addresses are untouched; with none
    of its own to close, it is refused."""
    loop = asyncio.new_event_loop()
    try:
        conns = Connections(cap=10, per_address=2)

        def opened(address: str) -> Connection:
            conn = Connection(task=loop.create_task(asyncio.sleep(10)), address=address)
            conns.add(conn)
            return conn

        a1, b1, a2 = opened("a"), opened("b"), opened("a")
        conns.busy(a1)
        conns.waiting(a1, True)  # its answer waits for its client
        assert conns.room("a")  # a2, idle, gives way
        assert a2.task is not None and a2.task.cancelling()
        assert conns.open == {a1, b1}
        a3 = opened("a")
        conns.busy(a3)  # busy, not waiting
        assert conns.room("a")  # a1, waiting, gives way
        assert conns.open == {b1, a3}
        a4 = opened("a")
        conns.busy(a4)
        assert not conns.room("a")  # a3 and a4 busy answering
        assert conns.room("b")
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def test_under_memory_pressure_a_newcomer_takes_an_open_connections_place() -> None:
    """While the memory is high, what is open is the cap (never under 16): a newcomer
    closes the longest idle connection instead of adding its own; when the memory is
    normal again, connections are added up to the cap."""
    loop = asyncio.new_event_loop()
    high = [False]
    try:
        conns = Connections(cap=100, per_address=100, pressed=lambda: high[0])
        first = []
        for _ in range(16):
            conn = Connection(task=loop.create_task(asyncio.sleep(10)), address="a")
            conns.add(conn)
            first.append(conn)
        high[0] = True
        assert conns.room("b")
        assert first[0].task is not None and first[0].task.cancelling()
        assert len(conns.open) == 15  # one closed for the newcomer
        conns.add(Connection(task=loop.create_task(asyncio.sleep(10)), address="b"))
        high[0] = False
        assert conns.room("b") and len(conns.open) == 16  # room, nothing closed
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def test_memory_pressure_reads_the_resident_memory_against_the_limit() -> None:
    """High at 85 % of the limit, read at most every quarter second; never without a
    limit; and this process's resident memory is read as a positive number of bytes."""
    rss = [0]
    now = [0.0]
    reads: list[int] = []

    def read() -> int:
        reads.append(rss[0])
        return rss[0]

    pressure = MemoryPressure(1000, rss=read, clock=lambda: now[0])
    assert not pressure()
    rss[0] = 850
    assert not pressure()  # read a moment ago: not read again
    now[0] = 0.3
    assert pressure() and pressure()
    assert len(reads) == 2
    assert not MemoryPressure(None, rss=read)()
    assert resident_bytes() > 1 << 20


def test_a_burst_of_closed_connections_is_trimmed_once() -> None:
    """Fewer than TRIM_AFTER_CLOSED closes: no trim; a burst: one trim, TRIM_INTERVAL_S
    later, however many more close meanwhile, after a collection of the cycles they left."""
    scheduled: list[tuple[float, Callable[[], None]]] = []
    trims: list[int] = []

    def trim() -> bool:
        trims.append(1)
        return True

    trimmer = Trimmer(
        lambda delay, run: scheduled.append((delay, run)),
        trim=trim,
        collect=lambda: trims.append(0),
    )
    for _ in range(TRIM_AFTER_CLOSED - 1):
        trimmer.closed()
    assert scheduled == []
    for _ in range(3 * TRIM_AFTER_CLOSED):
        trimmer.closed()
    assert [delay for delay, _ in scheduled] == [TRIM_INTERVAL_S]
    scheduled[0][1]()
    assert trims == [0, 1] and trimmer.trims == 1
