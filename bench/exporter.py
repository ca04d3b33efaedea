"""The exporter as a process on the `large` node: what a user feels, beside its floors.

Usage: python bench/exporter.py [--quick] [--scenario NAME] [--churn-minutes M]

The simulated kubelet (bench/simproc.py) and the exporter (bench/exporter_proc.py: the
simulated host's sysfs, procfs and fake NVML, every collector on) run in processes of
their own; this process only drives them, scrapes and reads ``/proc/<pid>``. Measured:

1. **steady CPU**: the exporter at a 10 s poll, scraped by two scrapers every 15 s
   (OpenMetrics, gzip, as Prometheus asks), over a window: CPU time (utime + stime) over
   the window, in % of one core; with every collector (the defaults: every source read
   at every poll) on a host whose counters move every second (a process of its own
   advances every network, InfiniBand and DRM counter and the CPU times, as traffic
   would), then the same on a host where only the GPUs move (idle devices: a reading
   equal to the last is not derived again), then with the sysfs counters read every
   30 s (``--source-interval.sysfs``), then without the telemetry collectors (kubelet,
   CPU, devices, memory, DRA only). Target: under 1 % with telemetry.
2. **/metrics latency**: p50 and p99 of scrapes by 1 and 10 scrapers (10: processes of
   their own), each scraping back to back, on keep-alive connections and on a new
   connection per scrape, in the text format and in OpenMetrics with gzip; beside the
   same scrapes of a plain ``http.server.ThreadingHTTPServer`` serving the very bytes
   the exporter served (in its best configuration: HTTP/1.1, one write per response,
   ``TCP_NODELAY``, a backlog of 128). 1,000 scrapes a cell for each server, in rounds
   that alternate between the two; each server's CPU per scrape beside them. Then the
   same asks from wrk (Debian package wrk; skipped without it), a C load generator, with
   10 connections: the client costs little beside the server, where 10 Python scrapers
   take as much of the machine as the server does. Targets: p99 under 5 ms and at most
   1.5x the plain server's. Beside both, where nginx is installed (Debian package
   nginx-light; skipped without it), the floor: nginx serving the same bytes from files
   (one worker process, sendfile, TCP_NODELAY), what a C server gets from the same
   machine in the same cell.
3. **/metrics while polling**: wrk with one connection (text) and ten (OpenMetrics,
   gzip), kept alive, against an exporter polling every second on a host whose counters
   move, at Python's default switch interval (5 ms) and at the one ``podres export``
   sets: what a poll's Python in the exporter's threads does to the scrapes meanwhile.
4. **kubelet calls per poll with 10 scrapers**, counted by the simulated kubelet, and
   the poll cadence under that load: an exporter polling every second, hammered by 10
   scrapers. Targets: at most 2 calls per poll; the polls keep their interval.
5. **memory under churn**: resident memory after start-up and while the simulated
   kubelet replaces 5 pods a second (10 minutes), the exporter polling every 2 s; then
   every departed pod is looked for in a scrape. Targets: under 80 MiB, no growth, no
   series of a departed pod.

``--pod-identity`` measures only the pod-identity path at 5,000 pods (the ``identity``
node: ``huge``'s pods, each a Deployment's with 10 labels, the kubelet's Pods API on):
steady CPU (as in 1.) and resident memory of an exporter reading pod identity from the log
directories alone (no Pods API, no ``--pod-labels``), then of one reading the Pods API with
``--pod-labels app.kubernetes.io/*,team,tier`` (8 labels a pod served, one a wildcard),
against the targets of 1. and 5. With ``--quick``: 30 s windows.

``--quick`` only shows that every part runs and counts what it should, in about a
minute on a busy two-core machine: 2 s steady windows at a 1 s poll (so that a poll
falls in each), 20 scrapes a latency cell in 2 rounds, one 1 s round of each
wrk part, 3 s of churn at a 1 s poll.

The poll cycle against its floors is bench/bench.py's; this is the daemon's view.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import http.client
import json
import multiprocessing
import os
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol, TypeVar

import exporter_proc
import footprint

from podres_exporter.collectors import ALL
from podres_exporter.daemon import process

HERE = Path(__file__).parent
SIMPROC = str(HERE / "simproc.py")
EXPORTER = str(HERE / "exporter_proc.py")
MIB = 2**20
TARGET_STEADY = 0.01
TARGET_P99_S = 0.005
TARGET_RATIO = 1.5
TARGET_CALLS = 2.0
TARGET_RSS = 80 * MIB
OPENMETRICS = footprint.PROMETHEUS_ACCEPT
# The collectors that read only the kubelet (and the CPU topology): "without telemetry".
KUBELET_ONLY = ("build", "kubelet", "cpu", "devices", "memory", "dra")
CHURN_PER_S = 5.0
STEADY_PART_S = 30.0
MINUTE_S = 60.0
# The latency figures' scrapes alternate between podres and the plain server in rounds.
LATENCY_ROUNDS = 5

# The third steady run: the sysfs counters read at their own, slower cadence.
SLOW_SOURCES = ("--source-interval.sysfs", "30s")
POLL_S = 10.0  # the steady runs' poll interval
CHURN_POLL_S = 2.0  # the churn run's
TICKING = "ticking"  # the file a host ticker touches at each tick


# ----------------------------------------------------------------------------- processes


@dataclass
class Node:
    """The simulated kubelet of one scenario, in its own process, with its counts file."""

    scenario: str
    tmp: Path
    churn: float = 0.0
    sim: footprint.Daemon | None = None

    @property
    def socket(self) -> Path:
        return self.tmp / "kubelet.sock"

    @property
    def counts_file(self) -> Path:
        return self.tmp / "counts.json"

    def start(self) -> None:
        args = [SIMPROC, self.scenario, str(self.socket), "--counts", str(self.counts_file)]
        if self.churn:
            args += ["--churn", str(self.churn)]
        self.sim = footprint.spawn("simulator", args, self.tmp)
        footprint.wait_for("the simulated kubelet", self.counts_file.exists, [self.sim])

    def counts(self) -> dict[str, Any]:
        for _ in range(20):
            with contextlib.suppress(ValueError, OSError):
                return dict(json.loads(self.counts_file.read_text()))
            time.sleep(0.05)
        raise RuntimeError(f"cannot read {self.counts_file}")

    def calls(self) -> dict[str, int]:
        calls: dict[str, int] = self.counts()["calls"]
        return dict(calls)


def start_exporter(node: Node, name: str, poll: str, extra: Sequence[str] = ()) -> footprint.Daemon:
    port = footprint.free_port()
    hostdir = node.tmp / f"host-{name}"
    hostdir.mkdir()
    exp = footprint.spawn(
        name,
        [EXPORTER, node.scenario, str(node.socket), str(hostdir), str(port), poll, *extra],
        node.tmp,
    )
    exp.url = f"http://127.0.0.1:{port}"
    assert node.sim is not None
    footprint.wait_ready(exp, [node.sim])
    return exp


def host_ticker(scenario: str, hostdir: Path) -> int:
    """Advance the counters of an exporter's simulated host every second until SIGTERM:
    every sysfs traffic counter and energy meter, and the CPU times. ``hostdir/ticking``
    appears after the first tick."""
    import random

    import simproc

    from podres_exporter.daemon import process
    from podres_sim import SimKubelet
    from podres_sim.host import SimHost, bump_counters

    sim = SimKubelet(simproc.scenario(scenario), hostdir / "unused.sock")
    host = SimHost(sim, hostdir / "host")
    rng = random.Random(1)
    done = threading.Event()

    def tick() -> None:
        while True:
            host.advance_cpu_times(1.0)
            bump_counters(host.sysfs, rng, seconds=1.0)
            (hostdir / TICKING).touch()
            if done.wait(1.0):
                return

    ticking = threading.Thread(target=tick, daemon=True)
    with process.stop_on_signals() as stop:
        ticking.start()
        stop.wait()
        done.set()
    ticking.join()
    return 0


def start_ticker(node: Node, exp: footprint.Daemon) -> footprint.Daemon:
    """The counters of ``exp``'s host, moving (:func:`host_ticker`)."""
    hostdir = node.tmp / f"host-{exp.name}"
    (hostdir / TICKING).unlink(missing_ok=True)
    ticker = footprint.spawn(
        f"{exp.name} ticker", [__file__, "--host-ticker", node.scenario, str(hostdir)], node.tmp
    )
    # It writes the same host over again (same seed), then ticks.
    deadline = time.monotonic() + 60
    while not (hostdir / TICKING).exists():
        ticker.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ticker.name}: no tick in 60 s")
        time.sleep(0.1)
    return ticker


