"""The exporter's benchmark: one poll cycle beside the floors under it, and a cached scrape.

Usage: python bench/bench.py [--quick]

For each scenario (``sim.synthetic``: ``small``, ``large``, ``huge``, and the ``fleet``
rows of one pod shape at 50, 500 and 5,000 pods for linearity) the simulated kubelet
runs in a process of its own (bench/simproc.py, real gRPC over a unix socket), so that
this process, the exporter's, does none of the simulator's work. The simulated host
(sysfs with the CPU topology and the device tree, procfs, the kubelet's log names, a
fake NVML: ``podres_sim.host.SimHost``) is written here before measuring; every collector
is on, so a poll reads all the telemetry.

Measured in the same run, each ``--repeat`` times (median and min-max):

- floor 1: ``List`` + ``GetAllocatableResources`` through a bare stub of
  ``podres_exporter._generated``, decoded by protobuf, nothing else;
- floor 2: floor 1 plus a Python walk over every decoded field (the least any
  Python code that looks at the whole answer must pay);
- the poll cycle: ``NodeReader.observe`` (kubelet calls, topology, telemetry) +
  ``view`` (accounting, join) + the families rendered to the text format, as the
  Poller does for each new view; its CPU time per cycle from ``/proc/<pid>/stat``;
- ratio: the poll cycle's median over floor 2's; the target is at most 3x;
- the kubelet-only cycle: the same with the collectors that need no telemetry, none
  read (what the floors are made of), and its ratio;
- a cached scrape of ``/metrics`` from a running exporter (scrapes never poll).

Then (full run only; ``--no-footprint`` skips it) the daemon footprint
(bench/footprint.py): the exporter and the device plugin as processes of their own,
their steady and burst CPU and their memory.
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import footprint
import grpc
import simproc
from google.protobuf.message import Message

from podres_exporter import collectors
from podres_exporter._generated.podresources.v1 import api_pb2, api_pb2_grpc
from podres_exporter.cli.export import Exporter
from podres_exporter.daemon import process
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.exporter.settings import Settings, build
from podres_exporter.exporter.textformat import WriteCache, render_families
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim import SimKubelet
from podres_sim.host import SimHost

TARGET_RATIO = 3.0
# Collectors that need no telemetry source but only report on it.
TELEMETRY_VIEWS = ("sources", "placement")
MAX_MESSAGE = 64 * 1024 * 1024
SIMPROC = str(Path(__file__).with_name("simproc.py"))


@dataclass
class Row:
    name: str
    pods: int = 0
    floor1: list[float] | None = None
    floor2: list[float] | None = None
    cycle: list[float] | None = None
    cycle_cpu_s: float = 0.0
    kubelet_cycle: list[float] | None = None  # the same without the telemetry
    list_bytes: int = 0
    scrape_s: float = 0.0
    body_bytes: int = 0
    gzip_bytes: int = 0


def timings(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def walk(msg: Message) -> int:
    """Touch every field of a decoded message, recursively; count the values."""
    n = 0
    for fd, value in msg.ListFields():
        repeated = fd.is_repeated
        if fd.message_type is not None:
            for m in value if repeated else (value,):
                n += walk(m)
        elif repeated:
            for _ in value:
                n += 1
        else:
            n += 1
    return n


def host_settings(sock: Path, host: SimHost) -> Settings:
    return replace(
        build({"--listen-address": "127.0.0.1:0", "--poll-interval": "1h"}, {}),
        kubelet_socket=str(sock),
        kubelet_max_message_bytes=MAX_MESSAGE,
        path_sysfs=str(host.sysfs),
        path_procfs=str(host.procfs),
        path_pod_logs=str(host.pod_logs),
        path_container_logs=str(host.container_logs),
        kubelet_config=str(host.kubelet_config),
        kubelet_device_checkpoint=str(host.device_checkpoint),
    )


def measure(ref: str, label: str, repeat: int, scrapes: int) -> Row:
    row = Row(label)
    with footprint.workdir() as tmp:
        sock = tmp / "kubelet.sock"
        sim = footprint.spawn("simulator", [SIMPROC, ref, str(sock)], tmp)
        try:
            footprint.wait_for("the simulated kubelet's socket", sock.exists, [sim])
            # The same seeded scenario here, never served: the host files follow its pods.
            host = SimHost(SimKubelet(simproc.scenario(ref), tmp / "unused.sock"), tmp / "host")
            settings = host_settings(sock, host)
            measure_reads(row, settings, host, repeat)
            row.scrape_s = measure_scrape(settings, host, scrapes)
            sim.check_alive()
        finally:
            footprint.stop(sim)
    return row


def measure_reads(row: Row, settings: Settings, host: SimHost, repeat: int) -> None:
    channel = grpc.insecure_channel(
        f"unix://{settings.kubelet_socket}",
        options=[("grpc.max_receive_message_length", MAX_MESSAGE)],
    )
    stub: Any = api_pb2_grpc.PodResourcesListerStub(channel)

    def floor1() -> tuple[Message, Message]:
        listed = stub.List(api_pb2.ListPodResourcesRequest(), timeout=60)
        alloc = stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=60)
        return listed, alloc

    def floor2() -> int:
        listed, alloc = floor1()
        return walk(listed) + walk(alloc)

    # As the exporter runs: NVML's slow fields at their cadence, each family's text kept
    # while its collector's inputs do not change (the Exposition's WriteCache).
    backend = NvmlBackend(host.nvml, slow_interval_s=settings.source_interval_gpu_slow_s)
    reader = NodeReader.from_settings(settings, gpu_backend=backend, enabled=collectors.ALL)
    written = WriteCache()
    previous = None
    generation = 0

    def cycle() -> bytes:
        nonlocal previous, generation
        generation += 1
        seen = reader.observe()
        view = reader.view(seen, generation=generation, previous=previous)
        previous = view
        families = reader.families(view, "bench")
        return render_families(families, openmetrics=False, cache=written)

    try:
        listed, _ = floor1()
        row.list_bytes = listed.ByteSize()
        body = cycle()  # warm: channels open, imports done, the API version probed
        seen = reader.observe()
        assert seen.reading is not None, seen.kubelet_error
        served = {(p.namespace, p.name) for p in seen.reading.pods}
        local = {(p.namespace, p.name) for p in host.sim.node.pods}
        assert served == local, "the simulator's pods differ from the host files' pods"
        row.pods = len(served)
        row.floor1 = timings(floor1, repeat)
        row.floor2 = timings(floor2, repeat)
        cpu0 = footprint.cpu_seconds(os.getpid())
        row.cycle = timings(cycle, repeat)
        row.cycle_cpu_s = (footprint.cpu_seconds(os.getpid()) - cpu0) / repeat
        row.kubelet_cycle = kubelet_only_cycle(settings, repeat)
        row.body_bytes, row.gzip_bytes = len(body), len(gzip.compress(body))
    finally:
        reader.close()
        channel.close()


def kubelet_only_cycle(settings: Settings, repeat: int) -> list[float]:
    """The poll cycle of the collectors that read the kubelet alone (no telemetry read):
    the part of the cycle the floors are made of."""
    enabled = [c for c in collectors.ALL if not c.needs and c.name not in TELEMETRY_VIEWS]
    reader = NodeReader.from_settings(settings, enabled=enabled, telemetry=False)
    written = WriteCache()
    previous = None
    generation = 0

    def cycle() -> bytes:
        nonlocal previous, generation
        generation += 1
        view = reader.view(reader.observe(), generation=generation, previous=previous)
        previous = view
        return render_families(reader.families(view, "bench"), openmetrics=False, cache=written)

    try:
        cycle()
        return timings(cycle, repeat)
    finally:
        reader.close()


def measure_scrape(settings: Settings, host: SimHost, scrapes: int) -> float:
    exp = Exporter(settings, gpu_backend=host.gpu_backend())
    exp.start()
    try:
        deadline = time.monotonic() + 120
        while exp.store.current() is None and time.monotonic() < deadline:
            time.sleep(0.05)

        def scrape() -> None:
            with urllib.request.urlopen(exp.url + "/metrics", timeout=60) as r:  # noqa: S310
                r.read()

        scrape()  # warms the connection; every scrape is served from the cache
        return statistics.median(timings(scrape, scrapes))
    finally:
        exp.stop("benchmark done")


def ms(t: float) -> str:
    return f"{t * 1e3:.1f}" if t < 1 else f"{t * 1e3:.0f}"


def spread(ts: list[float]) -> str:
    return f"{ms(statistics.median(ts))} ({ms(min(ts))}-{ms(max(ts))})"


def print_table(rows: list[Row]) -> None:
    head = (
        f"{'scenario':<12} {'pods':>5} {'List':>8} {'floor 1 ms':>20} {'floor 2 ms':>20} "
        f"{'poll cycle ms':>22} {'x fl.2':>7} {'cpu ms':>7} {'kubelet only':>13} {'x fl.2':>7} "
        f"{'scrape':>7} {'body':>8} "
        f"{'gzip':>7}"
    )
    footprint.print_head(head)
    for r in rows:
        assert r.floor1 and r.floor2 and r.cycle and r.kubelet_cycle
        ratio = statistics.median(r.cycle) / statistics.median(r.floor2)
        flag = "" if ratio <= TARGET_RATIO else " !"
        bare = statistics.median(r.kubelet_cycle)
        bare_ratio = bare / statistics.median(r.floor2)
        bare_flag = "" if bare_ratio <= TARGET_RATIO else " !"
        print(
            f"{r.name:<12} {r.pods:>5} {r.list_bytes / 1024:>6.0f}KB {spread(r.floor1):>20} "
            f"{spread(r.floor2):>20} {spread(r.cycle):>22} {ratio:>5.1f}x{flag:<1} "
            f"{ms(r.cycle_cpu_s):>7} {ms(bare):>13} {bare_ratio:>5.1f}x{bare_flag:<1} "
            f"{r.scrape_s * 1e3:>5.2f}ms {r.body_bytes / 1024:>6.0f}KB "
            f"{r.gzip_bytes / 1024:>5.0f}KB"
        )
    fleet = [r for r in rows if r.name.startswith("fleet") or r.name == "huge"]
    if len(fleet) > 1:
        per_pod = ", ".join(
            f"{r.pods:,} pods {statistics.median(r.cycle or [0]) / r.pods * 1e6:.0f} us"
            for r in fleet
        )
        print(f"linearity, poll cycle per pod (one pod shape): {per_pod}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small and large only, 3 repeats, no footprint run (for CI-style checks)",
    )
    parser.add_argument("--repeat", type=int, help="poll cycles per scenario (default 7; quick 3)")
    parser.add_argument(
        "--no-footprint", action="store_true", help="the table only (the full run's footprint)"
    )
    ns = parser.parse_args()
    process.configure_logging("warning", "console")  # the table, not the daemons' events
    process.tune_gc()  # as the daemons do
    process.tune_switch_interval()  # as podres export does
    repeat = ns.repeat or (3 if ns.quick else 7)
    scrapes = 10 if ns.quick else 100
    plan = [("small", "small"), ("large", "large")]
    if not ns.quick:
        plan += [("fleet:50", "fleet 50"), ("fleet:500", "fleet 500"), ("huge", "huge")]
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; medians of {repeat} runs "
        f"(min-max), {scrapes} scrapes; target: poll cycle <= {TARGET_RATIO:.0f}x floor 2"
    )
    rows = [measure(ref, label, repeat, scrapes) for ref, label in plan]
    print_table(rows)
    print(
        "floor 1: List + GetAllocatableResources, bare stub, decoded; floor 2: + a walk over "
        "every field; poll cycle: observe + view + render (all collectors, telemetry on); "
        "x fl.2: its median / floor 2's (! over target); cpu: this process's CPU per cycle "
        "(/proc/<pid>/stat); kubelet only: the cycle of the collectors that read no "
        "telemetry, none read; huge = fleet 5000"
    )
    if ns.quick or ns.no_footprint:
        return 0
    return footprint.run_all(False)


if __name__ == "__main__":
    raise SystemExit(main())
