"""The owned HTTP/1.1 layer beside h11 and aiohttp: the same site, the same cells.

Usage: python bench/http_libraries.py [--quick] [--repeat N] [--scenario NAME]

Three servers, each in a process of its own, serve the very same :class:`Site`: the
exporter's (``cli.export.Exporter`` on the scenario's simulated host, every collector
on: ``/metrics`` with its content negotiation, text or OpenMetrics, gzip or not, from
the cached exposition and its live part; ``/healthz``, ``/readyz``, ``/``). The
exporter polls once at start and then every hour, so that no poll falls inside the
cells: the view, and so the body, stays the same throughout. The servers:

* ``podres``: :class:`podres_exporter.daemon.web.WebServer`, as ``podres export`` runs it;
* ``h11``: h11 (parsing and framing, no I/O of its own) driven by an ``asyncio.Protocol``
  under the same asyncio loop in a thread, written here (:class:`H11Protocol`): keep-alive
  and pipelining, the owned layer's limits where they apply (an 8 KiB head answered 431,
  the head's deadline of 10 s from the accept or from a kept-alive request's first byte,
  75 s idle, 30 s to write an answer), ``GET`` and ``HEAD`` only, no request body, the
  same two pools (4 workers, 2 for the probes), and a body answered on the loop when
  ``Site.metrics_ready`` has it; the answer goes by one ``writev`` while the transport
  holds nothing, as the owned layer's one ``sendmsg``;
* ``aiohttp``: ``aiohttp.web`` with its defaults but for a 75 s keep-alive (``run_app``'s
  default, the owned layer's idle deadline) and no access log, the site's callables behind
  its router, the same pools.

Measured, in ``--repeat`` repeats, each alternating between the servers as
bench/exporter.py does (its helpers: :func:`exporter.latencies`, :func:`exporter.under_wrk`):

1. **latency**: p50, p99 and the server's CPU per scrape (``/proc/<pid>/stat``) of 1 and
   10 Python scrapers (processes of their own), kept alive and on a new connection a
   scrape, text and OpenMetrics with gzip: 1,000 scrapes a cell for each server in five
   rounds; then the same four asks from wrk with 10 connections (when installed).
2. **hardening**, bench/web_servers.py's cells: sequential keep-alive scrapes on a quiet
   server, then with 200 slowloris clients (a head that never ends, a byte a second) and
   1,000 idle connections open: is every scrape still served, how many threads; then,
   12 s after the attack connected (past a 10 s head deadline), how many of the slowloris
   and of the idle connections the server has closed.
3. **malformed heads**: what each answers to a head over 8 KiB, a request body on a
   ``GET`` (chunked, and with both ``Content-Length`` and ``Transfer-Encoding``: request
   smuggling's shapes), lines ending in a bare LF, a folded header line, a space before
   a header's colon, two ``Host`` headers, an HTTP/1.1 request with none: the status, and
   whether the connection is closed after it.

``--quick`` (the ``small`` node, a few scrapes a cell, one repeat, no wrk, a smaller
attack and no wait for the deadlines) only shows that it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from email.utils import formatdate
from functools import lru_cache, partial
from http import HTTPStatus
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

import exporter
import footprint
import web_servers

from podres_exporter.daemon.web import Body, Limits, Site, accepts_gzip

if TYPE_CHECKING:
    import h11
    from aiohttp import web as aioweb

    from podres_exporter.cli.export import Exporter

SERVERS = ("podres", "h11", "aiohttp")
HERE = Path(__file__)
LIMITS = Limits()  # the owned layer's defaults, which the h11 server follows
PROBES = frozenset({"/healthz", "/readyz"})
# How long after the attack connected its connections are counted as closed: past the
# head's deadline, which counts from the accept.
CLOSED_AFTER_S = LIMITS.head_timeout_s + 2.0
# A malformed head's answer: read until the server closes or is quiet this long.
PROBE_QUIET_S = 0.5


# ----------------------------------------------------------------------------- the site


@lru_cache(maxsize=64)
def negotiate(accept: str, accept_encoding: str | None) -> tuple[bool, str, bool]:
    """What a ``/metrics`` request with these headers gets, as the owned layer decides it:
    whether OpenMetrics, its content type, and whether gzipped."""
    from prometheus_client.exposition import choose_encoder

    _, content_type = choose_encoder(accept)
    openmetrics = content_type.startswith("application/openmetrics-text")
    return openmetrics, content_type, accepts_gzip(accept_encoding)


@lru_cache(maxsize=2)
def http_date(second: int) -> bytes:
    return formatdate(second, usegmt=True).encode("latin-1")


@dataclass(frozen=True)
class Answer:
    """What the site answers to one request, before any HTTP framing."""

    status: int
    body: Body
    content_type: str = "text/plain; charset=utf-8"
    gz: bool = False
    headers: tuple[tuple[str, str], ...] = ()


def text(status: HTTPStatus, line: str, *headers: tuple[str, str]) -> Answer:
    return Answer(status.value, f"{line}\n".encode(), headers=headers)


class Routes:
    """The site's routing and the pools its callables run in, as the owned layer has
    them (4 workers, 2 for the probes): an adapter answers by :meth:`at_once` on the
    loop, else by :meth:`later` from a pool."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.pool = ThreadPoolExecutor(LIMITS.workers, thread_name_prefix="bench-worker")
        self.probe_pool = ThreadPoolExecutor(LIMITS.probe_workers, thread_name_prefix="bench-probe")

    def at_once(self, path: str, accept: str, accept_encoding: str | None) -> Answer | None:
        """``/metrics`` from ``metrics_ready`` when it has the body now, else None."""
        ready = self.site.metrics_ready
        if path != "/metrics" or ready is None:
            return None
        openmetrics, content_type, gz = negotiate(accept, accept_encoding)
        body = ready(openmetrics=openmetrics, gz=gz)
        return None if body is None else Answer(200, body, content_type, gz)

    def later(self, path: str, accept: str, accept_encoding: str | None) -> Future[Answer]:
        """The answer from a pool thread (the probes' own for the probes)."""
        pool = self.probe_pool if path in PROBES else self.pool
        return pool.submit(self._answer, path, accept, accept_encoding)

    def _answer(self, path: str, accept: str, accept_encoding: str | None) -> Answer:
        site = self.site
        if path == "/metrics":
            openmetrics, content_type, gz = negotiate(accept, accept_encoding)
            return Answer(200, site.metrics(openmetrics=openmetrics, gz=gz), content_type, gz)
        if path in PROBES:
            ok, line = site.health() if path == "/healthz" else site.readiness()
            return text(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, line)
        if path == "/":
            return Answer(200, site.index.render(), "text/html; charset=utf-8")
        return text(HTTPStatus.NOT_FOUND, "not found: try /metrics, /healthz, /readyz or /")

    def close(self) -> None:
        for pool in (self.pool, self.probe_pool):
            pool.shutdown(wait=False, cancel_futures=True)


