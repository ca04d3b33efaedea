"""What hostile HTTP clients cost the daemons' web server in memory, and whether it comes back.

Usage: python bench/hostile_clients.py [--quick] [--only exporter|plugin]

Real daemons in processes of their own: ``podres export`` on the ``huge`` node (the
simulated kubelet's 5,000 pods, bench/exporter_proc.py as bench/exporter.py starts it; a
/metrics body of about 7 MB) and ``podres plugin`` (no kubelet: it serves HTTP and
waits), each once over plain HTTP and once with a TLS web-config. The attacks, from
127.0.0.1, one after another against the same process:

- ``idle``: N connections that send nothing (over TLS: no handshake), held open;
- ``tls-idle``: N connections that finish the TLS handshake and send nothing;
- ``churn``: rounds of N connections opened and closed at once (a port scan);
- ``plain-to-tls``: N plain HTTP requests sent to the TLS port;
- ``no-read``: N clients that ask for /metrics (a 4 KiB receive buffer) and never read.

The exporter polls once, at its start (``--poll-interval 1h``), so that its own work does
not move its memory during the attacks; a scrape before each attack builds the answer.

For each: the daemon's resident memory (VmRSS) before, at its peak while the clients
are there, and 5 s after they left; and, while they are there, a well-behaved scrape of
/metrics from 127.0.0.2 (another address, as Prometheus) and a /healthz from 127.0.0.1
(the attackers' own address, as the kubelet's probe on the node): status and seconds.
N is 4,096 (``--quick``: 500). No figure is asserted: they are reported
(docs/performance.md, "HTTP server"; docs/security.md, "Memory").

Each daemon runs in a memory cgroup of its shipped pod's limit (the exporter 640Mi, the
plugin 128Mi, as the shipped manifests set them) where this machine lets the benchmark make one
(root, the memory controller of cgroup v2 or v1), so it fits its caps to that limit as in
its pod, and the kernel ends it if it goes past: the run then fails. Where no cgroup can
be made, the daemons run without a limit, and the run says so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import footprint

HERE = Path(__file__).parent
MIB = 2**20
HOLD_S = 3.0  # clients held this long (well inside the write deadline) before they leave
AFTER_S = 5.0  # then RSS is read this long after they left
WEB_CONFIG = "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
PLUGIN_CONFIG = '[[resource]]\nname = "example.com/uplink"\n[resource.discover]\n'
PLUGIN_CONFIG += 'kind = "netdev"\npattern = "enp*"\n'
REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
# The shipped pods' memory limits (deploy/base/exporter-daemonset.yaml and
# deploy/components/device-plugin/device-plugin-daemonset.yaml).
POD_LIMITS = {"exporter": 640 * MIB, "plugin": 128 * MIB}
# Where a memory cgroup may be made, and the file of its limit: cgroup v2, then v1.
_CGROUP_ROOTS = (
    (Path("/sys/fs/cgroup"), "memory.max"),
    (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
)


@contextlib.contextmanager
def memory_cgroup(name: str, limit: int) -> Iterator[Path | None]:
    """A new memory cgroup limited to ``limit`` bytes (its directory: write a pid to its
    ``cgroup.procs``), removed after; None where none can be made."""
    made: Path | None = None
    for root, limit_file in _CGROUP_ROOTS:
        where = root / f"podres-bench-{name}-{os.getpid()}"
        try:
            where.mkdir()
        except OSError:
            continue
        try:
            (where / limit_file).write_text(str(limit))
        except OSError:
            where.rmdir()
            continue
        made = where
        break
    try:
        yield made
    finally:
        if made is not None:
            for _ in range(50):  # its processes have ended, or end in a moment
                try:
                    made.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def confine(daemon: footprint.Daemon, cgroup: Path | None) -> None:
    """Move ``daemon`` into ``cgroup`` (before it reads its limit: it is still importing)."""
    if cgroup is not None:
        (cgroup / "cgroup.procs").write_text(str(daemon.proc.pid))
        print(f"  {daemon.name}: in a memory cgroup of {limit_of(cgroup) // MIB} MiB", flush=True)
    else:
        print(f"  {daemon.name}: no memory cgroup could be made here: no limit", flush=True)


def limit_of(cgroup: Path) -> int:
    for _, limit_file in _CGROUP_ROOTS:
        with contextlib.suppress(OSError, ValueError):
            return int((cgroup / limit_file).read_text())
    return 0


@dataclass
class Target:
    """A daemon under attack: its process and its base URL."""

    name: str
    daemon: footprint.Daemon
    url: str

    @property
    def tls(self) -> bool:
        return self.url.startswith("https")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def rss(self) -> int:
        return footprint.memory_status(self.daemon.proc.pid)["VmRSS"]


def client_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def ask(url: str, path: str, source: str) -> str:
    """One request from ``source`` on a new connection: "STATUS in S s" or the error."""
    start = time.monotonic()
    port = int(url.rsplit(":", 1)[1])
    try:
        with socket.create_connection(("127.0.0.1", port), 30, (source, 0)) as raw:
            sock = client_context().wrap_socket(raw) if url.startswith("https") else raw
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := sock.recv(1 << 20):
                data += chunk
    except OSError as err:
        return f"failed ({type(err).__name__})"
    status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "none"
    return f"{status} in {time.monotonic() - start:.2f} s"


class Peak:
    """The daemon's VmRSS, sampled every 50 ms while in use: its peak."""

    def __init__(self, target: Target) -> None:
        self.target, self.peak = target, target.rss()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.05):
            with contextlib.suppress(OSError, KeyError):
                self.peak = max(self.peak, self.target.rss())

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


