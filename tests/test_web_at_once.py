"""Scrapes answered at once, on real sockets: one that arrives with its connection, as
the connection is accepted, and a kept-alive connection's next one, as it arrives. The
same answer as the usual path, no task for a connection that closes after it, none woken
for a kept-alive one, what the kernel does not take sent in order, and every request
that cannot be answered that way left whole to the usual path."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from podres_exporter.daemon.web import Index, Limits, Site, WebServer, _rest, _slices
from tests.test_web_limits import closed_by_server, connect, read_response

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


@contextlib.contextmanager
def loop_held(server: WebServer) -> Iterator[None]:
    """The server's loop kept busy for the block: what clients connect and send
    meanwhile is all there when it accepts their connections, after the block."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        release.wait(10)

    assert server._loop is not None
    server._loop.call_soon_threadsafe(hold)
    assert holding.wait(5)
    try:
        yield
    finally:
        release.set()


def connection_tasks(server: WebServer) -> list[int]:
    """A list that grows by one for every connection the server gives a task."""
    started: list[int] = []
    usual = server._connection

    def counted(conn: Any, sock: socket.socket) -> Coroutine[Any, Any, None]:
        started.append(sock.fileno())
        return usual(conn, sock)

    server._connection = counted  # type: ignore[method-assign]
    return started


def usual_answers(server: WebServer) -> list[str]:
    """A list of the paths of the requests a connection's task answers."""
    paths: list[str] = []
    usual = server._respond

    async def counted(conn: Any, request: Any, writer: Any) -> bool:
        paths.append(request.path)
        return await usual(conn, request, writer)

    server._respond = counted  # type: ignore[method-assign]
    return paths


