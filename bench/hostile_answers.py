"""What one hostile kubelet answer costs the exporter: peak memory, poll time, body size.

Usage: python bench/hostile_answers.py [--quick] [--shape NAME ...] [FLAG VALUE ...]

A fake kubelet serves the real pod-resources protocol (``v1.PodResourcesLister``: List and
GetAllocatableResources, serialised messages) on a unix socket, answering one shape at a
time, each legal and under the 16 MiB receive limit:

- ``baseline``: a real large node, 5,000 pods of one container with a GPU and two CPUs;
- ``devices``: one container listing a million device ids (12 MiB);
- ``pods``: 200,000 pods of one container;
- ``allocatable``: a million allocatable CPUs;
- ``duplicates``: one pod listed 50 times;
- ``full-devices``, ``full-pods``: the worst the default limits let through: the budget
  of entries filled with distinct device ids (1,024 to a container, all allocatable),
  or with the most pods, each with eight devices of its own.

For each shape a fresh process runs the exporter's own poll path (``cli.export.Exporter``:
NodeReader, Poller, Exposition; telemetry collectors off, a 128-CPU sysfs), polls twice
and renders the text body, then prints its peak RSS (``VmHWM``), the time of each
poll and the body's size, and the anomalies the view counts. Exporter flags after the
options are given to it (``--kubelet-max-pods 1000``). ``--quick``: smaller shapes of
the same kinds (a tenth), for the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

from podres_exporter._generated.podresources.v1 import api_pb2 as v1

LIST = "/v1.PodResourcesLister/List"
ALLOCATABLE = "/v1.PodResourcesLister/GetAllocatableResources"
CPUS = 128
CHILD_TIMEOUT_S = 300


# ---------------------------------------------------------------- the shapes


def _pod(i: int, *, devices: Sequence[str] = (), cpus: Sequence[int] = ()) -> Any:
    container = v1.ContainerResources(name="main", cpu_ids=list(cpus))
    if devices:
        container.devices.add(
            resource_name="nvidia.com/gpu",
            device_ids=list(devices),
            topology=v1.TopologyInfo(nodes=[v1.NUMANode(ID=0)]),
        )
    return v1.PodResources(namespace="bench", name=f"pod-{i}", containers=[container])


def baseline(scale: float) -> tuple[bytes, bytes]:
    n = int(5000 * scale)
    pods = [
        _pod(i, devices=[f"GPU-{i % 8:08d}"], cpus=[2 * (i % 64), 2 * (i % 64) + 1])
        for i in range(n)
    ]
    alloc = v1.AllocatableResourcesResponse(cpu_ids=list(range(CPUS)))
    alloc.devices.add(resource_name="nvidia.com/gpu", device_ids=[f"GPU-{g:08d}" for g in range(8)])
    return v1.ListPodResourcesResponse(pod_resources=pods).SerializeToString(), (
        alloc.SerializeToString()
    )


def many_devices(scale: float) -> tuple[bytes, bytes]:
    ids = [f"GPU-{i:08d}" for i in range(int(1_000_000 * scale))]
    listed = v1.ListPodResourcesResponse(pod_resources=[_pod(0, devices=ids)])
    return listed.SerializeToString(), _plain_allocatable()


def many_pods(scale: float) -> tuple[bytes, bytes]:
    pods = [_pod(i) for i in range(int(200_000 * scale))]
    return v1.ListPodResourcesResponse(pod_resources=pods).SerializeToString(), (
        _plain_allocatable()
    )


def many_allocatable(scale: float) -> tuple[bytes, bytes]:
    alloc = v1.AllocatableResourcesResponse(cpu_ids=list(range(int(1_000_000 * scale))))
    return v1.ListPodResourcesResponse().SerializeToString(), alloc.SerializeToString()


def duplicates(scale: float) -> tuple[bytes, bytes]:
    del scale
    pods = [_pod(0, devices=["GPU-00000000"], cpus=[2, 3]) for _ in range(50)]
    return v1.ListPodResourcesResponse(pod_resources=pods).SerializeToString(), (
        _plain_allocatable()
    )


def full_devices(scale: float) -> tuple[bytes, bytes]:
    """The whole budget of entries in distinct device ids, 1,024 to a container, each
    also allocatable: the most device series the default limits let through."""
    n = int(256 * scale)
    pods = [
        _pod(i, devices=[f"GPU-{i:04d}-{d:04d}" for d in range(1024)], cpus=[i % CPUS])
        for i in range(n)
    ]
    alloc = v1.AllocatableResourcesResponse(cpu_ids=list(range(CPUS)))
    alloc.devices.add(
        resource_name="nvidia.com/gpu",
        device_ids=[f"GPU-{i:04d}-{d:04d}" for i in range(n) for d in range(1024)],
        topology=v1.TopologyInfo(nodes=[v1.NUMANode(ID=0)]),
    )
    return v1.ListPodResourcesResponse(pod_resources=pods).SerializeToString(), (
        alloc.SerializeToString()
    )


def full_pods(scale: float) -> tuple[bytes, bytes]:
    """The most pods the default limits keep, each with eight devices of its own and
    an exclusive CPU: the most per-pod and per-container series they let through."""
    n = int(25_000 * scale)
    pods = [
        _pod(i, devices=[f"dev-{i:05d}-{d}" for d in range(8)], cpus=[i % CPUS]) for i in range(n)
    ]
    return v1.ListPodResourcesResponse(pod_resources=pods).SerializeToString(), (
        _plain_allocatable()
    )


def _plain_allocatable() -> bytes:
    return v1.AllocatableResourcesResponse(cpu_ids=list(range(CPUS))).SerializeToString()


SHAPES: dict[str, Callable[[float], tuple[bytes, bytes]]] = {
    "baseline": baseline,
    "devices": many_devices,
    "pods": many_pods,
    "allocatable": many_allocatable,
    "duplicates": duplicates,
    "full-devices": full_devices,
    "full-pods": full_pods,
}


# ---------------------------------------------------------------- the fake kubelet


class Kubelet(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """The pod-resources service answering the serialised messages it is set to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answer = (b"", b"")

    def set(self, answer: tuple[bytes, bytes]) -> None:
        with self._lock:
            self._answer = answer

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method = handler_call_details.method
        if method not in (LIST, ALLOCATABLE):
            return None

        def reply(_request: bytes, _context: grpc.ServicerContext) -> bytes:
            with self._lock:
                listed, alloc = self._answer
            return listed if method == LIST else alloc

        return grpc.unary_unary_rpc_method_handler(reply)