def connect(target: Target, *, rcvbuf: int = 0) -> socket.socket:
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", target.port))
    return sock


def hold_idle(target: Target, n: int) -> list[socket.socket]:
    return [connect(target) for _ in range(n)]


def hold_handshaken(target: Target, n: int) -> list[socket.socket]:
    ctx = client_context()
    return [ctx.wrap_socket(connect(target)) for _ in range(n)]


def hold_non_reading(target: Target, n: int) -> list[socket.socket]:
    ctx = client_context()
    held = []
    for _ in range(n):
        sock = connect(target, rcvbuf=4096)
        with contextlib.suppress(OSError):  # replaced by a newcomer meanwhile
            sock = ctx.wrap_socket(sock) if target.tls else sock
            sock.sendall(REQUEST)
        held.append(sock)
    return held


def churn(target: Target, n: int, rounds: int) -> list[socket.socket]:
    for _ in range(rounds):
        for sock in [connect(target) for _ in range(n)]:
            sock.close()
    return []


def plain_to_tls(target: Target, n: int) -> list[socket.socket]:
    for _ in range(n):
        with contextlib.suppress(OSError), connect(target) as sock:
            sock.sendall(REQUEST)
            while sock.recv(65536):
                pass
    return []


def attack(target: Target, name: str, clients: Callable[[], list[socket.socket]]) -> None:
    """Run one attack and print its row."""
    ask(target.url, "/metrics", "127.0.0.2")  # the answer built and cached before
    time.sleep(1.5)  # the last attack's trim
    before = target.rss()
    with Peak(target) as peak:
        held = clients()
        time.sleep(HOLD_S / 2)
        scrape = ask(target.url, "/metrics", "127.0.0.2")
        probe = ask(target.url, "/healthz", "127.0.0.1")
        time.sleep(HOLD_S / 2)
        for sock in held:
            sock.close()
    time.sleep(AFTER_S)
    after = target.rss()
    print(
        f"  {name:<28} RSS {before / MIB:6.1f} -> peak {peak.peak / MIB:6.1f} -> after "
        f"{after / MIB:6.1f} MiB   scrape {scrape:<16} healthz {probe}",
        flush=True,
    )


def run_attacks(target: Target, n: int) -> None:
    print(f"{target.name} ({target.url}), N = {n}:", flush=True)
    attack(target, f"idle x{n}", lambda: hold_idle(target, n))
    if target.tls:
        attack(target, f"tls-idle x{n}", lambda: hold_handshaken(target, n))
    attack(target, f"churn 4 rounds x{n}", lambda: churn(target, n, 4))
    if target.tls:
        attack(target, f"plain-to-tls x{n}", lambda: plain_to_tls(target, n))
    attack(target, f"no-read x{n}", lambda: hold_non_reading(target, n))


