"""What the Pods API reader holds at 5,000 pods: resident memory and Python objects.

Usage: python bench/podsapi_memory.py [--pods N] [--top K]

The simulated kubelet of the ``identity`` scenario (``identity_scenario(N)``: Deployment
pods of 10 labels, the Pods API on) runs in a process of its own (``bench/simproc.py``);
this process then reads it with one :class:`~podres_exporter.sources.podsapi.PodsApiSource`
until the initial sync is complete, twice, each in a fresh child process:

1. resident memory (``/proc/self/status`` VmRSS, and ``smaps_rollup``'s anonymous memory)
   before the source starts and after it synced (a ``gc.collect()`` first), and the
   growth's peak (VmHWM);
2. the same under ``tracemalloc``: the Python memory the synced pods hold, its peak during
   the sync, and the largest holders by line.

It is cheap (seconds) and repeatable, so it measures each change to the reader; the
exporter's whole figure is ``bench/exporter.py --pod-identity``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors import pods
from podres_exporter.core.podidentity import PodIdentity, merge
from podres_exporter.core.podlabels import Allowlist
from podres_exporter.core.podmeta import PodDirectory, Route
from podres_exporter.exporter import textformat
from podres_exporter.exporter.textformat import WriteCache
from podres_exporter.sources.podsapi import PodsApiSource
from podres_sim.kubelet.podsapi import pods_api_socket_for

HERE = Path(__file__).resolve().parent
MIB = 1024 * 1024
IDENTITY_LABELS = "app.kubernetes.io/*,team,tier"  # as bench/exporter.py's --pod-identity
LABELS = tuple(IDENTITY_LABELS.split(","))


def _status() -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "Anonymous":
            out[key] = int(value.split()[0]) * 1024
    return out


def _synced(socket: str, pods: int) -> tuple[PodDirectory, float]:
    """The Pods API on ``socket`` read to its initial sync of ``pods`` pods, and how long
    that took; the reader stopped, its directory kept."""
    source = PodsApiSource(socket)
    started = time.perf_counter()
    source.start()
    try:
        while True:
            d = source.current()
            if d is not None and d.synced and len(d.pods) >= pods:
                return d, time.perf_counter() - started
            time.sleep(0.02)
    finally:
        source.stop()


def _read(socket: str, pods: int, traced: bool, top: int) -> dict[str, object]:
    """Read the Pods API on ``socket`` to its initial sync; what it cost."""
    gc.collect()
    before = _status()
    if traced:
        tracemalloc.start()
        base = tracemalloc.take_snapshot()
    directory, took = _synced(socket, pods)
    gc.collect()
    after = _status()
    out: dict[str, object] = {
        "pods": len(directory.pods),
        "sync_s": took,
        "rss_before": before["VmRSS"],
        "rss_after": after["VmRSS"],
        "anon_growth": after["Anonymous"] - before["Anonymous"],
        "hwm": after["VmHWM"],
    }
    if not traced:  # the whole path held as the exporter holds it: resident
        kept = _serve(merge({Route.PODS_API: directory}, Allowlist.of(LABELS)))
        gc.collect()
        out["rss_served"] = _status()["VmRSS"]
        out["series"] = {f.name: len(getattr(f, "rows", ())) for f in kept[0]}
        return out
    current, peak = tracemalloc.get_traced_memory()
    stats = tracemalloc.take_snapshot().compare_to(base, "lineno")
    out["traced"], out["traced_peak"] = current, peak
    holders = [(str(s.traceback), s.size_diff) for s in stats[:top]]
    base = tracemalloc.take_snapshot()
    identity = merge({Route.PODS_API: directory}, Allowlist.of(LABELS))
    gc.collect()
    out["merged"] = tracemalloc.get_traced_memory()[0] - current
    merged = tracemalloc.take_snapshot().compare_to(base, "lineno")
    out["holders"] = holders + [(str(s.traceback), s.size_diff) for s in merged[:top]]
    out.update(_served(identity))
    tracemalloc.stop()
    return out


def _families(identity: PodIdentity) -> list[Metric]:
    """The ``pods`` collector's own families of ``identity`` (no render context: no
    device joined)."""
    return list(pods._families(pods._Part(identity, ())))


def _write(families: list[Metric]) -> tuple[WriteCache, list[bytes]]:
    """``families`` in both formats, the text kept as the exporter keeps it."""
    cache = textformat.WriteCache()
    return cache, [textformat.write(families, om, cache=cache) for om in (False, True)]


def _serve(identity: PodIdentity) -> tuple[list[Metric], WriteCache, list[bytes]]:
    """What the exporter holds of ``identity``: the families and their text."""
    families = _families(identity)
    return families, *_write(families)


def _served(identity: PodIdentity) -> dict[str, int]:
    """What :func:`_serve` holds, traced: the families, then their text."""
    start = tracemalloc.get_traced_memory()[0]
    families = _families(identity)
    gc.collect()
    built = tracemalloc.get_traced_memory()[0]
    written = _write(families)
    gc.collect()
    texts = tracemalloc.get_traced_memory()[0] - built
    del families, written
    return {"families": built - start, "texts": texts}


def measure(socket: str, pods: int, traced: bool, top: int) -> dict[str, object]:
    """One reading in a fresh child process (so each starts from the same heap)."""
    args = [sys.executable, __file__, "--child", socket, "--pods", str(pods), "--top", str(top)]
    if traced:
        args.append("--traced")
    done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode:
        raise SystemExit(f"the reading failed:\n{done.stderr}")
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def main(argv: Sequence[str]) -> int:
    """Serve the scenario, read it twice, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.child:
        print(json.dumps(_read(ns.child, ns.pods, ns.traced, ns.top)))
        return 0
    with tempfile.TemporaryDirectory(prefix="podsmem-") as tmp:
        socket = Path(tmp) / "kubelet.sock"
        counts = Path(tmp) / "counts.json"
        scenario = f"identity:{ns.pods}"
        sim = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "simproc.py"),
                scenario,
                str(socket),
                "--counts",
                str(counts),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 300
            while not counts.exists():
                if sim.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the simulated kubelet did not start (exit {sim.poll()})")
                time.sleep(0.1)
            target = str(pods_api_socket_for(socket))
            plain = measure(target, ns.pods, False, ns.top)
            traced = measure(target, ns.pods, True, ns.top)
        finally:
            sim.terminate()
            sim.wait(timeout=30)
    report(plain, traced)
    return 0