def get(path: str = "/metrics", *headers: str, method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def sent_while_held(server: WebServer, *requests: bytes) -> list[socket.socket]:
    """A connection for each of ``requests``, each sent whole before the server's loop
    runs again."""
    with loop_held(server):
        socks = [connect(server) for _ in requests]
        for sock, data in zip(socks, requests, strict=True):
            sock.sendall(data)
    return socks


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


# ------------------------------------------------------------------ answered at once


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
def test_a_scrape_sent_with_its_connection_is_answered_at_accept_as_usual(
    server: WebServer, headers: tuple[str, ...], method: str, body: bytes
) -> None:
    """The answer given at accept has the usual path's status, headers and body, and a
    connection that closes after it never needs a task."""
    tasks = connection_tasks(server)
    (at_once,) = sent_while_held(
        server, get("/metrics", *headers, "Connection: close", method=method)
    )
    with at_once:
        status, first, got = read_answer(at_once, method)
        assert (status, got) == (200, body)
        assert first["Connection"] == "close"
        assert closed_by_server(at_once, 2)
    assert tasks == []
    # The usual path: the connection's task reads a head that comes in two parts.
    request = get("/metrics", *headers, "Connection: close", method=method)
    with connect(server) as usual:
        usual.sendall(request[:20])
        wait_until(lambda: tasks, "a task for the partial head")
        usual.sendall(request[20:])
        status, second, got = read_answer(usual, method)
    assert (status, got) == (200, body)
    assert without_date(first) == without_date(second)


def wait_until(done: Callable[[], object], what: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def awaited(server: WebServer) -> int:
    """Connections whose first request the loop watches for (no task yet)."""
    return sum(conn.awaiting for conn in list(server._state.connections))


@pytest.mark.parametrize("keep_alive", [False, True], ids=["close", "keep-alive"])
def test_a_scrape_sent_after_its_connection_was_accepted_is_answered_as_it_arrives(
    server: WebServer, keep_alive: bool
) -> None:
    """A connection accepted before its request (a client that connects, then sends) is
    watched by the loop with no task; its scrape is answered as it arrives, and only a
    connection that stays open after it gets a task."""
    tasks = connection_tasks(server)
    with connect(server) as sock:
        wait_until(lambda: awaited(server) == 1, "the connection watched")
        assert tasks == []
        sock.sendall(get() if keep_alive else get("/metrics", "Connection: close"))
        status, headers, body = read_response(sock)
        assert (status, body) == (200, TEXT)
        if keep_alive:
            assert "Connection" not in headers
            sock.sendall(get("/healthz", "Connection: close"))
            assert read_response(sock)[::2] == (200, b"ok\n")
        else:
            assert headers["Connection"] == "close"
        assert closed_by_server(sock, 2)
    assert len(tasks) == (1 if keep_alive else 0)
    assert awaited(server) == 0
    assert server._state.connections == set()


def test_a_watched_connection_that_sends_nothing_is_dropped_at_the_heads_deadline() -> None:
    """The head's deadline runs from the accept, for a watched connection too, and a
    first part sent later (then read by its task) does not restart it."""
    limits = dataclasses.replace(QUICK, head_timeout_s=1.0)
    server = WebServer(("127.0.0.1", 0), ready_site(), limits=limits)
    server.start("test-http")
    try:
        with connect(server) as silent, connect(server) as trickling:
            wait_until(lambda: awaited(server) == 2, "both connections watched")
            start = time.monotonic()
            time.sleep(0.6)
            trickling.sendall(b"GET /metrics HTTP/1.1\r\n")  # restarted: closed at 1.6 s
            assert closed_by_server(silent, 3)
            assert closed_by_server(trickling, 3)
            assert time.monotonic() - start < 1.4
        wait_until(lambda: not server._state.connections, "no connection left")
    finally:
        server.stop()


def test_a_watched_connection_that_fails_as_its_request_arrives_is_dropped_alone(
    server: WebServer,
) -> None:
    """A failure while answering a watched connection's first request is that
    connection's: it is logged and closed, and the server goes on serving."""
    usual = server._ready_answer
    calls = 0

    def failing_once(data: bytes) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("broken")
        return usual(data)

    server._ready_answer = failing_once  # type: ignore[method-assign]
    with capture_logs() as logs, connect(server) as sock:
        wait_until(lambda: awaited(server) == 1, "the connection watched")
        sock.sendall(get("/metrics", "Connection: close"))
        assert closed_by_server(sock, 2)
    assert [e["error"] for e in logs if e["event"] == "http_connection_failed"] == [
        "RuntimeError('broken')"
    ]
    assert server._state.connections == set()
    with connect(server) as again:
        again.sendall(get("/metrics", "Connection: close"))
        assert read_response(again)[::2] == (200, TEXT)


def test_a_watched_connection_makes_room_for_a_new_one_at_the_cap() -> None:
    """At the connection cap, a connection still waiting for its first request is idle:
    it is closed for a newcomer, which is served."""
    limits = dataclasses.replace(QUICK, max_connections=1, head_timeout_s=5.0)
    server = WebServer(("127.0.0.1", 0), ready_site(), limits=limits)
    server.start("test-http")
    try:
        with connect(server) as waiting:
            wait_until(lambda: awaited(server) == 1, "the connection watched")
            with connect(server) as newcomer:
                newcomer.sendall(get("/metrics", "Connection: close"))
                assert read_response(newcomer)[::2] == (200, TEXT)
            assert closed_by_server(waiting, 2)
    finally:
        server.stop()


def test_stop_closes_watched_connections() -> None:
    server = WebServer(("127.0.0.1", 0), ready_site(), limits=QUICK)
    server.start("test-http")
    with connect(server) as sock:
        wait_until(lambda: awaited(server) == 1, "the connection watched")
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < QUICK.stop_grace_s
        assert closed_by_server(sock, 2)
    assert not server.alive()


def test_a_connection_kept_alive_after_an_answer_at_accept_goes_on_as_usual(
    server: WebServer,
) -> None:
    """Kept alive, the connection's task serves its next requests, then closes it when it
    idles out (after ``idle_timeout_s``, not the head's deadline)."""
    tasks = connection_tasks(server)
    (sock,) = sent_while_held(server, get())
    with sock:
        status, headers, body = read_response(sock)
        assert (status, body) == (200, TEXT)
        assert "Connection" not in headers
        sock.sendall(get("/healthz"))
        assert read_response(sock)[::2] == (200, b"ok\n")
        sock.sendall(get("/metrics", f"Accept: {OPENMETRICS}"))
        assert read_response(sock)[::2] == (200, OM_BODY)
        assert closed_by_server(sock, 2)
    assert len(tasks) == 1


def test_http_1_0_is_answered_at_accept_with_its_own_keep_alive_rule(server: WebServer) -> None:
    """HTTP/1.0 closes unless it asks to keep the connection, and then is told so."""
    closes, keeps = sent_while_held(
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
    ("sent", "more", "answers"),
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
def test_what_cannot_be_answered_at_accept_is_answered_whole_as_usual(
    server: WebServer, sent: bytes, more: bytes, answers: list[tuple[int, bytes | None]]
) -> None:
    """A head not yet whole, pipelined requests, other paths and requests the loop
    refuses: what was read at accept is the start of what the connection's task reads."""
    tasks = connection_tasks(server)
    (sock,) = sent_while_held(server, sent)
    with sock:
        if more:
            time.sleep(0.05)
            sock.sendall(more)
        got = [read_response(sock) for _ in answers]
        assert [status for status, _, _ in got] == [status for status, _ in answers]
        for (_, _, body), (_, want) in zip(got, answers, strict=True):
            assert want is None or body == want
        assert closed_by_server(sock, 2)
    assert len(tasks) == 1


# ------------------------------------------------------------- more than the kernel takes


def test_the_rest_of_a_large_answer_given_at_accept_is_sent_by_its_task() -> None:
    """An answer larger than the socket takes at once: its task sends the rest, in
    order, and then serves the connection's next request."""
    body = bytes(range(256)) * (1 << 16)  # 16 MiB
    slow_reader = Limits(idle_timeout_s=10)  # the test reads it slowly
    server = WebServer(("127.0.0.1", 0), ready_site(body), limits=slow_reader)
    server.start("test-http")
    try:
        tasks = connection_tasks(server)
        (sock,) = sent_while_held(server, get())
        with sock:
            deadline = time.monotonic() + 5
            while not tasks:
                assert time.monotonic() < deadline, "no task took the rest of the answer"
                time.sleep(0.01)
            status, _, got = read_response(sock)
            assert status == 200 and got == body + LIVE
            sock.sendall(get("/healthz"))
            assert read_response(sock)[::2] == (200, b"ok\n")
        assert len(tasks) == 1
    finally:
        server.stop()


def test_stop_lets_the_rest_of_an_answer_given_at_accept_finish() -> None:
    """The connection is busy while the rest of its answer is out: stop() waits for it
    (within ``stop_grace_s``) instead of dropping it as idle."""
    body = b"x" * (32 << 20)
    server = WebServer(("127.0.0.1", 0), ready_site(body), limits=QUICK)
    server.start("test-http")
    stopper = threading.Thread(target=server.stop)
    try:
        (sock,) = sent_while_held(server, get())
        with sock:
            head = sock.recv(256)
            assert head.startswith(b"HTTP/1.1 200 OK")
            time.sleep(0.2)  # the rest waits in the task for the client
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


# ------------------------------------------------------------------- kept alive


def test_a_kept_alive_connections_next_scrapes_are_answered_as_they_arrive(
    server: WebServer,
) -> None:
    """Scrape after scrape on one connection, in either format: none wakes its task,
    which answers what else comes (a probe, pipelined scrapes); ``Connection: close``
    closes it."""
    answers = usual_answers(server)
    (sock,) = sent_while_held(server, get())
    om_gzip = ("Accept: " + OPENMETRICS, "Accept-Encoding: gzip")
    with sock:
        assert read_response(sock)[::2] == (200, TEXT)
        for headers, body in [((), TEXT), (om_gzip, gzip.compress(OM_BODY, mtime=0))] * 3:
            sock.sendall(get("/metrics", *headers))
            status, got_headers, got = read_response(sock)
            assert (status, got) == (200, body)
            assert "Connection" not in got_headers
        assert answers == []
        sock.sendall(get("/healthz"))
        assert read_response(sock)[::2] == (200, b"ok\n")
        sock.sendall(get() + get())  # pipelined: the task answers both, in order
        assert [read_response(sock)[::2] for _ in range(2)] == [(200, TEXT)] * 2
        assert answers == ["/healthz", "/metrics", "/metrics"]
        sock.sendall(get("/metrics", "Connection: close"))
        status, got_headers, got = read_response(sock)
        assert (status, got_headers["Connection"], got) == (200, "close", TEXT)
        assert closed_by_server(sock, 2)
    assert answers == ["/healthz", "/metrics", "/metrics"]


def test_a_large_kept_alive_answer_is_answered_as_it_arrives_too() -> None:
    """An answer larger than the socket takes at once (16 MiB) is answered as its
    request arrives all the same, whole and in order, its task woken only for the
    requests it answers itself."""
    body = bytes(range(256)) * (1 << 16)  # 16 MiB
    server = WebServer(("127.0.0.1", 0), ready_site(body), limits=Limits(idle_timeout_s=10))
    server.start("test-http")
    try:
        answers = usual_answers(server)
        with connect(server) as sock:
            for path in ("/healthz", "/metrics", "/metrics", "/readyz", "/metrics"):
                sock.sendall(get(path))
                status, _, got = read_response(sock)
                assert status == 200
                assert got == {"/healthz": b"ok\n", "/readyz": b"ready\n"}.get(path, body + LIVE)
        assert answers == ["/healthz", "/readyz"]
    finally:
        server.stop()


def test_a_client_that_leaves_the_rest_unread_is_dropped_at_the_write_deadline(
    debug_logs: list[dict[str, Any]],
) -> None:
    """The rest of a kept-alive answer given as its request arrived, never read: the
    connection is dropped at the write deadline (one debug event), nothing of it is left
    running, and the server goes on serving."""
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
            (conn,) = server._state.connections
            sock.sendall(get())
            start = time.monotonic()
            while (rest := conn.flushed) is None:  # the rest, sent by a task of its own
                assert time.monotonic() < start + 5, "not answered as it arrived"
                time.sleep(0.001)
            while not any(e["event"] == "http_write_timeout" for e in debug_logs):
                assert time.monotonic() < start + 5, debug_logs
                time.sleep(0.02)
            assert time.monotonic() - start >= 0.45
            assert closed_by_server(sock, 5)
        deadline = time.monotonic() + 5
        while not (rest.done() and conn.task is not None and conn.task.done()):
            assert time.monotonic() < deadline, "a task of the dropped connection still runs"
            time.sleep(0.01)
        assert rest.cancelled()
        assert server._state.connections == set()
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
def stalled_scrapes(server: WebServer, body: bytes) -> Iterator[tuple[socket.socket, int]]:
    """A kept-alive connection sent one scrape at a time, each answered as it arrives,
    not read, until the kernel takes one only in part (its rest left to a task of its
    own); then three more, which wait. Yields the socket, which has read
    nothing yet, and the number of scrapes sent."""
    at_once: list[int] = []
    answer = server._answer_waiting

    def counted(conn: Any, data: bytes) -> bool:
        answered = answer(conn, data)
        at_once.append(answered)
        return answered

    server._answer_waiting = counted  # type: ignore[method-assign]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", server.port))
    with sock:
        sock.sendall(get("/healthz"))
        assert read_response(sock)[::2] == (200, b"ok\n")
        (conn,) = server._state.connections
        sent = 0
        while conn.flushed is None or conn.flushed.done():
            assert sent < unread_capacity() // len(body) + 8, "every answer went out whole"
            arrived = len(at_once)
            sock.sendall(get())
            sent += 1
            deadline = time.monotonic() + 5
            while len(at_once) == arrived:
                assert time.monotonic() < deadline, "no answer"
                time.sleep(0.001)
            assert at_once[-1], "not answered as it arrived"
        for _ in range(3):
            sock.sendall(get())
        yield sock, sent + 3


@pytest.mark.parametrize("size", [200 << 10, 4 << 20], ids=["200KiB", "4MiB"])
def test_the_rest_of_a_kept_alive_answer_goes_out_before_the_next_one(size: int) -> None:
    """A kept-alive scrape the kernel takes only in part: a task of its own sends the
    rest, the connection busy meanwhile; what arrives meanwhile is answered after it, in
    order, by the connection's task."""
    body = bytes(range(256)) * (size // 256)
    server = WebServer(("127.0.0.1", 0), ready_site(body), limits=Limits(idle_timeout_s=10))
    server.start("test-http")
    try:
        answers = usual_answers(server)
        with stalled_scrapes(server, body) as (sock, sent):
            (conn,) = server._state.connections
            assert conn.busy
            for _ in range(sent):
                status, _, got = read_response(sock)
                assert status == 200 and got == body + LIVE
            sock.sendall(get("/readyz"))
            assert read_response(sock)[::2] == (200, b"ready\n")
        assert answers.count("/metrics") == 3  # those sent while the rest was out
    finally:
        server.stop()


@pytest.mark.parametrize("size", [200 << 10, 4 << 20], ids=["200KiB", "4MiB"])
def test_stop_lets_the_rest_of_a_kept_alive_answer_finish(size: int) -> None:
    """stop() while the rest of an answer given as its request arrived is still being
    sent: that answer finishes whole, then the connection closes."""
    body = bytes(range(256)) * (size // 256)
    server = WebServer(("127.0.0.1", 0), ready_site(body), limits=QUICK)
    server.start("test-http")
    stopper = threading.Thread(target=server.stop)
    try:
        with stalled_scrapes(server, body) as (sock, _):
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
    """``metrics_ready`` raising, at accept and on a kept-alive connection: a generic 500
    and an error event each time; the server goes on."""

    def broken(*, openmetrics: bool, gz: bool) -> bytes:
        raise RuntimeError("cannot read /var/lib/secret/state.db")

    site = ready_site()
    server = WebServer(("127.0.0.1", 0), dataclasses.replace(site, metrics_ready=broken))
    server.start("test-http")
    try:
        (sock,) = sent_while_held(server, get())
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
    ("pieces", "sent", "rest"),
    [
        ((b"HEAD", b"body"), 0, b"HEADbody"),
        ((b"HEAD", b"body"), 2, b"ADbody"),
        ((b"HEAD", b"body"), 4, b"body"),
        ((b"HEAD", b"body"), 6, b"dy"),
        ((b"HEAD", b"body"), 8, b""),
        ((b"HEAD", b"bo", b"dy"), 3, b"Dbody"),
        ((b"HEAD", b"bo", b"dy"), 5, b"ody"),
        ((b"HEAD", b"bo", b"dy"), 6, b"dy"),
    ],
)
def test_rest_is_what_follows_the_bytes_sent(
    pieces: tuple[bytes, ...], sent: int, rest: bytes
) -> None:
    """The rest, none of it copied: a view of the piece begun, then the pieces after it."""
    got = _rest(pieces, sent)
    assert b"".join(got) == rest
    for part in got:
        assert any(part is p or (isinstance(part, memoryview) and part.obj is p) for p in pieces)


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
    slices = list(_slices(pieces, slice_size))
    assert b"".join(slices) == b"".join(pieces)
    assert all(len(s) == slice_size for s in slices[:-1])
    assert all(0 < len(s) <= slice_size for s in slices)
    for piece_slice in slices:
        if len(set(bytes(piece_slice))) == 1:  # from one piece
            assert isinstance(piece_slice, memoryview)
            assert any(piece_slice.obj is p for p in pieces)