def moving_then_idle(
    node: Node, exp: footprint.Daemon, window: float, poll_s: float
) -> list[Steady]:
    """Steady CPU with the host's counters moving, then with them still (``exp`` polls
    every ``poll_s``)."""
    ticker = start_ticker(node, exp)
    try:
        runs = [steady(exp, window, "every collector, counters moving")]
    finally:
        footprint.stop(ticker)
    time.sleep(poll_s + 1)  # a poll that serves the ticker's last counters
    runs.append(steady(exp, window, "every collector, idle devices"))
    return runs


def without_telemetry() -> list[str]:
    out: list[str] = []
    for c in ALL:
        if c.name not in KUBELET_ONLY:
            out += [f"--collector.{c.name}", "off"]
    return out


def rss(pid: int) -> int:
    return footprint.memory_status(pid)["VmRSS"]


# ----------------------------------------------------------------------------- scraping


@dataclass(frozen=True)
class Ask:
    """How a scraper asks: the format and whether it keeps its connection."""

    openmetrics: bool
    keep_alive: bool

    @property
    def headers(self) -> dict[str, str]:
        if self.openmetrics:
            return {"Accept": OPENMETRICS, "Accept-Encoding": "gzip"}
        return {"Accept": "text/plain"}

    @property
    def label(self) -> str:
        fmt = "openmetrics+gzip" if self.openmetrics else "text"
        return f"{fmt}, {'keep-alive' if self.keep_alive else 'new conn'}"


class Scraper:
    """One client scraping ``/metrics`` back to back; each scrape's latency is the time
    from sending the request to the body's last byte."""

    def __init__(self, port: int, ask: Ask) -> None:
        self.port = port
        self.ask = ask
        self.conn: http.client.HTTPConnection | None = None
        self.times: list[float] = []
        self.bodies = 0

    def _connection(self) -> http.client.HTTPConnection:
        if self.conn is None or not self.ask.keep_alive:
            if self.conn is not None:
                self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        return self.conn

    def scrape(self) -> bytes:
        conn = self._connection()
        headers = dict(self.ask.headers)
        if not self.ask.keep_alive:
            headers["Connection"] = "close"
        start = time.perf_counter()
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        body = response.read()
        self.times.append(time.perf_counter() - start)
        if response.status != http.HTTPStatus.OK:
            raise RuntimeError(f"/metrics answered {response.status}")
        self.bodies += 1
        return body

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def scrapes(port: int, ask: Ask, count: int, seconds: float, start: Any = None) -> list[float]:
    """One scraper: one warm-up scrape, then, once every scraper is ready (``start``, a
    barrier, if any), ``count`` scrapes or scrapes for ``seconds``; their latencies."""
    c = Scraper(port, ask)
    try:
        c.scrape()  # connected and warm; not counted
        c.times.clear()
        if start is not None:
            start.wait()
        deadline = time.monotonic() + seconds
        n = 0
        while (count and n < count) or (seconds and time.monotonic() < deadline):
            c.scrape()
            n += 1
        return c.times
    finally:
        c.close()