# ----------------------------------------------------------------------------- h11


class H11Protocol(asyncio.Protocol):
    """One connection served by h11 under asyncio: h11 parses and frames, this class
    reads, writes, keeps the deadlines and routes (:class:`Routes`)."""

    def __init__(self, routes: Routes) -> None:
        import h11

        self._h11 = h11
        self._routes = routes
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=LIMITS.max_head_bytes)
        self._transport: asyncio.Transport | None = None
        self._fd = -1
        self._timer: asyncio.TimerHandle | None = None
        self._phase = ""  # what the timer is for: head, idle, write
        self._answering = False  # an answer comes from a pool: read no further meanwhile
        self._fed = 0  # bytes given to h11 since this request's head began

    # -------------------------------------------------------------- deadlines

    def _arm(self, seconds: float, phase: str) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._phase = phase
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._phase = None, ""

    def _expired(self) -> None:
        transport = self._transport
        if transport is None:
            return
        if self._phase == "write" and not transport.get_write_buffer_size():
            self._arm(LIMITS.idle_timeout_s, "idle")  # it went: wait for the next request
            return
        transport.abort()

    # -------------------------------------------------------------- asyncio's calls

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._fd = transport.get_extra_info("socket").fileno()
        self._arm(LIMITS.head_timeout_s, "head")  # from the accept

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._transport = None

    def data_received(self, data: bytes) -> None:
        if self._phase == "idle":
            self._arm(LIMITS.head_timeout_s, "head")  # from a kept-alive request's first byte
        self._fed += len(data)
        self._conn.receive_data(data)
        self._advance()

    def eof_received(self) -> bool:
        self._conn.receive_data(b"")
        self._advance()
        return False

    # -------------------------------------------------------------- requests

    def _advance(self) -> None:
        """Handle the events h11 has, until it needs more bytes or an answer is due."""
        h11 = self._h11
        while not self._answering and self._transport is not None:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as err:
                self._refuse(err.error_status_hint, "bad request")
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._request(event)
            elif isinstance(event, h11.ConnectionClosed):
                self._transport.close()
                return
            self._next_cycle()

    def _request(self, request: h11.Request) -> None:
        self._disarm()  # the head is in; the answer has the write's deadline
        # h11 bounds only a head that is still incomplete: one that came whole in a read
        # is measured here.
        if self._fed - len(self._conn.trailing_data[0]) > LIMITS.max_head_bytes:
            self._refuse(431, "request head too large")
            return
        headers: dict[bytes, bytes] = {}
        for name, value in request.headers:
            headers[name] = headers[name] + b", " + value if name in headers else value
        if request.method not in (b"GET", b"HEAD"):
            allow = ("Allow", "GET, HEAD")
            self._refuse(405, "only GET and HEAD are served", allow)
            return
        if b"transfer-encoding" in headers or headers.get(b"content-length", b"0") != b"0":
            self._refuse(400, "a request body is not accepted")
            return
        path = request.target.split(b"?", 1)[0].decode("latin-1")
        accept = headers.get(b"accept", b"").decode("latin-1")
        coding = headers.get(b"accept-encoding")
        accept_encoding = None if coding is None else coding.decode("latin-1")
        head_only = request.method == b"HEAD"
        try:
            answer = self._routes.at_once(path, accept, accept_encoding)
        except Exception:  # noqa: BLE001 - answer 500, keep serving
            answer = text(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")
        if answer is not None:
            self._send(answer, head_only)
            return
        self._answering = True
        future = asyncio.wrap_future(self._routes.later(path, accept, accept_encoding))
        future.add_done_callback(partial(self._answered, head_only))

    def _answered(self, head_only: bool, future: asyncio.Future[Answer]) -> None:
        self._answering = False
        if self._transport is None:
            return
        error = future.exception()
        answer = future.result() if error is None else text(HTTPStatus.INTERNAL_SERVER_ERROR, "e")
        self._send(answer, head_only)
        self._next_cycle()
        self._advance()  # a pipelined request

    def _next_cycle(self) -> None:
        """After an answer: the next request on a kept-alive connection, or the close."""
        h11, conn, transport = self._h11, self._conn, self._transport
        if transport is None or transport.is_closing():
            return
        if conn.our_state is h11.MUST_CLOSE:
            transport.close()  # after what it holds
        elif conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            self._fed = len(conn.trailing_data[0])  # a pipelined request's start
            if self._phase != "write":
                self._arm(LIMITS.idle_timeout_s, "idle")

    # -------------------------------------------------------------- answers

    def _refuse(self, status: int, line: str, *headers: tuple[str, str]) -> None:
        """Answer ``status`` and close (when an answer may still be sent), else drop."""
        transport = self._transport
        if transport is None:
            return
        if self._conn.our_state not in (self._h11.IDLE, self._h11.SEND_RESPONSE):
            transport.abort()
            return
        answer = text(HTTPStatus(status), line, ("Connection", "close"), *headers)
        self._send(answer, head_only=False)
        transport.close()

    def _send(self, answer: Answer, head_only: bool) -> None:
        h11, conn, transport = self._h11, self._conn, self._transport
        assert transport is not None
        pieces = answer.body if isinstance(answer.body, tuple) else (answer.body,)
        size = sum(map(len, pieces))
        headers = [
            ("Server", "h11"),
            ("Date", http_date(int(time.time())).decode()),
            ("Content-Type", answer.content_type),
            ("Content-Length", str(size)),
            *answer.headers,
        ]
        if answer.gz:
            headers.append(("Content-Encoding", "gzip"))
        out: list[bytes] = []
        head = conn.send(h11.Response(status_code=answer.status, headers=headers))
        assert head is not None
        out.append(head)
        if not head_only:
            for piece in pieces:
                out += conn.send_with_data_passthrough(h11.Data(data=piece)) or ()
        end = conn.send(h11.EndOfMessage())
        if end:
            out.append(end)
        self._write(out)

    def _write(self, out: list[bytes]) -> None:
        """``out`` by one ``writev`` while the transport holds nothing (none of it copied),
        what the kernel does not take through the transport, under the write deadline."""
        transport = self._transport
        assert transport is not None
        if not transport.get_write_buffer_size():
            try:
                sent = os.writev(self._fd, out)
            except BlockingIOError:
                sent = 0
            except OSError:
                transport.abort()
                return
            while out and sent >= len(out[0]):
                sent -= len(out.pop(0))
            if out and sent:
                out[0] = out[0][sent:]
        for chunk in out:
            transport.write(chunk)
        if transport.get_write_buffer_size():
            self._arm(LIMITS.write_timeout_s, "write")


async def serve_h11(routes: Routes, port: int, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: H11Protocol(routes), "127.0.0.1", port, backlog=LIMITS.backlog
    )
    async with server:
        await stop.wait()


# ----------------------------------------------------------------------------- aiohttp


def aiohttp_app(routes: Routes) -> aioweb.Application:
    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        accept = request.headers.get("Accept", "")
        accept_encoding = request.headers.get("Accept-Encoding")
        answer = routes.at_once(request.path, accept, accept_encoding)
        if answer is None:
            answer = await asyncio.wrap_future(routes.later(request.path, accept, accept_encoding))
        headers = {"Content-Type": answer.content_type, **dict(answer.headers)}
        if answer.gz:
            headers["Content-Encoding"] = "gzip"
        body = answer.body if isinstance(answer.body, bytes) else b"".join(answer.body)
        return web.Response(status=answer.status, body=body, headers=headers)

    app = web.Application()
    for path in ("/", "/metrics", *PROBES):
        app.router.add_get(path, handle)  # and HEAD; other methods: 405
    return app


async def serve_aiohttp(routes: Routes, port: int, stop: asyncio.Event) -> None:
    from aiohttp import web

    # keepalive_timeout: web.run_app's default and the owned layer's idle deadline (an
    # AppRunner's own default is an hour).
    runner = web.AppRunner(
        aiohttp_app(routes),
        access_log=None,
        handle_signals=False,
        keepalive_timeout=LIMITS.idle_timeout_s,
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=LIMITS.backlog)
    await site.start()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


# ----------------------------------------------------------------------------- the servers (child)


def exporter_for(scenario: str, sock: str, hostdir: Path, port: int) -> Exporter:
    """The exporter on ``scenario``'s simulated host (written under ``hostdir``), its web
    server bound to ``port`` (0: any, when a library serves its site instead)."""
    import simproc

    from bench import host_settings
    from podres_exporter.cli.export import Exporter
    from podres_exporter.sources.gpu import NvmlBackend
    from podres_sim import SimKubelet
    from podres_sim.host import SimHost

    host = SimHost(SimKubelet(simproc.scenario(scenario), hostdir / "unused.sock"), hostdir)
    settings = replace(host_settings(Path(sock), host), listen_address=("127.0.0.1", port))
    backend = NvmlBackend(host.nvml, slow_interval_s=settings.source_interval_gpu_slow_s)
    return Exporter(settings, gpu_backend=backend)


def serve(kind: str, scenario: str, sock: str, hostdir: Path, port: int) -> int:
    """Serve the exporter's site by ``kind`` on ``port`` until SIGTERM."""
    from podres_exporter.daemon import process

    process.configure_logging("warning", "json")
    process.raise_open_files_limit()  # as podres export does, for every kind
    exp = exporter_for(scenario, sock, hostdir, port if kind == "podres" else 0)
    process.tune_gc()
    process.tune_switch_interval()
    with process.stop_on_signals() as stop:
        if kind == "podres":
            exp.start()
            try:
                stop.wait()
            finally:
                exp.stop("benchmark done")
            return 0
        # The same site; /healthz asks the poller alone (the owned server does not run).
        routes = Routes(replace(exp.server.site, health=exp.poller.health))
        library = serve_h11 if kind == "h11" else serve_aiohttp
        exp.poller.start()
        try:
            run_library(library, routes, port, stop.wait)
        finally:
            routes.close()
            exp.poller.stop(interrupt=exp.reader.close)
            exp.server.stop()
    return 0


def run_library(
    library: Callable[[Routes, int, asyncio.Event], object],
    routes: Routes,
    port: int,
    wait: Callable[[], object],
) -> None:
    """``library``'s server in an event loop of its own thread (as the owned server runs)
    until ``wait`` returns."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    main = library(routes, port, stop)
    assert asyncio.iscoroutine(main)
    thread = threading.Thread(target=loop.run_until_complete, args=(main,), name="bench-http")
    thread.start()
    try:
        wait()
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


# ----------------------------------------------------------------------------- measuring (parent)


def start_servers(node: exporter.Node) -> list[footprint.Daemon]:
    """Each of :data:`SERVERS` in a process of its own, started side by side, once ready."""
    servers = []
    for kind in SERVERS:
        port = footprint.free_port()
        hostdir = node.tmp / f"host-{kind}"
        hostdir.mkdir()
        args = [HERE, "--serve", kind, node.scenario, str(node.socket), str(hostdir), str(port)]
        servers.append(footprint.spawn(kind, [str(a) for a in args], node.tmp))
        servers[-1].url = f"http://127.0.0.1:{port}"
    assert node.sim is not None
    try:
        for daemon in servers:
            footprint.wait_ready(daemon, [node.sim, *servers])
    except BaseException:
        for daemon in servers:
            footprint.stop(daemon)
        raise
    return servers


def port_of(daemon: footprint.Daemon) -> int:
    return int(daemon.url.rsplit(":", 1)[1])


@dataclass
class Sample:
    """One server's figures in one cell of one repeat."""

    p50: float
    p99: float
    cpu_per_scrape: float


@dataclass
class Cells:
    """Every repeat's figures: (client, ask, scrapers) -> server -> one sample a repeat."""

    rows: dict[tuple[str, exporter.Ask, int], dict[str, list[Sample]]] = field(default_factory=dict)

    def add(
        self,
        client: str,
        cells: Sequence[exporter.Figures],
        asks: Sequence[tuple[exporter.Ask, int]],
    ) -> None:
        for (ask, scrapers), group in zip(asks, exporter.groups(cells, len(SERVERS)), strict=True):
            row = self.rows.setdefault((client, ask, scrapers), {})
            for server, c in zip(SERVERS, group, strict=True):
                row.setdefault(server, []).append(Sample(c.p50, c.p99, c.cpu_per_scrape))


PYTHON_ASKS = [
    (exporter.Ask(openmetrics, keep_alive), scrapers)
    for openmetrics in (False, True)
    for keep_alive in (True, False)
    for scrapers in (1, 10)
]
WRK_ASKS = [
    (exporter.Ask(openmetrics, keep_alive), exporter.WRK_CONNECTIONS)
    for openmetrics in (False, True)
    for keep_alive in (True, False)
]


@dataclass
class Hardened:
    """bench/web_servers.py's cells for one server, and what it closed of the attack."""

    server: str
    quiet: web_servers.Scrapes
    attacked: web_servers.Scrapes
    threads: int
    connected: int
    held: int
    slow_closed: int | None  # None: not waited for (quick)
    idle_closed: int | None


def closed_by_server(socks: Sequence[socket.socket | None]) -> int:
    """How many of ``socks`` the server has closed (an answer it sent first is read)."""
    closed = 0
    for sock in socks:
        if sock is None:
            continue
        sock.setblocking(False)
        try:
            while data := sock.recv(65536):
                del data
            closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    return closed


def under_attack(
    daemon: footprint.Daemon, slow: int, idle: int, scrapes: int, wait_closed: bool
) -> Hardened:
    port, pid = port_of(daemon), daemon.proc.pid
    quiet = web_servers.scrape(port, scrapes, 5.0)
    base = web_servers.fds_of(pid)
    started = time.monotonic()
    attack = web_servers.Attack(port, slow, idle, 10.0)
    try:
        held = web_servers.settle(pid, base, attack.connected, 10.0)
        attacked = web_servers.scrape(port, scrapes, 5.0)
        threads = web_servers.threads_of(pid)
        slow_closed = idle_closed = None
        if wait_closed:
            time.sleep(max(0.0, started + CLOSED_AFTER_S - time.monotonic()))
            slow_closed = closed_by_server(attack.slow)
            idle_closed = closed_by_server(attack.idle)
    finally:
        attack.close()
    daemon.check_alive()
    return Hardened(
        daemon.name, quiet, attacked, threads, attack.connected, held, slow_closed, idle_closed
    )


HOST = b"Host: bench\r\n"
MALFORMED = (
    (
        "head over 8 KiB",
        b"GET /healthz HTTP/1.1\r\n" + HOST + b"X-Pad: " + b"a" * 9000 + b"\r\n\r\n",
    ),
    (
        "GET with a chunked body",
        b"GET /healthz HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "Content-Length and Transfer-Encoding",
        b"GET /healthz HTTP/1.1\r\n" + HOST + b"Content-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "Transfer-Encoding not chunked last",
        b"GET /healthz HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked, identity\r\n\r\n",
    ),
    ("bare LF line ends", b"GET /healthz HTTP/1.1\n" + HOST.replace(b"\r", b"") + b"\n"),
    ("folded header line", b"GET /healthz HTTP/1.1\r\n" + HOST + b"X-A: a\r\n b\r\n\r\n"),
    ("space before a colon", b"GET /healthz HTTP/1.1\r\nHost : bench\r\n\r\n"),
    ("two Host headers", b"GET /healthz HTTP/1.1\r\n" + HOST + HOST + b"\r\n"),
    ("HTTP/1.1 with no Host", b"GET /healthz HTTP/1.1\r\n\r\n"),
)


def malformed(port: int, raw: bytes) -> str:
    """What a server answers to ``raw``: the statuses of its answers, and whether it
    closed the connection (else it was left open)."""
    received = b""
    closed = False
    with socket.create_connection(("127.0.0.1", port), timeout=PROBE_QUIET_S) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(raw)
        while True:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            except OSError:
                closed = True
                break
            if not data:
                closed = True
                break
            received += data
    statuses = [
        line.split()[1].decode()
        for line in received.split(b"\r\n")
        if line.startswith(b"HTTP/1.") and len(line.split()) > 1
    ]
    return f"{'+'.join(statuses) or 'none'}, {'closed' if closed else 'open'}"


# ----------------------------------------------------------------------------- report


def spread(values: Sequence[float], unit: Callable[[float], str]) -> str:
    mid = statistics.median(values)
    if len(values) == 1:
        return unit(mid)
    return f"{unit(mid)} ({unit(min(values)).split()[0]}-{unit(max(values))})"


def report_latency(cells: Cells, repeat: int, count: int) -> None:
    footprint.print_head("/metrics latency: the same site by each HTTP layer")
    print(
        f"  {'client ask':<38} "
        + " ".join(f"{s + ' p50':>12} {'p99':>22} {'CPU':>7}" for s in SERVERS)
    )
    for (client, ask, scrapers), row in cells.rows.items():
        label = f"{client} {ask.label}, {scrapers}"
        parts = []
        for server in SERVERS:
            samples = row[server]
            p50 = statistics.median(s.p50 for s in samples)
            cpu = statistics.median(s.cpu_per_scrape for s in samples)
            p99 = spread([s.p99 for s in samples], exporter.ms)
            parts.append(f"{exporter.ms(p50):>12} {p99:>22} {exporter.us(cpu):>7}")
        print(f"  {label:<38} " + " ".join(parts))
    print(
        f"  (median of {repeat} repeats, p99's min-max beside it; python: {count} scrapes a cell "
        f"for each server in {exporter.LATENCY_ROUNDS} rounds alternating between them; wrk: "
        f"{exporter.WRK_CONNECTIONS} connections; CPU: the server's per scrape)"
    )


def report_hardening(results: Sequence[Hardened], slow: int, idle: int) -> None:
    footprint.print_head(f"under attack: {slow} slowloris + {idle} idle connections")
    print(
        f"  {'server':<8} {'quiet p50':>9} {'p99':>9} | {'attack p50':>10} {'p99':>9} "
        f"{'served':>9} {'threads':>7} {'conns':>5} {'held':>5} | {'slow closed':>11} "
        f"{'idle closed':>11}"
    )
    for r in results:
        served = "yes" if r.attacked.served else f"no ({len(r.attacked.latencies)})"
        slow_closed = "-" if r.slow_closed is None else str(r.slow_closed)
        idle_closed = "-" if r.idle_closed is None else str(r.idle_closed)
        print(
            f"  {r.server:<8} {r.quiet.quantile(0.5):>9} {r.quiet.quantile(0.99):>9} | "
            f"{r.attacked.quantile(0.5):>10} {r.attacked.quantile(0.99):>9} {served:>9} "
            f"{r.threads:>7} {r.connected:>5} {r.held:>5} | {slow_closed:>11} {idle_closed:>11}"
        )
    print(
        f"  (sequential keep-alive text scrapes, {len(results[0].quiet.latencies)} a phase; "
        f"closed: of the attack's connections, those the server closed "
        f"{CLOSED_AFTER_S:.0f} s after they connected; -: not waited for)"
    )


def report_malformed(answers: dict[str, dict[str, str]]) -> None:
    footprint.print_head("malformed heads: each server's answer, and the connection after it")
    print(f"  {'head':<38} " + " ".join(f"{s:>16}" for s in SERVERS))
    for name, by_server in answers.items():
        print(f"  {name:<38} " + " ".join(f"{by_server[s]:>16}" for s in SERVERS))


def report_bodies(servers: Sequence[footprint.Daemon]) -> None:
    print("  the body each serves (bytes): ", end="")
    sizes = []
    for d in servers:
        text_body = footprint.get(d.url + "/metrics")[1]
        om = footprint.get(
            d.url + "/metrics", {"Accept": footprint.PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
        )[1]
        sizes.append(f"{d.name} text {len(text_body):,}, openmetrics+gzip {len(om):,}")
    print("; ".join(sizes))


# ----------------------------------------------------------------------------- the run


@dataclass
class Plan:
    """How much of each part one run measures."""

    scenario: str
    repeat: int
    count: int  # Python scrapes a latency cell, for each server
    wrk: tuple[int, float] | None  # rounds, seconds a round; None: none
    slow: int
    idle: int
    scrapes: int  # sequential scrapes a hardening phase
    wait_closed: bool


def measure(plan: Plan, tmp: Path) -> None:
    node = exporter.Node(plan.scenario, tmp / "node")
    node.tmp.mkdir()
    node.start()
    servers: list[footprint.Daemon] = []
    try:
        servers = start_servers(node)
        report_bodies(servers)
        cells = Cells()
        for _ in range(plan.repeat):
            cells.add("python", exporter.latencies(servers, plan.count), PYTHON_ASKS)
            if plan.wrk is not None:
                cells.add("wrk", exporter.under_wrk(servers, tmp, *plan.wrk), WRK_ASKS)
        report_latency(cells, plan.repeat, plan.count)
        answers: dict[str, dict[str, str]] = {}
        for name, raw in MALFORMED:
            answers[name] = {d.name: malformed(port_of(d), raw) for d in servers}
        results = [
            under_attack(d, plan.slow, plan.idle, plan.scrapes, plan.wait_closed) for d in servers
        ]
        report_hardening(results, plan.slow, plan.idle)
        report_malformed(answers)
    finally:
        for d in servers:
            footprint.stop(d)
        if node.sim is not None:
            footprint.stop(node.sim)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        kind, scenario, sock, hostdir, port = sys.argv[2:7]
        return serve(kind, scenario, sock, Path(hostdir), int(port))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only shows that it runs")
    parser.add_argument("--repeat", type=int, help="repeats of the latency cells (default 3)")
    parser.add_argument("--scenario", help="default large (quick: small)")
    ns = parser.parse_args()
    web_servers.raise_open_file_limit()
    if ns.quick:
        plan = Plan(ns.scenario or "small", ns.repeat or 1, 20, None, 20, 50, 20, False)
    else:
        wrk = (3, 3.0) if shutil.which("wrk") else None
        plan = Plan(ns.scenario or "large", ns.repeat or 3, 1000, wrk, 200, 1000, 1000, True)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; scenario {plan.scenario}; "
        f"h11 {version('h11')}, aiohttp {version('aiohttp')}"
    )
    with footprint.workdir() as tmp:
        measure(plan, tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
