"""Daemon footprint: what the exporter and the device plugin cost as processes.

Usage: python bench/footprint.py [--quick] [--steady SECONDS] [--large-pods N,N]
(also run by bench/bench.py after the in-process measures)

The simulated kubelet runs in its own process (``python -m podres_sim``,
the demo scenario with its churn, and its device manager). Beside it, each daemon
runs as its own process exactly as on a node: ``podres export`` polling every 10 s,
``podres plugin`` advertising a few ``dev`` resources to the simulated kubelet
(the demo's ``hpc`` pods are admitted through it). Once both answer ``/readyz``,
a steady window follows with a Prometheus-like scraper (``/metrics`` of both every
15 s, OpenMetrics, gzip). Each daemon's CPU time (utime + stime from
``/proc/<pid>/stat``) is read every second: steady CPU is the whole window's
average, burst the busiest 1 s (a poll, a scrape's rendering). Memory is VmRSS
when ready and at the end, and VmHWM (the peak) at the end, from
``/proc/<pid>/status``. The simulator's own CPU is never counted.

The full run adds the exporter alone on large synthetic nodes for the limits:
``synthetic_scenario`` with 2,000 and 20,000 pods (128 CPUs, two devices per pod,
one pod in 20 with an exclusive CPU, no churn), served as ``--scenario synthetic:PODS:20``.

docs/performance.md ("Daemon footprint") turns these figures into the manifests'
requests and limits with the rule in ``derive`` below, which this script prints.
Linux only (procfs). No figure is asserted: they are reported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path

from podres_sim import load_builtin

CLK_TCK = os.sysconf("SC_CLK_TCK")
SCRAPE_EVERY_S = 15.0
POLL_INTERVAL = "10s"
READY_WAIT_S = 120.0  # how long a daemon may take to become ready before the run is abandoned
STOP_WAIT_S = 20.0
LARGE_WINDOW_S = 60.0  # steady window on a large node (at most the demo's)
# What Prometheus sends: OpenMetrics preferred, the text format as a fallback; gzip accepted.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
MIB = 1024 * 1024

# The device plugin's resources: three `dev` rules over a /dev tree of ordinary files.
# podres.io/rdma-vf is the demo scenario's device-plugin resource: the simulated kubelet
# admits the demo's hpc pods through the plugin (GetPreferredAllocation + Allocate).
PLUGIN_DEV_FILES = (
    *(f"infiniband/uverbs{i}" for i in range(8)),
    "fuse",
    *(f"ttyS{i}" for i in range(4)),
)
PLUGIN_CONFIG = """\
[[resource]]
name = "podres.io/rdma-vf"
[resource.discover]
kind = "dev"
glob = "infiniband/uverbs*"

[[resource]]
name = "example.com/fuse"
replicas = 8
[resource.discover]
kind = "dev"
glob = "fuse"

[[resource]]
name = "example.com/serial"
[resource.discover]
kind = "dev"
glob = "ttyS*"
"""


# ----------------------------------------------------------------------------- procfs


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of every thread of ``pid``, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLK_TCK


def memory_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM in bytes, and Threads, from ``/proc/<pid>/status``."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024  # "123456 kB"
        elif key == "Threads":
            out[key] = int(value)
    return out


# ----------------------------------------------------------------------------- processes


@dataclass
class Daemon:
    """A child process, its log file, and (for a measured daemon) its figures."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    url: str = ""
    startup_cpu_s: float = 0.0
    rss_ready: int = 0
    rss_end: int = 0
    hwm_end: int = 0
    threads: int = 0
    samples: list[tuple[float, float]] = field(default_factory=list)  # (monotonic, CPU s)
    scrapes: int = 0
    scrape_bytes: int = 0
    problems: int = 0  # log lines at warning or above, counted when stopped

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with status {self.proc.returncode}:\n{self.tail()}"
            )

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_problems(self) -> int:
        """JSON log lines at warning level or above."""
        count = 0
        with contextlib.suppress(OSError):
            for line in self.log.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    if json.loads(line).get("level") in ("warning", "error", "critical"):
                        count += 1
        return count

    @property
    def steady_cpu(self) -> float:
        """Average CPU over the steady window, as a fraction of one core."""
        (t0, c0), (t1, c1) = self.samples[0], self.samples[-1]
        return (c1 - c0) / (t1 - t0)

    @property
    def burst_cpu(self) -> float:
        """The busiest ~1 s of the steady window, as a fraction of one core."""
        pairs = zip(self.samples, self.samples[1:], strict=False)
        return max((c1 - c0) / (t1 - t0) for (t0, c0), (t1, c1) in pairs)