def _scraper_process(job: tuple[int, Ask, int, float], start: Any, out: Any) -> None:
    """:func:`scrapes` of ``job`` (its first four arguments) in a process of its own: the
    latencies, or the error, into ``out``."""
    try:
        out.send(scrapes(*job, start))
    except BaseException as err:  # noqa: BLE001 - reported by the parent
        out.send(repr(err))


def hammer(
    port: int, ask: Ask, scrapers: int, *, count: int = 0, seconds: float = 0.0
) -> list[float]:
    """``scrapers`` clients scraping back to back, ``count`` scrapes each or for
    ``seconds``; every latency. Several scrapers are processes of their own, started
    together: threads of one Python process would wait for each other's GIL, and measure
    the client more than the server."""
    if scrapers == 1:
        return scrapes(port, ask, count, seconds)
    fork = multiprocessing.get_context("fork")
    start = fork.Barrier(scrapers)
    pipes = [fork.Pipe(duplex=False) for _ in range(scrapers)]
    procs = [
        fork.Process(target=_scraper_process, args=((port, ask, count, seconds), start, w))
        for _, w in pipes
    ]
    for proc in procs:
        proc.start()
    for _, w in pipes:
        w.close()  # the children's now: a child that dies unheard is an EOFError below
    results = [r.recv() for r, _ in pipes]
    for proc in procs:
        proc.join()
    errors = [r for r in results if isinstance(r, str)]
    if errors:
        raise RuntimeError(f"a scraper failed: {errors[0]}")
    return [t for times in results for t in times]


