"""The device plugin's Allocate and GetPreferredAllocation latency, per discovery kind.

Usage: python bench/plugin.py [--quick]

For each kind (``nvml``: 64 GPUs of the fake NVML read through the real backend, with
its pairwise topology; ``pci``: 64 SR-IOV VFs of two PFs on two NUMA nodes; ``dev``: 64
device nodes) the real :class:`DevicePluginServicer` serves a 64-device resource on a
real gRPC unix socket, its inventory made by the real :func:`inventory.update`, logs in
JSON to /dev/null as the daemon writes them. A client on one channel times, call by
call: ``Allocate`` of 1 and of 8 devices, and ``GetPreferredAllocation`` of 8 from the 64
available, without and with a must-include id. Beside them, the floor: a trivial
servicer (an empty AllocateResponse) on the same kind of socket, in the same run.

Prints p50 and p99 (ms) per row and the targets: Allocate p99 < 2 ms, preferred
allocation p99 < 10 ms per kind; and the p50 of the servicer's method called in process,
without gRPC: what the plugin itself adds to the floor, less noisy than a p99.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from podres_exporter.core.telemetry import PciReading, SysfsDevices
from podres_exporter.daemon import process
from podres_exporter.deviceplugin import inventory as inv
from podres_exporter.deviceplugin.board import Board
from podres_exporter.deviceplugin.config import ResourceConfig, parse_config
from podres_exporter.deviceplugin.metrics import PluginMetrics
from podres_exporter.deviceplugin.servicer import DevicePluginServicer
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim.nvml import FakeNvml

# The generated stubs are untyped: reached through Any, as the tests' fixtures do.
_grpc_api: Any = pb_grpc

DEVICES = 64
ALLOCATE_TARGET_MS = 2.0
PREFERRED_TARGET_MS = 10.0


class _Floor(pb_grpc.DevicePluginServicer):
    """A servicer that does nothing: what gRPC in Python costs by itself."""

    def Allocate(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC name
        return pb.AllocateResponse()


def _resource(name: str, discover: dict[str, Any]) -> ResourceConfig:
    return parse_config({"resource": [{"name": name, "discover": discover}]}).resources[0]


def _inventory(resource: ResourceConfig, discovery: inv.Discovery) -> inv.ResourceInventory:
    state, _ = inv.update(
        resource, discovery, inv.initial_state(resource), now=0.0, xid_unhealthy_for_s=60.0
    )
    return state.inventory


def nvml_inventory() -> tuple[ResourceConfig, inv.ResourceInventory]:
    """64 GPUs of the fake NVML (two NUMA nodes), read with their topology."""
    backend = NvmlBackend(FakeNvml.with_gpus(DEVICES))
    res = _resource("nvidia.com/gpu", {"kind": "nvml"})
    discovery = inv.Discovery(gpus=backend.read(), gpu_topology=backend.topology())
    return res, _inventory(res, discovery)


def pci_inventory() -> tuple[ResourceConfig, inv.ResourceInventory]:
    """64 VFs of two PFs, one per NUMA node, bound to iavf."""
    readings = []
    for pf, (bus, numa) in enumerate(((0x17, 0), (0xAF, 1))):
        for vf in range(DEVICES // 2):
            readings.append(
                PciReading(
                    address=f"0000:{bus:02x}:{2 + vf // 8:02x}.{vf % 8}",
                    numa_node=numa,
                    vendor_id="0x8086",
                    device_id="0x1889",
                    class_id="0x020000",
                    driver="iavf",
                    physfn=f"0000:{bus:02x}:00.{pf}",
                )
            )
    res = _resource("intel.com/sriov_vf", {"kind": "pci", "vendor": "0x8086", "device": "0x1889"})
    return res, _inventory(res, inv.Discovery(devices=SysfsDevices(pci=tuple(readings))))


def dev_inventory() -> tuple[ResourceConfig, inv.ResourceInventory]:
    """64 device nodes matched by one glob."""
    glob = "dri/renderD*"
    nodes = tuple(f"dri/renderD{128 + i}" for i in range(DEVICES))
    res = _resource("example.com/render", {"kind": "dev", "glob": glob})
    return res, _inventory(res, inv.Discovery(dev_nodes={glob: nodes}))


def _serve(servicer: pb_grpc.DevicePluginServicer, path: Path) -> grpc.Server:
    server = grpc.server(ThreadPoolExecutor(max_workers=16))
    _grpc_api.add_DevicePluginServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{path}")
    server.start()
    return server


def _time(call: Callable[[], object], count: int) -> tuple[float, float]:
    """p50 and p99 of ``count`` calls, in ms, after a warm-up."""
    for _ in range(max(10, count // 20)):
        call()
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]


def _allocate(ids: list[str]) -> pb.AllocateRequest:
    return pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])


def _preferred(available: list[str], must: list[str], size: int) -> pb.PreferredAllocationRequest:
    return pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
            )
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 calls a row, not 1,000")
    args = parser.parse_args()
    count = 200 if args.quick else 1000
    devnull = open(os.devnull, "w")  # noqa: SIM115 - open for the whole run
    process.configure_logging("info", "json", stream=devnull)
    sockdir = Path(tempfile.mkdtemp(prefix="dp-bench-", dir="/tmp"))
    rows: list[tuple[str, str, float, float, float | None, float | None]] = []
    try:
        floor = _serve(_Floor(), sockdir / "floor.sock")
        with grpc.insecure_channel(f"unix://{sockdir / 'floor.sock'}") as channel:
            stub = _grpc_api.DevicePluginStub(channel)
            request = _allocate(["x"])
            rows.append(
                (
                    "floor",
                    "trivial Allocate",
                    *_time(lambda: stub.Allocate(request), count),
                    None,
                    None,
                )
            )
        floor.stop(None).wait()
        for kind, build in (
            ("nvml", nvml_inventory),
            ("pci", pci_inventory),
            ("dev", dev_inventory),
        ):
            res, inventory = build()
            ids = [d.id for d in inventory.devices]
            assert len(ids) == DEVICES, (kind, len(ids))
            metrics = PluginMetrics("bench", [res.name])
            path = sockdir / f"{kind}.sock"
            servicer = DevicePluginServicer(res, Board(inventory), metrics)
            server = _serve(servicer, path)
            with grpc.insecure_channel(f"unix://{path}") as channel:
                stub = _grpc_api.DevicePluginStub(channel)
                must = ids[40:41]
                prefer = "GetPreferredAllocation"
                cases: list[tuple[str, str, Any, float]] = [
                    ("Allocate 1", "Allocate", _allocate(ids[5:6]), ALLOCATE_TARGET_MS),
                    ("Allocate 8", "Allocate", _allocate(ids[8:16]), ALLOCATE_TARGET_MS),
                    ("preferred 8/64", prefer, _preferred(ids, [], 8), PREFERRED_TARGET_MS),
                    ("preferred 8/64 +must", prefer, _preferred(ids, must, 8), PREFERRED_TARGET_MS),
                ]  # fmt: skip
                for label, method, request, target in cases:
                    p50, p99 = _time(functools.partial(getattr(stub, method), request), count)
                    # The servicer alone, no gRPC: Allocate and GetPreferredAllocation
                    # use the context only to refuse, which these requests never are.
                    direct = functools.partial(getattr(servicer, method), request, None)
                    rows.append((kind, label, p50, p99, target, _time(direct, count)[0]))
            server.stop(None).wait()
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)
        devnull.close()
    print(f"{count} calls a row; one client, sequential; ms")
    print("servicer p50: the servicer's method called in process, without gRPC")
    head = f"{'kind':<6} {'call':<22} {'p50':>7} {'p99':>7} {'target p99':>11}  ok "
    print(f"{head} {'servicer p50':>12}")
    for kind, label, p50, p99, limit, alone in rows:
        goal = "" if limit is None else f"< {limit:g}"
        ok = "" if limit is None else ("yes" if p99 < limit else "NO ")
        own = "" if alone is None else f"{alone:12.3f}"
        print(f"{kind:<6} {label:<22} {p50:7.2f} {p99:7.2f} {goal:>11}  {ok:<3} {own}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