def spawn(name: str, args: Sequence[str], where: Path) -> Daemon:
    log = where / f"{name.replace(' ', '-')}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    return Daemon(name, proc, log)


def stop(daemon: Daemon) -> None:
    """SIGTERM, then SIGKILL if it does not exit in time; always reaps the process."""
    if daemon.proc.poll() is None:
        daemon.proc.send_signal(signal.SIGTERM)
        try:
            daemon.proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            print(f"{daemon.name}: no exit {STOP_WAIT_S:.0f} s after SIGTERM, killed")
            daemon.proc.kill()
            daemon.proc.wait()
    daemon.problems = daemon.log_problems()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - our own http URL
    try:
        with urllib.request.urlopen(request, timeout=30) as r:  # noqa: S310
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def wait_for(what: str, ok: Callable[[], bool], daemons: Sequence[Daemon]) -> None:
    """Poll ``ok()`` every 0.1 s; give up if a daemon dies or READY_WAIT_S pass."""
    deadline = time.monotonic() + READY_WAIT_S
    while not ok():
        for d in daemons:
            d.check_alive()
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {d.name}\n{d.tail()}" for d in daemons)
            raise RuntimeError(f"gave up waiting for {what}:\n{logs}")
        time.sleep(0.1)


def wait_ready(daemon: Daemon, others: Sequence[Daemon]) -> None:
    def ready() -> bool:
        with contextlib.suppress(OSError):
            return get(daemon.url + "/readyz")[0] == HTTPStatus.OK
        return False

    wait_for(f"{daemon.name} {daemon.url}/readyz", ready, [daemon, *others])
    daemon.startup_cpu_s = cpu_seconds(daemon.proc.pid)
    daemon.rss_ready = memory_status(daemon.proc.pid)["VmRSS"]


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    # A short name: the plugins' unix socket paths in it must fit in 107 bytes.
    path = Path(tempfile.mkdtemp(prefix="pr-fp-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- steady window


def steady(daemons: Sequence[Daemon], seconds: float, others: Sequence[Daemon]) -> None:
    """Sample every daemon's CPU once a second for ``seconds``; scrape every 15 s from
    the window's start (a scrape falls in the 1 s interval that follows it)."""
    headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
    ticks = max(2, round(seconds))
    start = time.monotonic()
    for d in daemons:
        d.samples = [(start, cpu_seconds(d.proc.pid))]
    next_scrape = 0.0
    for tick in range(1, ticks + 1):
        if tick - 1 >= next_scrape:
            next_scrape += SCRAPE_EVERY_S
            for d in daemons:
                status, body = get(d.url + "/metrics", headers)
                if status != HTTPStatus.OK:
                    raise RuntimeError(f"{d.name}: /metrics answered {status}")
                d.scrapes += 1
                d.scrape_bytes = len(body)
        time.sleep(max(0.0, start + tick - time.monotonic()))
        for d in [*daemons, *others]:
            d.check_alive()
        for d in daemons:
            d.samples.append((time.monotonic(), cpu_seconds(d.proc.pid)))
    for d in daemons:
        mem = memory_status(d.proc.pid)
        d.rss_end, d.hwm_end, d.threads = mem["VmRSS"], mem["VmHWM"], mem["Threads"]


# ----------------------------------------------------------------------------- runs


def sim_args(scenario: str, tmp: Path) -> list[str]:
    return [
        "-m",
        "podres_sim",
        "--scenario",
        scenario,
        "--socket",
        str(tmp / "kubelet.sock"),
        "--sysfs-out",
        str(tmp / "sys"),
    ]


def exporter_args(tmp: Path, port: int) -> list[str]:
    # Pod and container logs: empty directories, so nothing of this machine is read.
    for d in ("pods", "containers"):
        (tmp / "log" / d).mkdir(parents=True, exist_ok=True)
    return [
        "-m",
        "podres_exporter",
        "export",
        "--kubelet-socket",
        str(tmp / "kubelet.sock"),
        "--path.sysfs",
        str(tmp / "sys"),
        "--path.pod-logs",
        str(tmp / "log" / "pods"),
        "--path.container-logs",
        str(tmp / "log" / "containers"),
        "--listen-address",
        f"127.0.0.1:{port}",
        "--poll-interval",
        POLL_INTERVAL,
        "--log-format",
        "json",
    ]


def plugin_args(tmp: Path, port: int) -> list[str]:
    dev = tmp / "dev"
    for name in PLUGIN_DEV_FILES:
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).touch()
    config = tmp / "plugin.toml"
    config.write_text(PLUGIN_CONFIG)
    return [
        "-m",
        "podres_exporter",
        "plugin",
        "--resources",
        str(config),
        "--device-plugin-dir",
        str(tmp / "device-plugins"),
        "--path.dev",
        str(dev),
        "--listen-address",
        f"127.0.0.1:{port}",
        "--log-format",
        "json",
    ]


def run_demo(seconds: float) -> list[Daemon]:
    """The exporter and the device plugin beside the demo node's simulated kubelet."""
    children: list[Daemon] = []
    with workdir() as tmp:
        try:
            sim = spawn("simulator", sim_args("demo", tmp), tmp)
            children.append(sim)
            wait_for(
                "the simulated kubelet's sockets",
                lambda: (
                    (tmp / "kubelet.sock").exists()
                    and (tmp / "device-plugins" / "kubelet.sock").exists()
                ),
                [sim],
            )
            exp_port, plugin_port = free_port(), free_port()
            exporter = spawn("exporter", exporter_args(tmp, exp_port), tmp)
            exporter.url = f"http://127.0.0.1:{exp_port}"
            children.append(exporter)
            plugin = spawn("device plugin", plugin_args(tmp, plugin_port), tmp)
            plugin.url = f"http://127.0.0.1:{plugin_port}"
            children.append(plugin)
            wait_ready(exporter, [sim])
            wait_ready(plugin, [sim])  # ready = every resource registered with the kubelet
            steady([exporter, plugin], seconds, [sim])
        finally:
            for d in reversed(children):
                stop(d)
        return [exporter, plugin]


def run_large(pods: int, seconds: float) -> Daemon:
    """The exporter alone on a large synthetic node (no churn)."""
    children: list[Daemon] = []
    with workdir() as tmp:
        try:
            sim = spawn("simulator", sim_args(f"synthetic:{pods}:20", tmp), tmp)
            children.append(sim)
            wait_for("the simulated kubelet's socket", (tmp / "kubelet.sock").exists, [sim])
            port = free_port()
            exporter = spawn("exporter", exporter_args(tmp, port), tmp)
            exporter.url = f"http://127.0.0.1:{port}"
            children.append(exporter)
            wait_ready(exporter, [sim])
            steady([exporter], seconds, [sim])
        finally:
            for d in reversed(children):
                stop(d)
        return exporter


# ----------------------------------------------------------------------------- report


def mib(n: int) -> float:
    return n / MIB


def round_up(x: float, step: int) -> int:
    return max(step, math.ceil(x / step) * step)


@dataclass(frozen=True)
class Resources:
    cpu_request_m: int
    memory_request_mib: int
    cpu_limit_m: int
    memory_limit_mib: int

    def __str__(self) -> str:
        return (
            f"requests cpu {self.cpu_request_m}m, memory {self.memory_request_mib}Mi; "
            f"limits cpu {self.cpu_limit_m}m, memory {self.memory_limit_mib}Mi"
        )


def derive(base: Daemon, larger: Sequence[Daemon] = ()) -> Resources:
    """Requests and limits from the figures: the rule of docs/performance.md.

    ``base``: the daemon on the demo node; ``larger``: the same daemon on larger
    nodes, the largest last.

    cpu request    = base steady CPU, rounded up to a multiple of 10m;
    memory request = base VmHWM x 1.25, rounded up to a multiple of 8 MiB;
    cpu limit      = the least multiple of 100m that is at least every burst measured,
                     2 x the largest node's steady CPU (its poll cycle then takes at
                     most half the poll interval) and the base start-up CPU / 2 s
                     (ready within about 2 s), but at most 1000m (one Python process);
    memory limit   = 1.5 x the largest VmHWM measured, rounded up to a multiple of 128 MiB.
    """
    every = [base, *larger]
    need = max(
        *(d.burst_cpu for d in every),
        2 * every[-1].steady_cpu,
        base.startup_cpu_s / 2.0,
    )
    peak_mib = mib(max(d.hwm_end for d in every)) * 1.5
    return Resources(
        cpu_request_m=round_up(base.steady_cpu * 1000, 10),
        memory_request_mib=round_up(mib(base.hwm_end) * 1.25, 8),
        cpu_limit_m=min(1000, round_up(need * 1000, 100)),
        memory_limit_mib=round_up(peak_mib, 128),
    )


def print_head(header: str) -> None:
    """A table's header line, then a rule as long."""
    print(header)
    print("-" * len(header))


def report(rows: Sequence[tuple[str, Daemon]], window_s: float) -> None:
    print(
        f"\ndaemon footprint: steady window {window_s:.0f} s, --poll-interval {POLL_INTERVAL}, "
        f"/metrics scraped every {SCRAPE_EVERY_S:.0f} s (OpenMetrics, gzip); "
        f"{os.cpu_count()} CPUs here"
    )
    print_head(
        f"{'process':<30} {'steady':>7} {'burst':>7} {'RSS ready':>10} {'RSS end':>8} "
        f"{'HWM':>7} {'start-up':>9} {'thr':>4} {'scrape':>8}"
    )
    for name, d in rows:
        print(
            f"{name:<30} {d.steady_cpu * 100:>6.1f}% {d.burst_cpu * 100:>6.1f}% "
            f"{mib(d.rss_ready):>6.0f} MiB {mib(d.rss_end):>4.0f} MiB {mib(d.hwm_end):>3.0f} MiB "
            f"{d.startup_cpu_s:>7.2f} s {d.threads:>4} {d.scrape_bytes / 1024:>5.0f} KB"
        )
        if d.problems:
            print(f"  note: {d.problems} log lines at warning or above in the {d.name}'s log")
        if d.proc.returncode != 0:
            print(f"  note: the {d.name} exited with status {d.proc.returncode} on SIGTERM")
    print(
        "steady: average CPU of the window, % of one core; burst: the busiest 1 s; "
        "start-up: CPU time until /readyz; scrape: last gzipped /metrics"
    )


def _terminated(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def run_all(quick: bool, steady_s: float | None = None, large: Sequence[int] | None = None) -> int:
    """Measure, print the table and the derived requests and limits."""
    if not Path("/proc/self/stat").exists():
        print("\ndaemon footprint: skipped (needs Linux procfs)")
        return 0
    window = steady_s if steady_s is not None else (15.0 if quick else 120.0)
    sizes = list(large) if large is not None else ([] if quick else [2000, 20000])
    # SIGTERM too unwinds through the finally blocks that stop the daemons.
    signal.signal(signal.SIGTERM, _terminated)
    exporter, plugin = run_demo(window)
    demo_pods = load_builtin("demo").pod_count
    rows = [
        (f"exporter, demo ({demo_pods} pods)", exporter),
        ("device plugin, 3 dev resources", plugin),
    ]
    larger = []
    for pods in sorted(sizes):
        d = run_large(pods, min(window, LARGE_WINDOW_S))
        larger.append(d)
        rows.append((f"exporter, synthetic {pods:,} pods", d))
    report(rows, window)
    print("derived (rule in docs/performance.md, 'Daemon footprint'):")
    print(f"  exporter:      {derive(exporter, larger)}")
    print(f"  device plugin: {derive(plugin)}")
    if not larger:
        print("  (no large node in this run: the exporter's limits rest on the demo alone)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="15 s window, no large node")
    parser.add_argument("--steady", type=float, help="steady window of the demo node, seconds")
    parser.add_argument(
        "--large-pods",
        type=lambda v: [int(x) for x in v.split(",") if x.strip() and int(x)],
        help="pod counts of the large synthetic nodes, comma-separated (default 2000,20000; "
        "0: none)",
    )
    ns = parser.parse_args()
    return run_all(ns.quick, ns.steady, ns.large_pods)


if __name__ == "__main__":
    raise SystemExit(main())
