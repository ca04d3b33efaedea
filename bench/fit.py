"""``podres fit`` over a fleet from a real Prometheus, timed as a user runs it.

Usage: python bench/fit.py [--nodes 1000] [--pods-per-node 20] [--runs 3]

A fleet of simulated GPU nodes (seeded, so every run has the same fleet): 2 NUMA nodes
of 32 to 64 CPUs (2 threads a core, 2 reserved on each), 4 GPUs and 2 SR-IOV VFs each,
256 or 512 GiB; some CPUs, GPUs and memory held, as a busy fleet's are; most nodes under
``single-numa-node`` with the static CPU and memory managers, the others
``best-effort`` or ``restricted``. For each node, the series its podres exporter serves
for ``podres fit`` (the families of ``podres_exporter.fit.state.FAMILIES``, with the
``job``, ``instance`` and ``node`` labels a scrape gives), and kube-state-metrics' series
for its pods (requests, phase, pod info) and its allocatable, are written as
OpenMetrics and loaded into a fresh Prometheus with ``promtool tsdb
create-blocks-from openmetrics``: a Prometheus holding a thousand nodes' data without a
thousand exporters to scrape.

Each run is the whole command in a process of its own (``python -m podres_exporter fit
--prometheus URL --cpu 8 --memory 64Gi --gpu 4 -o json``): interpreter start, imports,
the fleet's instant queries, every node's admission and count, the JSON written. One
warm-up run, then ``--runs``; the median is printed beside the target (2 s), with the CPU
time of the command and of Prometheus (what a busy, shared machine cannot stretch) and the
load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource as rusage
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import footprint

TARGET_S = 2.0
SHAPE = ("--cpu", "8", "--memory", "64Gi", "--gpu", "4")
GI = 2**30
SEED = 32
# The sample times: from a minute ago to the end of the longest run (an instant query
# looks five minutes back), every two minutes.
SPAN_S = (-60, 1800)
STEP_S = 120
POLICIES = (("single-numa-node", 8), ("best-effort", 1), ("restricted", 1))
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def _labels(**labels: object) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def node_series(rng: random.Random, i: int, pods: int) -> Iterator[tuple[str, str, float]]:
    """One node's series: (family, labels, value)."""
    name = f"node-{i:04d}"
    address = f"10.0.{i // 250}.{i % 250}:9842"
    target = {"job": "podres-exporter", "instance": address, "node": name}
    per_numa_cpus = rng.choice((32, 48, 64))
    policy = rng.choices([p for p, _ in POLICIES], [w for _, w in POLICIES])[0]
    memory = rng.choice((256, 512)) * GI
    yield "podres_node_info", _labels(**target), 1
    yield "podres_kubelet_up", _labels(**target), 1
    yield "podres_kubelet_config_up", _labels(**target), 1
    config = {
        "topology_manager_policy": policy, "topology_manager_scope": "container",
        "topology_manager_options": "", "cpu_manager_policy": "static",
        "cpu_manager_options": "full-pcpus-only=true", "memory_manager_policy": "Static",
        "reserved_cpus": f"0-1,{per_numa_cpus}-{per_numa_cpus + 1}",
    }  # fmt: skip
    yield "podres_kubelet_config_info", _labels(**target, **config), 1
    yield "podres_node_cpu_threads_per_core", _labels(**target), 2
    held_cpus = 0.0
    for numa in (0, 1):
        at = {**target, "numa_node": numa}
        exclusive = 2 * rng.randint(0, (per_numa_cpus - 2) // 2)
        free = per_numa_cpus - 2 - exclusive
        held_cpus += exclusive
        for pool, n in (("exclusive", exclusive), ("shared_free", free), ("reserved", 2)):
            yield "podres_node_cpus", _labels(**at, pool=pool), n
        yield "podres_node_free_cores", _labels(**at), free // 2
        for other in (0, 1):
            yield (
                "podres_node_numa_distance",
                _labels(**at, to_numa_node=other),
                (10 if other == numa else 21),
            )
        gpus_free = rng.randint(0, 4)
        for resource, total, free_n in (
            ("nvidia.com/gpu", 4, gpus_free),
            ("intel.com/sriov_netdevice", 2, rng.randint(0, 2)),
        ):
            res = {**at, "resource": resource}
            yield "podres_node_registered_devices", _labels(**res), total
            yield "podres_node_allocatable_devices", _labels(**res), total
            yield "podres_node_devices", _labels(**res, state="free"), free_n
            yield "podres_node_devices", _labels(**res, state="allocated"), total - free_n
        pinned = rng.randint(0, 4) * memory // 8
        mem = {**at, "memory_type": "memory"}
        yield "podres_node_allocatable_memory_bytes", _labels(**mem), memory // 2
        yield "podres_node_memory_bytes", _labels(**mem, state="free"), memory // 2 - pinned // 2
        yield "podres_node_memory_bytes", _labels(**mem, state="allocated"), pinned // 2
    ksm = {"job": "kube-state-metrics", "instance": "10.1.0.1:8080"}
    for resource, unit, value in (
        ("cpu", "core", 2 * per_numa_cpus - 4), ("memory", "byte", memory - 8 * GI),
        ("nvidia_com_gpu", "integer", 8), ("pods", "integer", 110),
    ):  # fmt: skip
        at = {**ksm, "node": name, "resource": resource, "unit": unit}
        yield "kube_node_status_allocatable", _labels(**at), value
    for p in range(pods):
        pod = {"namespace": "ml", "pod": f"{name}-p{p}"}
        phase = "Running" if p % 10 else "Succeeded"
        for ph in PHASES:
            yield "kube_pod_status_phase", _labels(**ksm, **pod, phase=ph), int(ph == phase)
        yield "kube_pod_info", _labels(**ksm, **pod, node=name), 1
        cpu = held_cpus / pods
        for resource, unit, amount in (("cpu", "core", cpu), ("memory", "byte", 2.0 * GI)):
            at = {**ksm, **pod, "container": "main", "node": name, "resource": resource}
            yield "kube_pod_container_resource_requests", _labels(**at, unit=unit), amount


def write_openmetrics(path: Path, nodes: int, pods: int, now: float) -> int:
    """The fleet's series as OpenMetrics with timestamps around ``now``; the series count."""
    rng = random.Random(SEED)
    by_family: dict[str, list[tuple[str, float]]] = {}
    for i in range(nodes):
        for family, labels, value in node_series(rng, i, pods):
            by_family.setdefault(family, []).append((labels, value))
    stamps = [now + s for s in range(SPAN_S[0], SPAN_S[1] + 1, STEP_S)]
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for family, series in by_family.items():
            out.write(f"# TYPE {family} gauge\n")
            for labels, value in series:
                count += 1
                for t in stamps:
                    out.write(f"{family}{{{labels}}} {value} {t:.3f}\n")
        out.write("# EOF\n")
    return count


def _ready(url: str) -> bool:
    try:
        return footprint.get(url + "/-/ready")[0] == HTTPStatus.OK
    except OSError:
        return False


# The two ways to start it: the podres command (every command's parser imported), and
# podres fit's own module (python -m podres_exporter.fit), as bench/top.py times top.
COMMANDS = {
    "podres fit": ("-m", "podres_exporter", "fit"),
    "-m podres_exporter.fit": ("-m", "podres_exporter.fit"),
}


@dataclass
class Run:
    """One run: wall time, the CPU time of the ``podres fit`` process and of Prometheus."""

    wall: float
    cpu: float
    prometheus_cpu: float


def run_fit(
    command: tuple[str, ...], url: str, cwd: Path, prometheus_pid: int
) -> tuple[Run, dict[str, object]]:
    """One ``podres fit`` process: its times and its JSON answer."""
    before = rusage.getrusage(rusage.RUSAGE_CHILDREN)
    served = footprint.cpu_seconds(prometheus_pid)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *command, "--prometheus", url, *SHAPE, "-o", "json"],
        capture_output=True, cwd=cwd, check=False, timeout=120,
    )  # fmt: skip
    took = time.perf_counter() - t0
    after = rusage.getrusage(rusage.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    prometheus_cpu = footprint.cpu_seconds(prometheus_pid) - served
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"podres fit exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    doc: dict[str, object] = json.loads(proc.stdout)
    return Run(took, cpu, prometheus_cpu), doc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods-per-node", type=int, default=20)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    tools = {tool: shutil.which(tool) or "" for tool in ("prometheus", "promtool")}
    for tool, path in tools.items():
        if not path:
            print(f"skipped: {tool} is not installed (Debian package prometheus)")
            return 0
    with footprint.workdir() as tmp:
        t0 = time.perf_counter()
        series = write_openmetrics(tmp / "fleet.om", a.nodes, a.pods_per_node, time.time())
        subprocess.run(
            [tools["promtool"], "tsdb", "create-blocks-from", "openmetrics", "-q",
             str(tmp / "fleet.om"), str(tmp / "tsdb")],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        loaded = time.perf_counter() - t0
        (tmp / "prometheus.yml").write_text("global: {}\n")
        port = footprint.free_port()
        log = tmp / "prometheus.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [tools["prometheus"], f"--config.file={tmp / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            )  # fmt: skip
        prom = footprint.Daemon("prometheus", proc, log, url=f"http://127.0.0.1:{port}")
        try:
            footprint.wait_for("Prometheus", lambda: _ready(prom.url), [prom])
            url = prom.url
            times: dict[str, list[Run]] = {}
            doc: dict[str, object] = {}
            pid = proc.pid
            for label, command in COMMANDS.items():
                run_fit(command, url, tmp, pid)  # warm: the page cache, .pyc files, Prometheus
                for _ in range(a.runs):
                    took, doc = run_fit(command, url, tmp, pid)
                    times.setdefault(label, []).append(took)
        finally:
            footprint.stop(prom)
    fleet = doc.get("fleet", {})
    assert isinstance(fleet, dict)
    answered = fleet.get("nodes")
    if answered != a.nodes:
        raise RuntimeError(f"podres fit answered {answered} nodes of {a.nodes}")
    print(
        f"fleet: {a.nodes} nodes, {series} series ({a.pods_per_node} pods a node in "
        f"kube-state-metrics), loaded in {loaded:.1f} s"
    )
    fitting = fleet.get("fitting", [])
    assert isinstance(fitting, list)
    print(
        f"shape: {' '.join(SHAPE)}: fits on {len(fitting)} nodes, {fleet.get('more')} more in all"
    )
    for label, runs in times.items():
        median = statistics.median(r.wall for r in runs)
        shown = ", ".join(f"{r.wall:.2f}" for r in runs)
        verdict = "ok" if median < TARGET_S else "over"
        print(
            f"{label} --prometheus over {a.nodes} nodes: median {median:.2f} s of {len(runs)} "
            f"runs ({shown}); target {TARGET_S:g} s: {verdict}"
        )
        print(
            f"  CPU a run (median): podres fit {statistics.median(r.cpu for r in runs):.2f} s, "
            f"Prometheus {statistics.median(r.prometheus_cpu for r in runs):.2f} s; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
