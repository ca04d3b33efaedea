"""``podres top --once``, timed as a user runs it: a process of its own, imports included.

Usage: python bench/top.py [--quick] [--profile DIR]

Two sources at 500 and 5,000 pods (``sim.synthetic.fleet_scenario``): the simulated
kubelet read directly (top's local source, its own ``NodeReader``) and a running
exporter (``--exporter URL``). The simulator serves from a process of its own
(bench/simproc.py); the exporter is a third process, polling every ``EXPORTER_POLL``.
Each run's wall time covers the whole command: interpreter start, imports, the readings
(two, for the busy shares: from an exporter the second is its next poll, so a run waits
for up to one poll interval of the exporter) and the frame written to a pipe. Runs
follow each other at once, so each starts just after the poll its predecessor waited
for and waits most of ``EXPORTER_POLL`` again: the exporter rows are top's own work plus
nearly one poll interval.

``--profile DIR`` also writes one cProfile of each case (``python -m cProfile -o``).
The median is printed beside its target; figures from a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import footprint
import simproc

from podres_sim import SimKubelet
from podres_sim.host import SimHost

SIMPROC = str(Path(__file__).with_name("simproc.py"))
TARGET_S = {500: 1.0, 5000: 5.0}
EXPORTER_POLL = "2s"
COLUMNS = "160"
LINES = "50"


def top_args(source: Sequence[str]) -> list[str]:
    return ["-m", "podres_exporter.top", "--once", *source]


def run_top(args: Sequence[str], tmp: Path) -> tuple[float, str]:
    """One ``podres top`` process: its wall time and its output (an error if it failed)."""
    env = {**os.environ, "COLUMNS": COLUMNS, "LINES": LINES}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, cwd=tmp, check=False, timeout=120
    )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"podres top exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return took, proc.stdout.decode()


def busy_shown(frame: str) -> bool:
    """True when some container row shows a busy share (a ``%`` in the BUSY column)."""
    head = next((line for line in frame.splitlines() if " BUSY" in line), None)
    if head is None:
        return False
    col = head.index(" BUSY") + 1
    return any(line[col : col + 6].strip().endswith("%") for line in frame.splitlines())


def measure(pods: int, runs: int, profile: Path | None) -> list[tuple[str, int, list[float], bool]]:
    out: list[tuple[str, int, list[float], bool]] = []
    with footprint.workdir() as tmp:
        sock = tmp / "kubelet.sock"
        ref = f"fleet:{pods}"
        sim = footprint.spawn("simulator", [SIMPROC, ref, str(sock)], tmp)
        children = [sim]
        ticking = threading.Event()
        try:
            footprint.wait_for("the simulated kubelet's socket", sock.exists, [sim])
            host = SimHost(SimKubelet(simproc.scenario(ref), tmp / "unused.sock"), tmp / "host")
            paths = [
                "--path.sysfs",
                str(host.sysfs),
                "--path.procfs",
                str(host.procfs),
            ]
            local = ["--kubelet-socket", str(sock), *paths]
            port = footprint.free_port()
            exporter = footprint.spawn(
                "exporter",
                [
                    "-m",
                    "podres_exporter",
                    "export",
                    "--kubelet-socket",
                    str(sock),
                    *paths,
                    "--path.pod-logs",
                    str(host.pod_logs),
                    "--path.container-logs",
                    str(host.container_logs),
                    "--listen-address",
                    f"127.0.0.1:{port}",
                    "--poll-interval",
                    EXPORTER_POLL,
                    "--log-format",
                    "json",
                ],
                tmp,
            )
            exporter.url = f"http://127.0.0.1:{port}"
            children.append(exporter)
            footprint.wait_ready(exporter, [sim])

            # The CPU times move, as a node's do: /proc/stat every second, so that busy
            # shares exist (written from this process, not the exporter's or top's).
            def tick(host: SimHost = host) -> None:
                while not ticking.wait(1.0):
                    host.advance_cpu_times(1.0)

            threading.Thread(target=tick, name="host-clock", daemon=True).start()
            for label, source in (("local", local), ("exporter", ["--exporter", exporter.url])):
                run_top(top_args(source), tmp)  # warm: the page cache, the .pyc files
                times: list[float] = []
                shown = True
                for _ in range(runs):
                    took, frame = run_top(top_args(source), tmp)
                    times.append(took)
                    shown = shown and busy_shown(frame)
                out.append((label, pods, times, shown))
                if profile is not None:
                    profile.mkdir(parents=True, exist_ok=True)
                    dest = profile / f"top-{label}-{pods}.prof"
                    run_top(["-m", "cProfile", "-o", str(dest), *top_args(source)], tmp)
        finally:
            ticking.set()
            for d in reversed(children):
                footprint.stop(d)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 runs per case instead of 7")
    p.add_argument("--profile", type=Path, help="write a cProfile of each case here")
    p.add_argument("--pods", type=int, nargs="*", default=sorted(TARGET_S))
    a = p.parse_args()
    runs = 3 if a.quick else 7
    rows = []
    for pods in a.pods:
        rows.extend(measure(pods, runs, a.profile))
    print(f"podres top --once, {runs} runs each (exporter polling every {EXPORTER_POLL})")
    print(f"{'source':<10} {'pods':>6} {'median':>8} {'min':>7} {'max':>7} {'target':>7}  busy")
    for label, pods, times, shown in rows:
        target = TARGET_S.get(pods)
        goal = f"< {target:.0f}s" if target else ""
        verdict = "" if target is None else ("ok" if statistics.median(times) < target else "OVER")
        print(
            f"{label:<10} {pods:>6} {statistics.median(times):>7.2f}s {min(times):>6.2f}s "
            f"{max(times):>6.2f}s {goal:>7}  "
            f"{'shown' if shown else '-'} {verdict}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