def pct(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ----------------------------------------------------------------------------- the plain server


def plain_server(port: int, bodies: Path) -> int:
    """Serve the exporter's captured bytes with ThreadingHTTPServer until SIGTERM."""
    text = (bodies / "text").read_bytes()
    om = (bodies / "om").read_bytes()
    om_gz = gzip.compress(om)
    text_gz = gzip.compress(text)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            openmetrics = "openmetrics" in self.headers.get("Accept", "")
            zipped = "gzip" in self.headers.get("Accept-Encoding", "")
            body = (om_gz if zipped else om) if openmetrics else (text_gz if zipped else text)
            kind = (
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
                if openmetrics
                else "text/plain; version=0.0.4; charset=utf-8"
            )
            head = [
                "HTTP/1.1 200 OK",
                f"Content-Type: {kind}",
                f"Content-Length: {len(body)}",
            ]
            if zipped:
                head.append("Content-Encoding: gzip")
            if self.headers.get("Connection", "").lower() == "close":
                head.append("Connection: close")
                self.close_connection = True
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)  # one write

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 128
        daemon_threads = True

        def get_request(self) -> tuple[socket.socket, object]:
            conn, addr = super().get_request()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return conn, addr

    from podres_exporter.daemon import process

    with process.stop_on_signals() as stop:
        server = Server(("127.0.0.1", port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        stop.wait()
        server.shutdown()
    return 0


def start_plain(tmp: Path, exp: footprint.Daemon) -> footprint.Daemon:
    bodies = tmp / "bodies"
    bodies.mkdir(exist_ok=True)
    port = int(exp.url.rsplit(":", 1)[1])
    for name, openmetrics in (("text", False), ("om", True)):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request(
            "GET", "/metrics", headers={"Accept": OPENMETRICS if openmetrics else "text/plain"}
        )
        (bodies / name).write_bytes(conn.getresponse().read())
        conn.close()
    plain_port = footprint.free_port()
    plain = footprint.spawn(
        "plain server", [__file__, "--plain-server", str(plain_port), str(bodies)], tmp
    )
    plain.url = f"http://127.0.0.1:{plain_port}"

    def up() -> bool:
        with contextlib.suppress(OSError):
            return footprint.get(plain.url + "/metrics")[0] == http.HTTPStatus.OK
        return False

    footprint.wait_for("the plain server", up, [plain])
    return plain


# nginx serving the captured bodies as the exporter negotiates them: OpenMetrics when the
# Accept header asks for it, gzip when Accept-Encoding allows it (the bodies compressed
# once, as the plain server's). One worker process, as the exporter has one event loop.
FLOOR_CONF = """daemon off;
master_process off;
worker_processes 1;
user {user};
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  tcp_nodelay on;
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  etag off;
  client_body_temp_path {d}/temp-body;
  proxy_temp_path {d}/temp-proxy;
  fastcgi_temp_path {d}/temp-fastcgi;
  uwsgi_temp_path {d}/temp-uwsgi;
  scgi_temp_path {d}/temp-scgi;
  map $http_accept $body {{ ~openmetrics om; default text; }}
  map $http_accept_encoding $zipped {{ ~gzip .gz; default ""; }}
  server {{
    listen 127.0.0.1:{port} backlog=1024;
    root {d};
    location = /metrics {{ rewrite ^ /$body$zipped last; }}
    location = /text {{ internal; default_type "{text}"; }}
    location = /om {{ internal; default_type "{om}"; }}
    location = /text.gz {{ internal; default_type "{text}"; add_header Content-Encoding gzip; }}
    location = /om.gz {{ internal; default_type "{om}"; add_header Content-Encoding gzip; }}
  }}
}}
"""


def nginx() -> str | None:
    """The nginx binary (often in /usr/sbin, off a user's PATH); None when not installed."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")


def start_floor(tmp: Path) -> footprint.Daemon | None:
    """nginx serving the bytes :func:`start_plain` captured (``tmp/bodies``), from files:
    the floor of the latency cells. None when nginx is not installed."""
    binary = nginx()
    if binary is None:
        return None
    where = tmp / "floor"
    where.mkdir()
    for name in ("text", "om"):
        body = (tmp / "bodies" / name).read_bytes()
        (where / name).write_bytes(body)
        (where / f"{name}.gz").write_bytes(gzip.compress(body))
    port = footprint.free_port()
    conf = where / "nginx.conf"
    conf.write_text(
        FLOOR_CONF.format(
            user=pwd.getpwuid(os.getuid()).pw_name,
            d=where,
            port=port,
            text="text/plain; version=0.0.4; charset=utf-8",
            om="application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
    )
    log = where / "nginx.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "-p", str(where), "-e", str(where / "error.log"), "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    floor = footprint.Daemon("nginx", proc, log, url=f"http://127.0.0.1:{port}")

    def up() -> bool:
        with contextlib.suppress(OSError):
            status, body = footprint.get(floor.url + "/metrics")
            return status == http.HTTPStatus.OK and body == (where / "text").read_bytes()
        return False

    footprint.wait_for("nginx, the floor", up, [floor])
    return floor


# ----------------------------------------------------------------------------- measurements


@dataclass
class Steady:
    label: str
    cpu: float = 0.0
    scrapes: int = 0
    rss: int = 0
    # The CPU of each 30 s of the window (three polls, two scrape rounds), % of a core.
    parts: list[float] = field(default_factory=list)
    # How far the served traffic counters and CPU busy seconds moved over the window.
    moved: float = 0.0


# Counters only the host's ticker moves: what shows that it ran.
TICKED = (b"podres_net_receive_bytes_total{", b"podres_cpu_busy_seconds_total{")


def ticked(exp: footprint.Daemon) -> float:
    """The sum of the counters in :data:`TICKED` that ``exp`` serves now, asked in the
    format the steady scrapers ask for: a text scrape would have every poll of the next
    ten minutes render the text format too (``exposition.ASKED_RECENT_S``), which a
    Prometheus never asks for."""
    status, body = footprint.get(exp.url + "/metrics", {"Accept": OPENMETRICS})
    assert status == http.HTTPStatus.OK, status
    return sum(
        float(line.rsplit(b" ", 1)[1]) for line in body.splitlines() if line.startswith(TICKED)
    )


def steady(exp: footprint.Daemon, seconds: float, label: str) -> Steady:
    """Two scrapers every 15 s (OpenMetrics, gzip) over ``seconds``; CPU in the window."""
    port = int(exp.url.rsplit(":", 1)[1])
    scrapers = [Scraper(port, Ask(True, True)) for _ in range(2)]
    out = Steady(label)
    moved0 = ticked(exp)
    start = time.monotonic()
    cpu0 = footprint.cpu_seconds(exp.proc.pid)
    next_scrape = start
    part_start, part_cpu = start, cpu0
    while time.monotonic() < start + seconds:
        if time.monotonic() >= next_scrape:
            for s in scrapers:
                s.scrape()
            next_scrape += footprint.SCRAPE_EVERY_S
        time.sleep(max(0.0, min(next_scrape, start + seconds) - time.monotonic()))
        exp.check_alive()
        now = time.monotonic()
        if now - part_start >= STEADY_PART_S - 0.5:
            cpu = footprint.cpu_seconds(exp.proc.pid)
            out.parts.append((cpu - part_cpu) / (now - part_start))
            part_start, part_cpu = now, cpu
    elapsed = time.monotonic() - start
    out.cpu = (footprint.cpu_seconds(exp.proc.pid) - cpu0) / elapsed
    out.moved = ticked(exp) - moved0
    out.scrapes = sum(s.bodies for s in scrapers)
    out.rss = rss(exp.proc.pid)
    for s in scrapers:
        s.close()
    return out


@dataclass
class Latency:
    server: str
    ask: Ask
    scrapers: int
    times: list[float] = field(default_factory=list)
    cpu: float = 0.0  # the server's CPU seconds over the scrapes

    @property
    def p50(self) -> float:
        return pct(self.times, 0.5)

    @property
    def p99(self) -> float:
        return pct(self.times, 0.99)

    @property
    def cpu_per_scrape(self) -> float:
        return self.cpu / max(1, len(self.times))


def latencies(
    servers: Sequence[footprint.Daemon], count: int, rounds: int = LATENCY_ROUNDS
) -> list[Latency]:
    """Each ask and number of scrapers, ``count`` scrapes in all for each of ``servers``
    (podres, the plain server, the floor if any), in ``rounds`` rounds that
    alternate between them (all see the same moments of a shared machine); with each
    server's CPU over its rounds. A cell per server, the servers' in turn for each ask."""
    out = []
    for openmetrics in (False, True):
        for keep_alive in (True, False):
            for scrapers in (1, 10):
                ask = Ask(openmetrics, keep_alive)
                cells = [Latency(d.name, ask, scrapers) for d in servers]
                each = max(1, count // scrapers // rounds)
                for _ in range(rounds):
                    for cell, d in zip(cells, servers, strict=True):
                        port = int(d.url.rsplit(":", 1)[1])
                        cpu = footprint.cpu_seconds(d.proc.pid)
                        cell.times += hammer(port, ask, scrapers, count=each)
                        cell.cpu += footprint.cpu_seconds(d.proc.pid) - cpu
                out += cells
    return out


# wrk's figures, printed by its done() hook: requests, p50 and p99 in microseconds, errors.
WRK_SCRIPT = """done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("wrk-figures %d %d %d %d\\n", summary.requests,
    latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""
WRK_CONNECTIONS = 10


@dataclass
class Loaded:
    """One server under :data:`WRK_CONNECTIONS` connections from wrk, over rounds."""

    server: str
    ask: Ask
    requests: int = 0
    errors: int = 0
    cpu: float = 0.0  # the server's CPU seconds over the rounds
    p50s: list[float] = field(default_factory=list)  # one a round
    p99s: list[float] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return statistics.median(self.p50s)

    @property
    def p99(self) -> float:
        return statistics.median(self.p99s)

    @property
    def cpu_per_scrape(self) -> float:
        return self.cpu / max(1, self.requests)


def wrk_round(
    url: str, ask: Ask, seconds: float, script: Path, connections: int = WRK_CONNECTIONS
) -> tuple[int, float, float, int]:
    """wrk's requests, p50 and p99 (seconds) and errors over ``seconds`` of ``url``."""
    headers = dict(ask.headers)
    if not ask.keep_alive:
        headers["Connection"] = "close"  # wrk connects again after each answer
    threads = min(2, connections)
    args = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds:g}s"]
    args += ["--timeout", "10s", "-s", str(script)]
    for name, value in headers.items():
        args += ["-H", f"{name}: {value}"]
    done = subprocess.run(
        [*args, url + "/metrics"], capture_output=True, text=True, timeout=seconds + 30, check=True
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("wrk-figures "))
    requests, p50, p99, errors = (int(x) for x in line.split()[1:])
    return requests, p50 / 1e6, p99 / 1e6, errors


def under_wrk(
    servers: Sequence[footprint.Daemon], tmp: Path, rounds: int, seconds: float
) -> list[Loaded]:
    """Each ask from wrk (a C load generator: the client costs little beside the server)
    with :data:`WRK_CONNECTIONS` connections, ``rounds`` rounds of ``seconds`` alternating
    between ``servers`` (as :func:`latencies`); empty when wrk is not installed."""
    if shutil.which("wrk") is None:
        return []
    script = tmp / "figures.lua"
    script.write_text(WRK_SCRIPT)
    out = []
    for openmetrics in (False, True):
        for keep_alive in (True, False):
            ask = Ask(openmetrics, keep_alive)
            cells = [Loaded(d.name, ask) for d in servers]
            for _ in range(rounds):
                for cell, d in zip(cells, servers, strict=True):
                    cpu = footprint.cpu_seconds(d.proc.pid)
                    requests, p50, p99, errors = wrk_round(d.url, ask, seconds, script)
                    cell.cpu += footprint.cpu_seconds(d.proc.pid) - cpu
                    cell.requests += requests
                    cell.errors += errors
                    cell.p50s.append(p50)
                    cell.p99s.append(p99)
            out += cells
    return out


# Scrapes while polling: (ask, wrk connections), each against an exporter at a 1 s poll.
POLLING_ASKS = (
    (Ask(openmetrics=False, keep_alive=True), 1),
    (Ask(openmetrics=True, keep_alive=True), 10),
)
PYTHON_SWITCH_S = 0.005  # the interpreter's default switch interval


@dataclass
class Polled:
    """Scrapes of an exporter that polls every second, its host's counters moving, at one
    switch interval of the interpreter."""

    ask: Ask
    connections: int
    switch_s: float
    p50s: list[float] = field(default_factory=list)  # one a round
    p99s: list[float] = field(default_factory=list)


def while_polling(node: Node, tmp: Path, rounds: int, seconds: float) -> list[Polled]:
    """Each of :data:`POLLING_ASKS` from wrk, ``rounds`` rounds of ``seconds``, against an
    exporter polling every second with every counter of its host moving: first at Python's
    default switch interval, then at the one ``podres export`` sets (what a poll's Python
    in the exporter's threads does to the scrapes served meanwhile). Empty without wrk."""
    if shutil.which("wrk") is None:
        return []
    script = tmp / "polling.lua"
    script.write_text(WRK_SCRIPT)
    out = []
    for switch_s in (PYTHON_SWITCH_S, process.SWITCH_INTERVAL_S):
        name = f"exporter-polling-{switch_s * 1e3:g}ms"
        extra = [exporter_proc.SWITCH_INTERVAL_FLAG, str(switch_s)]
        exp = start_exporter(node, name, "1s", extra)
        ticker = None
        try:
            ticker = start_ticker(node, exp)
            for ask, connections in POLLING_ASKS:
                cell = Polled(ask, connections, switch_s)
                for _ in range(rounds):
                    _, p50, p99, _ = wrk_round(exp.url, ask, seconds, script, connections)
                    cell.p50s.append(p50)
                    cell.p99s.append(p99)
                out.append(cell)
        finally:
            for d in (ticker, exp):
                if d is not None:
                    footprint.stop(d)
    return out


@dataclass
class Calls:
    seconds: float
    polls: int
    calls: dict[str, int]
    times: list[float]

    @property
    def scrapes(self) -> int:
        return len(self.times)

    @property
    def per_poll(self) -> float:
        return sum(self.calls.values()) / max(1, self.polls)


def calls_under_load(node: Node, seconds: float) -> Calls:
    exp = start_exporter(node, "exporter-1s", "1s")
    try:
        time.sleep(1.5)
        before = node.calls()
        start = time.monotonic()
        port = int(exp.url.rsplit(":", 1)[1])
        times = hammer(port, Ask(True, True), 10, seconds=seconds)
        elapsed = time.monotonic() - start
        after = node.calls()
    finally:
        footprint.stop(exp)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    delta = {k: v for k, v in delta.items() if v}
    polls = sum(v for k, v in delta.items() if k.endswith("/List"))
    return Calls(elapsed, polls, delta, times)


@dataclass
class Churned:
    minutes: float
    poll_s: float = CHURN_POLL_S
    replaced: int = 0
    rss_start: int = 0
    rss_peak: int = 0
    rss_end: int = 0
    departed: int = 0
    departed_seen: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)


def churn(tmp: Path, scenario: str, minutes: float, poll_s: float) -> Churned:
    """RSS of an exporter polling every ``poll_s`` while the kubelet replaces pods for
    ``minutes``; then whether a departed pod is still in a scrape."""
    node = Node(scenario, tmp, churn=CHURN_PER_S)
    node.start()
    out = Churned(minutes, poll_s)
    settle = 2.5 * poll_s  # two polls and then some
    try:
        exp = start_exporter(node, "exporter-churn", f"{poll_s:g}s")
        try:
            time.sleep(settle)  # a few polls of churn before the first figure
            out.rss_start = out.rss_peak = rss(exp.proc.pid)
            start = time.monotonic()
            end = start + minutes * 60
            while time.monotonic() < end:
                time.sleep(min(10.0, max(0.0, end - time.monotonic())))
                exp.check_alive()
                r = rss(exp.proc.pid)
                out.samples.append((time.monotonic() - start, r))
                out.rss_peak = max(out.rss_peak, r)
            out.rss_end = rss(exp.proc.pid)
            counts = node.counts()
            out.replaced = int(counts["replaced"])
            departed = {tuple(p.split("/", 1)) for p in counts["departed"]}
            time.sleep(settle)  # two polls: every pod departed before `counts` is gone from them
            status, body = footprint.get(exp.url + "/metrics")
            assert status == http.HTTPStatus.OK
            text = body.decode()
            out.departed = len(departed)
            out.departed_seen = sum(
                1 for ns, pod in departed if f'namespace="{ns}",pod="{pod}"' in text
            )
        finally:
            footprint.stop(exp)
    finally:
        if node.sim is not None:
            footprint.stop(node.sim)
    return out


# ----------------------------------------------------------------------------- report


def ms(t: float) -> str:
    return f"{t * 1e3:.2f} ms"


def us(t: float) -> str:
    return f"{t * 1e6:.0f} us"


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(run: Run, scenario: str) -> None:
    runs, lat, calls, churned = run.steady, run.latency, run.calls, run.churned
    footprint.print_head(f"steady CPU on {scenario}: {run.poll_s:g} s poll, 2 scrapers every 15 s")
    for s in runs:
        rss_mib = s.rss / MIB
        spread = ""
        if len(s.parts) > 1:
            lo, mid, hi = min(s.parts), statistics.median(s.parts), max(s.parts)
            spread = f"30 s parts: median {mid * 100:.2f} ({lo * 100:.2f}-{hi * 100:.2f}); "
        print(
            f"  {s.label:<30} {s.cpu * 100:6.2f} % of a core  ({spread}{s.scrapes} scrapes, ",
            end="",
        )
        print(f"RSS {rss_mib:.0f} MiB; traffic and busy counters moved {s.moved:.3g})")
    moving, idle = runs[0].cpu, runs[1].cpu
    print(
        f"  target < {TARGET_STEADY * 100:.0f} % with telemetry: "
        f"{verdict(moving < TARGET_STEADY)} with the counters moving, "
        f"{verdict(idle < TARGET_STEADY)} with idle devices"
    )

    footprint.print_head("/metrics latency: podres vs a plain ThreadingHTTPServer, same bytes")
    print_beside_plain(
        f"{'ask':<30} {'scrapers':>8}",
        [(f"{c[0].ask.label:<30} {c[0].scrapers:>8}", c) for c in groups(lat, run.servers)],
        f"{len(lat[0].times)} scrapes a cell for each server, in {run.latency_rounds} rounds "
        "alternating between them; CPU: the server's per scrape",
    )
    report_wrk(run.loaded, run.servers)

    report_polling(run.polled)

    footprint.print_head("kubelet calls per poll, 10 scrapers hammering, 1 s poll")
    print(
        f"  {calls.polls} polls in {calls.seconds:.1f} s ({calls.seconds:.0f} expected at 1 s), ",
        end="",
    )
    print(f"{calls.scrapes} scrapes; calls {calls.calls}")
    cadence = calls.seconds / max(1, calls.polls)
    calls_ok = verdict(calls.per_poll <= TARGET_CALLS)
    print(
        f"  calls per poll {calls.per_poll:.2f} (target <= {TARGET_CALLS:.0f}: {calls_ok}); ",
        end="",
    )
    print(f"cadence under load {cadence:.2f} s per poll (interval 1 s)")
    p50, p99, worst = pct(calls.times, 0.5), pct(calls.times, 0.99), max(calls.times)
    print(f"  scrapes across {calls.polls} publishes: p50 {ms(p50)}, p99 {ms(p99)}, ", end="")
    print(f"slowest {ms(worst)} (a scrape never renders: one after a publish is like any other)")

    footprint.print_head(
        f"memory under churn: {CHURN_PER_S:.0f} pods replaced a second, {churned.poll_s:g} s poll"
    )
    start, peak, end = (churned.rss_start / MIB, churned.rss_peak / MIB, churned.rss_end / MIB)
    print(
        f"  {churned.minutes:g} min, {churned.replaced} replacements: RSS {start:.1f} MiB ", end=""
    )
    print(f"after start-up, peak {peak:.1f}, end {end:.1f} (growth {end - start:+.1f} MiB)")
    # One sample a minute (they are 10 s apart), from the first minute's end.
    marks = [(t, r) for t, r in churned.samples if t >= MINUTE_S - 5][::6]
    marks = marks or churned.samples[-1:]
    shape = ", ".join(f"{t / 60:.0f} min {r / MIB:.1f}" for t, r in marks)
    print(f"  RSS along the run: {shape} MiB")
    rss_ok = verdict(churned.rss_peak < TARGET_RSS)
    print(f"  target < 80 MiB: {rss_ok}; departed pods with series left: ", end="")
    print(f"{churned.departed_seen} of {churned.departed}")


def report_wrk(loaded: list[Loaded], servers: int) -> None:
    title = f"/metrics under {WRK_CONNECTIONS} connections from wrk, a C load generator"
    footprint.print_head(title)
    if not loaded:
        print("  skipped: wrk is not installed (Debian package wrk)")
        return
    rounds = len(loaded[0].p99s)
    requests = min(c.requests for c in loaded)
    errors = sum(c.errors for c in loaded)
    p99s = ", ".join(f"{ms(min(c.p99s))}-{ms(max(c.p99s))}" for c in loaded[::servers])
    print_beside_plain(
        f"wrk {'ask':<30}",
        [(f"wrk {c[0].ask.label:<30}", c) for c in groups(loaded, servers)],
        f"median of {rounds} rounds alternating between the servers, at least {requests} "
        f"requests a cell; errors {errors}; podres p99 ranges over the rounds: {p99s}",
    )


def report_polling(polled: list[Polled]) -> None:
    footprint.print_head("/metrics while polling: 1 s poll, every counter moving, wrk")
    if not polled:
        print("  skipped: wrk is not installed (Debian package wrk)")
        return
    ours, python = process.SWITCH_INTERVAL_S, PYTHON_SWITCH_S
    heads = [f"{python * 1e3:g} ms p50", "p99", f"{ours * 1e3:g} ms p50", "p99"]
    print(f"  {'switch interval:':<30} {'conns':>5} " + " ".join(f"{h:>11}" for h in heads))
    by_ask: dict[tuple[Ask, int], dict[float, Polled]] = {}
    for c in polled:
        by_ask.setdefault((c.ask, c.connections), {})[c.switch_s] = c
    for (ask, conns), cells in by_ask.items():
        row = []
        for f in (cells[python], cells[ours]):
            row += [ms(statistics.median(f.p50s)), ms(statistics.median(f.p99s))]
        print(f"  {ask.label:<30} {conns:>5} " + " ".join(f"{x:>11}" for x in row))
    rounds = len(polled[0].p99s)
    print(
        f"  (median of {rounds} rounds; Python's default switch interval, then podres "
        "export's; a poll every second, ten times the daemon's default, so that polls "
        "fall often inside the scrapes)"
    )


C = TypeVar("C")


def groups(cells: Sequence[C], servers: int) -> list[Sequence[C]]:
    """The cells of each ask: podres', the plain server's, then the floor's if any."""
    return [cells[i : i + servers] for i in range(0, len(cells), servers)]


class Figures(Protocol):
    """One server's figures in one cell (:class:`Latency`, :class:`Loaded`)."""

    @property
    def p50(self) -> float: ...
    @property
    def p99(self) -> float: ...
    @property
    def cpu_per_scrape(self) -> float: ...


def print_beside_plain(head: str, rows: Sequence[tuple[str, Sequence[Figures]]], note: str) -> None:
    """Rows of podres' figures beside the plain server's and the floor's if any (each
    after its label, ``head`` the labels' heading), ``note``, then the worst p99 and ratio
    against the targets, and where the floor too misses the p99 target."""
    floor = len(rows[0][1]) > 2  # noqa: PLR2004 - podres and the plain server
    heads = ["podres p50", "p99", "CPU", "plain p50", "p99", "CPU", "p99 x"]
    if floor:
        heads += ["nginx p50", "p99", "CPU"]
    widths = [11, 9, 8, 11, 9, 8, 6, 11, 9, 8][: len(heads)]
    print(f"  {head} " + " ".join(f"{h:>{w}}" for h, w in zip(heads, widths, strict=True)))
    worst_ratio, worst_p99 = 0.0, 0.0
    missed, floor_missed = 0, 0
    for label, (ours, plain, *rest) in rows:
        ratio = ours.p99 / plain.p99
        worst_ratio = max(worst_ratio, ratio)
        worst_p99 = max(worst_p99, ours.p99)
        cells = [ms(ours.p50), ms(ours.p99), us(ours.cpu_per_scrape)]
        cells += [ms(plain.p50), ms(plain.p99), us(plain.cpu_per_scrape), f"{ratio:.2f}x"]
        for c in rest:
            cells += [ms(c.p50), ms(c.p99), us(c.cpu_per_scrape)]
            floor_missed += ours.p99 >= TARGET_P99_S and c.p99 >= TARGET_P99_S
        missed += ours.p99 >= TARGET_P99_S
        print(f"  {label} " + " ".join(f"{x:>{w}}" for x, w in zip(cells, widths, strict=True)))
    print(f"  ({note})")
    p99_ok = verdict(worst_p99 < TARGET_P99_S)
    ratio_ok = verdict(worst_ratio <= TARGET_RATIO)
    print(f"  worst p99 {ms(worst_p99)} (target < {ms(TARGET_P99_S)}: {p99_ok}); ", end="")
    print(f"worst ratio {worst_ratio:.2f}x (target <= {TARGET_RATIO}x: {ratio_ok})")
    if not floor:
        print("  floor: skipped, nginx is not installed (Debian package nginx-light)")
    elif missed:
        over = f"{missed} cells over {ms(TARGET_P99_S)}"
        print(f"  floor: of the {over}, nginx, serving the same bytes, is over it too in ", end="")
        print(floor_missed)
    else:
        print("  floor: every cell under the target")


@dataclass
class Run:
    """What one run measured, part by part."""

    steady: list[Steady]
    latency: list[Latency]
    loaded: list[Loaded]
    servers: int  # in each latency cell: podres, the plain server and the floor, if any
    polled: list[Polled]
    calls: Calls
    churned: Churned
    poll_s: float = POLL_S  # the steady runs' poll interval
    latency_rounds: int = LATENCY_ROUNDS


IDENTITY_LABELS = "app.kubernetes.io/*,team,tier"


def _identity_synced(exp: footprint.Daemon) -> bool:
    """The exporter's Pods API route holds the whole node and its labels are served."""
    status, body = footprint.get(exp.url + "/metrics", {"Accept": OPENMETRICS})
    return status == http.HTTPStatus.OK and (
        b'podres_pod_identity_source_synced{route="pods-api"} 1' in body and b"label_team=" in body
    )


def pod_identity(ns: argparse.Namespace, tmp: Path) -> list[tuple[Steady, int]]:
    """Steady CPU and memory at 5,000 pods without and with the Pods API and pod labels;
    each with the series of podres_pod_info and podres_pod_labels_info it serves."""
    window = 30.0 if ns.quick else 120.0
    poll = f"{POLL_S:g}s"
    node = Node("identity", tmp / "node")
    node.tmp.mkdir()
    node.start()
    out: list[tuple[Steady, int]] = []
    runs = (
        ("identity-off", ("--kubelet-pods-api-socket", str(tmp / "absent.sock")),
         "5,000 pods, UIDs from the log directories only"),
        ("identity-on", ("--pod-labels", IDENTITY_LABELS),
         f"5,000 pods, the Pods API, --pod-labels {IDENTITY_LABELS}"),
    )  # fmt: skip
    try:
        for name, extra, label in runs:
            exp = start_exporter(node, name, poll, extra)
            try:
                if name == "identity-on":
                    synced = functools.partial(_identity_synced, exp)
                    footprint.wait_for("the Pods API synced", synced, [exp])
                _, body = footprint.get(exp.url + "/metrics", {"Accept": OPENMETRICS})
                series = sum(
                    1 for line in body.splitlines()
                    if line.startswith((b"podres_pod_info{", b"podres_pod_labels_info{"))
                )  # fmt: skip
                out.append((steady(exp, window, label), series))
            finally:
                footprint.stop(exp)
    finally:
        if node.sim is not None:
            footprint.stop(node.sim)
    return out


def report_identity(runs: list[tuple[Steady, int]]) -> None:
    print(f"\npod identity at 5,000 pods ({POLL_S:g} s poll, 2 scrapers every 15 s):")
    for run, series in runs:
        print(
            f"  {run.label}: steady CPU {100 * run.cpu:.2f} % of a core, resident "
            f"{run.rss / MIB:.1f} MiB, {series} identity series "
            f"(memory target {TARGET_RSS // MIB} MiB: "
            f"{verdict(run.rss < TARGET_RSS)})"
        )
    if len(runs) == 2:  # noqa: PLR2004 - off, then on
        (off, _), (on, _) = runs
        print(
            f"  pod identity adds {100 * (on.cpu - off.cpu):+.2f} % of a core and "
            f"{(on.rss - off.rss) / MIB:+.1f} MiB"
        )


def measure(ns: argparse.Namespace, tmp: Path) -> Run:
    """Every part of the run on ``ns.scenario`` (short windows when ``ns.quick``)."""
    window = 2.0 if ns.quick else 120.0
    poll_s = 1.0 if ns.quick else POLL_S  # quick: a poll inside each short window
    poll = f"{poll_s:g}s"
    count = 20 if ns.quick else 1000
    latency_rounds = 2 if ns.quick else LATENCY_ROUNDS
    wrk_rounds = (1, 1.0) if ns.quick else (3, 3.0)  # rounds, seconds a round (wrk: whole)
    polling_rounds = (1, 1.0) if ns.quick else (3, 10.0)
    hammer_s = 3.0 if ns.quick else 30.0
    minutes = ns.churn_minutes or (0.05 if ns.quick else 10.0)
    node = Node(ns.scenario, tmp / "node")
    node.tmp.mkdir()
    node.start()
    assert node.sim is not None
    try:
        exp = start_exporter(node, "exporter", poll)
        others: list[footprint.Daemon] = []  # the plain server, the floor
        try:
            runs = moving_then_idle(node, exp, window, poll_s)
            others.append(start_plain(tmp, exp))
            floor = start_floor(tmp)
            if floor is not None:
                others.append(floor)
            lat = latencies([exp, *others], count, latency_rounds)
            loaded = under_wrk([exp, *others], tmp, *wrk_rounds)
        finally:
            for d in (exp, *others):
                footprint.stop(d)
        slow = start_exporter(node, "exporter-30s", poll, SLOW_SOURCES)
        try:
            runs.append(steady(slow, window, "sysfs read every 30 s"))
        finally:
            footprint.stop(slow)
        bare = start_exporter(node, "exporter-bare", poll, without_telemetry())
        try:
            runs.append(steady(bare, window, "without telemetry collectors"))
        finally:
            footprint.stop(bare)
        polled = while_polling(node, tmp, *polling_rounds)
        calls = calls_under_load(node, hammer_s)
    finally:
        footprint.stop(node.sim)
    churn_dir = tmp / "churn"
    churn_dir.mkdir()
    servers = 1 + len(others)
    churned = churn(churn_dir, ns.scenario, minutes, poll_s=1.0 if ns.quick else CHURN_POLL_S)
    return Run(runs, lat, loaded, servers, polled, calls, churned, poll_s, latency_rounds)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--plain-server":
        return plain_server(int(sys.argv[2]), Path(sys.argv[3]))
    if len(sys.argv) > 1 and sys.argv[1] == "--host-ticker":
        return host_ticker(sys.argv[2], Path(sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="short windows: only shows that it runs"
    )
    parser.add_argument("--scenario", default="large")
    parser.add_argument("--churn-minutes", type=float, help="default 10 (quick: 0.05)")
    parser.add_argument(
        "--pod-identity", action="store_true", help="only the pod-identity path at 5,000 pods"
    )
    ns = parser.parse_args()
    if ns.pod_identity:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; scenario identity")
        with footprint.workdir() as tmp:
            report_identity(pod_identity(ns, tmp))
        return 0
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; scenario {ns.scenario}")
    with footprint.workdir() as tmp:
        run = measure(ns, tmp)
    report(run, ns.scenario)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
