"""The HTTP server against cheroot and the standard library's, under slow and idle clients.

Usage: python bench/web_servers.py [--quick]

Each server runs in a process of its own and serves the same ~100 KiB Prometheus text
body on ``/metrics``:

* ``podres``: :class:`podres_exporter.daemon.web.WebServer` with its default limits;
* ``cheroot-10``: ``cheroot.wsgi.Server`` with a minimal WSGI app and cheroot's
  defaults (10 worker threads, a 10 s socket timeout) but for the listen backlog;
* ``cheroot-256``: the same with 256 worker threads, more than the slowloris clients;
* ``stdlib``: ``http.server.ThreadingHTTPServer`` (HTTP/1.1, one thread per
  connection), what the daemons used before.

cheroot and the standard library listen with a backlog of 5 by default, which leaves
most of a burst of 1,200 connections unaccepted (the kernel drops them): here they get
1024, as podres has, so that the attack reaches every server.

For each: the latency of sequential keep-alive scrapes on one connection (p50, p99) and
the server's thread count, first on a quiet server, then with 200 slowloris clients
(a request head that never ends, a byte a second) and 1,000 idle connections (connected,
silent) open, the scraper connecting after them. A scrape under attack that gets no
answer within the timeout counts as not served. The attack connections that the server
had closed by the end of the measurement are counted too (podres closes a head that is
not complete 10 s after the connection; the measurement is shorter than that).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SLOWLORIS = 200
IDLE = 1000
SERVERS = ("podres", "cheroot-10", "cheroot-256", "stdlib")
# The others' listen backlog: their default (5) leaves most of a burst of connections
# unaccepted (the kernel drops them from a full queue), so that the attack would not
# reach the server at all; podres listens with 1024.
BACKLOG = 1024
# The server has accepted what it will once it holds no more sockets for this long.
SETTLED_S = 2.0


def exposition(size: int = 100 * 1024) -> bytes:
    """A Prometheus text body of about ``size`` bytes, the same at every run."""
    lines = [
        "# HELP podres_container_cpu_held Whether a container holds a CPU.",
        "# TYPE podres_container_cpu_held gauge",
    ]
    total, i = 0, 0
    while total < size:
        line = (
            f'podres_container_cpu_held{{namespace="team-{i % 17}",pod="job-{i // 8}-x7k2p",'
            f'container="main",cpu="{i % 128}",numa_node="{i % 2}"}} 1'
        )
        lines.append(line)
        total += len(line) + 1
        i += 1
    return ("\n".join(lines) + "\n").encode()


# ------------------------------------------------------------------ the servers (child)


def serve_podres(body: bytes) -> Callable[[], None]:
    from podres_exporter.daemon.web import Index, Site, WebServer

    site = Site(
        metrics=lambda *, openmetrics, gz: body,
        health=lambda: (True, "ok"),
        readiness=lambda: (True, "ready"),
        index=Index("bench", "0", "the web benchmark", "alive", "ready"),
    )
    server = WebServer(("127.0.0.1", 0), site)
    server.start("bench-http")
    print(server.port, flush=True)
    return server.stop


def serve_cheroot(body: bytes, threads: int) -> Callable[[], None]:
    from cheroot import wsgi

    def app(environ: object, start_response: Callable[..., object]) -> Iterable[bytes]:
        start_response(
            "200 OK",
            [("Content-Type", "text/plain; version=0.0.4"), ("Content-Length", str(len(body)))],
        )
        return [body]

    server = wsgi.Server(("127.0.0.1", 0), app, numthreads=threads, request_queue_size=BACKLOG)
    server.prepare()
    print(server.bind_addr[1], flush=True)
    threading.Thread(target=server.serve, daemon=True).start()
    return server.stop


def serve_stdlib(body: bytes) -> Callable[[], None]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = BACKLOG

    server = Server(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.shutdown


def child(kind: str) -> int:
    """Serve until stdin closes (the parent's end of the pipe)."""
    raise_open_file_limit()
    body = exposition()
    if kind.startswith("cheroot-"):
        stop = serve_cheroot(body, int(kind.removeprefix("cheroot-")))
    else:
        stop = {"podres": serve_podres, "stdlib": serve_stdlib}[kind](body)
    sys.stdin.read()
    stop()
    return 0


# ------------------------------------------------------------------ the client (parent)


def raise_open_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError(f"no thread count for {pid}")


@dataclass
class Scrapes:
    """Sequential keep-alive scrapes: their latencies, and whether all were answered."""

    latencies: list[float]
    wanted: int

    @property
    def served(self) -> bool:
        return len(self.latencies) == self.wanted

    def quantile(self, q: float) -> str:
        if len(self.latencies) < 2:  # noqa: PLR2004 - quantiles need two samples
            return "-"
        cuts = statistics.quantiles(self.latencies, n=100, method="inclusive")
        return f"{cuts[round(q * 100) - 1] * 1e3:.2f} ms"


def connect_all(port: int, count: int, within_s: float) -> list[socket.socket | None]:
    """``count`` connections to ``port``, made side by side; None for those not made."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    pending = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        pending.register(sock, selectors.EVENT_WRITE)
    made: set[socket.socket] = set()
    deadline = time.monotonic() + within_s
    while pending.get_map() and (left := deadline - time.monotonic()) > 0:
        for key, _ in pending.select(left):
            done = key.fileobj
            assert isinstance(done, socket.socket)
            pending.unregister(done)
            if done.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                made.add(done)
    pending.close()
    result: list[socket.socket | None] = []
    for sock in socks:
        if sock in made:
            result.append(sock)
        else:
            sock.close()
            result.append(None)
    return result


def scrape(port: int, count: int, timeout: float) -> Scrapes:
    """``count`` GET /metrics on one new connection; stops at the first failure."""
    latencies: list[float] = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        for _ in range(count):
            start = time.perf_counter()
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            response.read()
            if response.status != 200:  # noqa: PLR2004 - HTTP OK
                break
            latencies.append(time.perf_counter() - start)
    except (OSError, http.client.HTTPException):
        pass
    finally:
        conn.close()
    return Scrapes(latencies, count)


class Attack:
    """Slowloris clients (a head that never ends, a byte a second) and idle connections.

    All connect at once, without blocking: a server with a short listen backlog drops
    SYNs, which the kernel sends again after 1 s, 3 s, 7 s...; the connections not made
    within ``connect_s`` are given up (and counted: ``connected``)."""

    def __init__(self, port: int, slow: int, idle: int, connect_s: float) -> None:
        self.idle = connect_all(port, idle, connect_s)
        self.slow = connect_all(port, slow, connect_s)
        for sock in self.slow:
            self._send(sock, b"GET /metrics HTTP/1.1\r\nHost: bench\r\nX-Wait: ")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    @staticmethod
    def _send(sock: socket.socket | None, data: bytes) -> None:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.send(data)

    def _trickle(self) -> None:
        while not self._stop.wait(1.0):
            for sock in self.slow:
                self._send(sock, b"x")

    @property
    def connected(self) -> int:
        return sum(s is not None for s in self.idle + self.slow)

    def closed_by_server(self) -> int:
        """How many of the connections the server has closed."""
        closed = 0
        for sock in self.idle + self.slow:
            if sock is None:
                continue
            sock.setblocking(False)
            try:
                closed += sock.recv(65536) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        return closed

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for sock in self.idle + self.slow:
            if sock is not None:
                sock.close()


def fds_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass
class Result:
    server: str
    quiet: Scrapes
    quiet_threads: int
    attacked: Scrapes
    attack_threads: int
    connected: int  # attack connections the client made
    held: int  # sockets the server held for them once it had accepted what it would
    closed: int  # of the attack connections, those the server closed by the end
    stderr_lines: int  # what the server wrote on stderr meanwhile (tracebacks)


def settle(pid: int, base_fds: int, want: int, within_s: float) -> int:
    """Wait until the server holds ``want`` more sockets than ``base_fds``, or holds no
    more for two seconds, or ``within_s`` passed; how many more it holds."""
    deadline = time.monotonic() + within_s
    held, since = fds_of(pid) - base_fds, time.monotonic()
    while held < want and time.monotonic() < deadline and time.monotonic() - since < SETTLED_S:
        time.sleep(0.1)
        now = fds_of(pid) - base_fds
        if now != held:
            held, since = now, time.monotonic()
    return held


def measure(kind: str, scrapes: int, timeout: float, connect_s: float) -> Result:
    with tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            scrape(port, 20, timeout)  # warm-up: imports, the first connection
            quiet = scrape(port, scrapes, timeout)
            quiet_threads = threads_of(proc.pid)
            base_fds = fds_of(proc.pid)
            attack = Attack(port, SLOWLORIS, IDLE, connect_s)
            try:
                held = settle(proc.pid, base_fds, attack.connected, connect_s)
                threads = threads_of(proc.pid)
                attacked = scrape(port, scrapes, timeout)
                attack_threads = max(threads, threads_of(proc.pid))
                closed = attack.closed_by_server()
            finally:
                attack.close()
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        stderr.seek(0)
        stderr_lines = len(stderr.read().splitlines())
    return Result(
        kind,
        quiet,
        quiet_threads,
        attacked,
        attack_threads,
        attack.connected,
        held,
        closed,
        stderr_lines,
    )


def report(results: list[Result], scrapes: int, timeout: float) -> None:
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {scrapes} sequential "
        f"keep-alive scrapes of {len(exposition()) // 1024} KiB; attack: {SLOWLORIS} slowloris "
        f"+ {IDLE} idle connections; a scrape waits at most {timeout:.0f} s"
    )
    head = (
        f"{'server':<11} | {'quiet p50':>9} {'p99':>9} {'threads':>7} | {'attack p50':>10} "
        f"{'p99':>9} {'threads':>7} {'served':>9} {'conns':>5} {'held':>5} {'closed':>6} | "
        f"{'stderr':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        served = "yes" if r.attacked.served else f"no ({len(r.attacked.latencies)})"
        print(
            f"{r.server:<11} | {r.quiet.quantile(0.5):>9} {r.quiet.quantile(0.99):>9} "
            f"{r.quiet_threads:>7} | {r.attacked.quantile(0.5):>10} "
            f"{r.attacked.quantile(0.99):>9} {r.attack_threads:>7} {served:>9} "
            f"{r.connected:>5} {r.held:>5} {r.closed:>6} | {r.stderr_lines:>6}"
        )
    print(
        "served: every scrape under attack answered (else how many were before the first "
        "that was not); conns: attack connections made; held: sockets the server held for "
        "them; closed: attack connections the server closed by the end; stderr: lines the "
        "server wrote there"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 scrapes per phase, not 2,000")
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.serve:
        return child(ns.serve)
    raise_open_file_limit()
    scrapes, timeout, connect_s = (300, 3.0, 4.0) if ns.quick else (2000, 5.0, 10.0)
    results = [measure(kind, scrapes, timeout, connect_s) for kind in SERVERS]
    report(results, scrapes, timeout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