# ---------------------------------------------------------------- the exporter's side


def write_sysfs(root: Path) -> None:
    """A node of CPUS CPUs on two NUMA nodes."""
    (root / "devices/system/cpu").mkdir(parents=True)
    (root / "devices/system/cpu/online").write_text(f"0-{CPUS - 1}\n")
    half = CPUS // 2
    for node, cpus in ((0, f"0-{half - 1}"), (1, f"{half}-{CPUS - 1}")):
        (root / f"devices/system/node/node{node}").mkdir(parents=True)
        (root / f"devices/system/node/node{node}/cpulist").write_text(cpus + "\n")


def peak_rss_mib() -> float:
    """This process's peak resident memory since its exec (``VmHWM``: ``ru_maxrss`` would
    carry the parent's peak across the fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(socket: str, sysfs: str, flags: Sequence[str]) -> int:
    """One exporter's two polls of the answer now served; prints a JSON line."""
    from podres_exporter import collectors
    from podres_exporter.cli.export import Exporter
    from podres_exporter.daemon import logconf
    from podres_exporter.exporter.settings import build

    logconf.configure("warning", stream=sys.stderr, json=True)
    given = dict(zip(flags[::2], flags[1::2], strict=True))
    settings = build({"--listen-address": "127.0.0.1:0", **given}, {})
    off = {c.name: False for c in collectors.ALL if c.needs}
    settings = replace(settings, kubelet_socket=socket, path_sysfs=sysfs, collector_overrides=off)
    exp = Exporter(settings)
    try:
        polls = []
        for _ in range(2):
            start = time.monotonic()
            exp.poller.poll_once()
            polls.append(time.monotonic() - start)
        body = exp.exposition.body(openmetrics=False, gz=False)
        view = exp.store.current()
        assert view is not None
        acc = view.accounting
        print(
            json.dumps(
                {
                    "rss_peak_mib": peak_rss_mib(),
                    "polls_s": polls,
                    "body_bytes": len(body),
                    "kubelet_up": view.snapshot.kubelet_up,
                    "pods": acc.pods if acc else None,
                    "anomalies": {k: v for k, v in (acc.anomalies if acc else {}).items() if v},
                }
            )
        )
    finally:
        exp.stop("benchmark done")
    return 0


def measure(shape: str, scale: float, flags: Sequence[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        socket = f"{tmp}/kubelet.sock"
        write_sysfs(Path(tmp) / "sys")
        kubelet = Kubelet()
        listed, alloc = SHAPES[shape](scale)
        kubelet.set((listed, alloc))
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2),
            handlers=[kubelet],
            options=[("grpc.max_send_message_length", 64 * 2**20)],
        )
        server.add_insecure_port(f"unix:{socket}")
        server.start()
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--child", socket, f"{tmp}/sys", *flags],
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT_S,
                check=False,
            )
        finally:
            server.stop(None).wait()
        if done.returncode != 0:
            raise SystemExit(f"{shape}: the exporter failed:\n{done.stderr[-4000:]}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        result["answer_mib"] = (len(listed) + len(alloc)) / 2**20
        return result


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["--child"]:
        return child(argv[1], argv[2], argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of each shape")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES), help="only these")
    args, flags = parser.parse_known_args(argv)
    scale = 0.1 if args.quick else 1.0
    print(f"{'shape':<12} {'answer':>9} {'rss peak':>9} {'poll 1':>8} {'poll 2':>8} "
          f"{'body':>10} {'pods':>6}  anomalies")  # fmt: skip
    for shape in args.shape or list(SHAPES):
        r = measure(shape, scale, flags)
        anomalies = ", ".join(f"{k}={v}" for k, v in sorted(r["anomalies"].items())) or "-"
        print(
            f"{shape:<12} {r['answer_mib']:>7.1f}Mi {r['rss_peak_mib']:>7.0f}Mi "
            f"{r['polls_s'][0]:>7.2f}s {r['polls_s'][1]:>7.2f}s {r['body_bytes']:>10,} "
            f"{r['pods']!s:>6}  {anomalies}",
            flush=True,
        )
        if not r["kubelet_up"]:
            print(f"  {shape}: kubelet_up 0 (the answer was refused)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main(sys.argv[1:]))