def wait_url(daemon: footprint.Daemon, find: Callable[[], str | None]) -> str:
    """The URL ``find`` gives once it gives one (the daemon must stay alive meanwhile)."""
    found: list[str] = []

    def ok() -> bool:
        found.append(find() or "")
        return bool(found[-1])

    footprint.wait_for(daemon.name, ok, [daemon])
    return found[-1]


def ready(url: str, path: str = "/readyz") -> Callable[[], str | None]:
    """Whether ``url`` answers ``path`` with 200 (then the URL)."""

    def check() -> str | None:
        return url if ask(url, path, "127.0.0.1").startswith("200") else None

    return check


@contextlib.contextmanager
def exporter(tmp: Path, tls: bool, cgroup: Path | None) -> Iterator[Target]:
    name = "exporter-tls" if tls else "exporter"
    sim = footprint.spawn(
        f"{name} simulator",
        [str(HERE / "simproc.py"), "huge", str(tmp / f"{name}.sock"), "--counts", str(tmp / "c")],
        tmp,
    )
    port = footprint.free_port()
    (tmp / f"host-{name}").mkdir()
    extra = ["--web.config.file", str(tmp / "web.yml")] if tls else []
    exp = footprint.spawn(
        name,
        [
            str(HERE / "exporter_proc.py"), "huge", str(tmp / f"{name}.sock"),
            str(tmp / f"host-{name}"), str(port), "1h", *extra,
        ],
        tmp,
    )  # fmt: skip
    confine(exp, cgroup)
    try:
        url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        wait_url(exp, ready(url))
        yield Target(name, exp, url)
    finally:
        footprint.stop(exp)
        footprint.stop(sim)


@contextlib.contextmanager
def plugin(tmp: Path, tls: bool, cgroup: Path | None) -> Iterator[Target]:
    name = "plugin-tls" if tls else "plugin"
    where = tmp / name
    (where / "dp").mkdir(parents=True)
    (where / "sys").mkdir()
    (where / "plugin.toml").write_text(PLUGIN_CONFIG)
    extra = ["--web.config.file", str(tmp / "web.yml")] if tls else []
    proc = footprint.spawn(
        name,
        [
            "-m", "podres_exporter", "plugin", "--resources", str(where / "plugin.toml"),
            "--device-plugin-dir", str(where / "dp"), "--path.sysfs", str(where / "sys"),
            "--listen-address", "127.0.0.1:0", "--log-format", "json", *extra,
        ],
        tmp,
    )  # fmt: skip
    confine(proc, cgroup)

    def started() -> str | None:
        for line in proc.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("event") == "plugin_started":
                    return str(event["url"])
        return None

    try:
        url = wait_url(proc, started)
        wait_url(proc, ready(url, "/healthz"))  # not ready: no kubelet registers it
        yield Target(name, proc, url)
    finally:
        footprint.stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 clients, not 4,096")
    parser.add_argument("--only", choices=("exporter", "plugin"))
    args = parser.parse_args()
    n = 500 if args.quick else 4096
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2 * n + 256)), hard))
    with footprint.workdir() as tmp:
        os.chdir(tmp)
        openssl = shutil.which("openssl")
        if openssl is None:
            sys.exit("the openssl command is needed (Debian package openssl) for the TLS runs")
        subprocess.run(
            [
                openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:P-256", "-nodes", "-keyout", "key.pem", "-out", "cert.pem",
                "-days", "2", "-subj", "/CN=localhost",
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        (tmp / "web.yml").write_text(WEB_CONFIG)
        daemons = [(exporter, "exporter"), (plugin, "plugin")]
        for start, kind in daemons:
            if args.only not in (None, kind):
                continue
            for tls in (False, True):
                cgroup = memory_cgroup(f"{kind}-tls" if tls else kind, POD_LIMITS[kind])
                with cgroup as where, start(tmp, tls, where) as target:
                    run_attacks(target, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