def report(plain: dict[str, object], traced: dict[str, object]) -> None:
    """Print one reading of each kind."""

    def mib(key: str, of: dict[str, object] = plain) -> str:
        value = of[key]
        assert isinstance(value, int)
        return f"{value / MIB:.1f} MiB"

    print(f"python {sys.version.split()[0]}, pid {os.getpid()}")
    print(
        f"Pods API reader, {plain['pods']} pods synced in {plain['sync_s']:.2f} s: "
        f"resident {mib('rss_before')} -> {mib('rss_after')} "
        f"(anonymous +{mib('anon_growth')}), peak {mib('hwm')}"
    )
    print(
        f"Python objects held (tracemalloc): {mib('traced', traced)}, "
        f"peak during the sync {mib('traced_peak', traced)}; "
        f"the merged identity (--pod-labels {IDENTITY_LABELS}) {mib('merged', traced)}"
    )
    print(
        f"the pods collector's families {mib('families', traced)}, their text in both formats "
        f"with the writer's cache {mib('texts', traced)}; series {plain['series']}"
    )
    grown = int(str(plain["rss_served"])) - int(str(plain["rss_before"]))
    print(
        "resident with the merged identity, the families and their text held: "
        f"{mib('rss_served')} (+{grown / MIB:.1f} MiB)"
    )
    holders = traced.get("holders", [])
    assert isinstance(holders, list)
    for where, size in holders:
        print(f"  {size / MIB:+7.2f} MiB  {where}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
