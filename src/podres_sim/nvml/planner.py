"""The planner that decides a scenario's GPUs: which physical GPUs and MIG devices
stand behind the device ids a kubelet reports, and what runs on them.

``nvml_for_devices`` reads the ids the way the exporter does (``core.ids``): whole
GPUs, time-sliced and MPS shares, MIG devices by UUID or by GPU index, GKE's
``nvidia<N>`` names, and builds an animated :class:`~podres_sim.nvml.fake.FakeNvml`
with them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from podres_exporter.core.ids import Kind, resolve, split_replica
from podres_sim.nvml.board import MIB, FakeGpu, FakeProcess, derived_uuid, hgx_bus
from podres_sim.nvml.fake import FakeNvml

__all__ = ["NumaHint", "nvml_for_devices"]

# The MIG profile in a resource name: nvidia.com/mig-<slices>g.<GB>gb.
_MIG_PROFILE = re.compile(r"^mig-(\d+)g\.(\d+)gb")

NumaHint = int | Sequence[int] | None


@dataclass
class _PlannedGpu:
    uuid: str
    numa: int | None
    name: str
    replicas: int = 0  # time-slicing / MPS shares seen
    # (mig uuid, gpu instance id or None to number by slot, compute instance id, profile)
    migs: list[tuple[str, int | None, int, str]] = field(default_factory=list)


def _indexed_gpu_uuid(index: int | None) -> str:
    """The UUID of the GPU GKE names ``nvidia<index>``."""
    return derived_uuid("GPU", f"nvidia{index}")


def nvml_for_devices(
    resources: Mapping[str, Sequence[tuple[str, NumaHint]]],
    *,
    seed: int = 0,
    clock: Callable[[], float] | None = None,
    gpu_name: str = "NVIDIA H100 80GB HBM3",
    mig_parent_name: str = "NVIDIA A100-SXM4-80GB",
    driver_version: str = "550.54.15",
) -> FakeNvml:
    """A plausible, animated fake for the GPU device ids a kubelet reports.

    ``resources`` maps a resource name to its ``(device id, NUMA node(s))``.
    Only ``nvidia.com/*`` resources are used: ``GPU-<uuid>`` ids are whole GPUs;
    ``GPU-<uuid>::<n>`` (time-slicing, MPS) the GPU ``GPU-<uuid>``, once;
    ``MIG-<uuid>`` ids MIG devices, packed seven slices to a MIG-enabled parent
    GPU (per NUMA node, sized by the ``mig-<g>g.<m>gb`` profile in the resource
    name); ``MIG-GPU-<uuid>/<gi>/<ci>`` a MIG device of ``GPU-<uuid>``; GKE's
    ``nvidia<N>``, ``nvidia<N>/vgpu<k>``, ``nvidia<N>/gi<k>`` likewise; other ids
    a GPU with a UUID derived from the id. GPUs get HGX PCI buses in NUMA order,
    NVML indexes in PCI order, a synthetic process per device (one per share
    on a shared GPU, none on the few left idle) and values that drift with
    :meth:`FakeNvml.step`, seeded by ``seed``. With ``clock`` (e.g. ``time.monotonic``)
    the fake steps itself once per second of it; energy only grows.
    """
    # The fake's own random walk is seeded apart from the plan's.
    fake = FakeNvml(seed=seed + 1, clock=clock, driver_version=driver_version)
    rng = random.Random(seed)
    next_pid = 2000 + rng.randrange(1000)
    for position, plan in enumerate(_plan_devices(resources, gpu_name, mig_parent_name)):
        gpu = fake.add_gpu(
            plan.uuid,
            name=plan.name,
            pci_bus_id=f"0000:{hgx_bus(position):02x}:00.0",
            numa_node=plan.numa,
            energy_mj=rng.randrange(10**9, 10**10),
            ecc_corrected=rng.choice((0, 0, 0, 1, 3)),
        )
        gpu.animated = True
        next_pid = _populate(gpu, plan, rng, next_pid)
    fake.step()
    return fake


def _first_numa(hint: NumaHint) -> int | None:
    if hint is None or isinstance(hint, int):
        return hint
    return hint[0] if len(hint) else None


def _mig_memory(profile: str, board_memory: int) -> int:
    """Memory of a MIG device of ``profile`` (``mig-1g.10gb``) on a board."""
    m = _MIG_PROFILE.match(profile)
    if m is None:
        return board_memory // 8
    return min(board_memory, int(m.group(2)) * 1000 * MIB - 256 * MIB)


def _mig_slices(profile: str) -> int:
    m = _MIG_PROFILE.match(profile)
    return 1 if m is None else max(1, min(7, int(m.group(1))))


def _pack_migs(
    pooled: list[tuple[str, int | None, str]],
    plans: dict[str, _PlannedGpu],
    parent_name: str,
) -> None:
    """Put MIG devices known only by UUID on parents: seven slices a GPU, per NUMA node."""
    by_numa: dict[int | None, list[tuple[str, str]]] = {}
    for mig_uuid, numa, profile in pooled:
        by_numa.setdefault(numa, []).append((mig_uuid, profile))
    for numa, migs in by_numa.items():
        current: _PlannedGpu | None = None
        used = 0
        for mig_uuid, profile in migs:
            slices = _mig_slices(profile)
            if current is None or used + slices > 7:
                uuid = derived_uuid("GPU", f"mig-parent:{mig_uuid}")
                current = _PlannedGpu(uuid=uuid, numa=numa, name=parent_name)
                plans[uuid] = current
                used = 0
            current.migs.append((mig_uuid, None, 0, profile))
            used += slices


def _plan_devices(
    resources: Mapping[str, Sequence[tuple[str, NumaHint]]], gpu_name: str, mig_parent_name: str
) -> list[_PlannedGpu]:
    """The physical GPUs behind the kubelet's device ids, in NUMA order."""
    plans: dict[str, _PlannedGpu] = {}
    pooled: list[tuple[str, int | None, str]] = []  # (mig uuid, numa, profile)

    def planned(uuid: str, numa: int | None, name: str) -> _PlannedGpu:
        if uuid not in plans:
            plans[uuid] = _PlannedGpu(uuid=uuid, numa=numa, name=name)
        return plans[uuid]

    for resource, devices in resources.items():
        if not resource.startswith("nvidia.com/"):
            continue
        profile = resource.removeprefix("nvidia.com/")
        for device_id, numa_hint in devices:
            numa = _first_numa(numa_hint)
            base, replica = split_replica(device_id)
            found = resolve(resource, base)
            if found.kind is Kind.MIG and found.parent_uuid is not None:  # MIG-GPU-<uuid>/gi/ci
                plan = planned(found.parent_uuid, numa, mig_parent_name)
                if all(x[0] != base for x in plan.migs):
                    ci = found.compute_instance or 0
                    plan.migs.append((base, found.gpu_instance, ci, profile))
            elif found.kind is Kind.MIG:
                if all(x[0] != found.key for x in pooled):
                    pooled.append((found.key, numa, profile))
            elif found.kind is Kind.MIG_INDEX:
                plan = planned(_indexed_gpu_uuid(found.gpu_index), numa, mig_parent_name)
                mig_uuid = derived_uuid("MIG", found.key)
                if all(x[0] != mig_uuid for x in plan.migs):
                    plan.migs.append((mig_uuid, found.gpu_instance, 0, profile))
            else:
                if found.kind is Kind.GPU_INDEX:
                    uuid = _indexed_gpu_uuid(found.gpu_index)
                    replica = found.replica if replica is None else replica  # nvidia<N>/vgpu<k>
                elif found.kind is Kind.GPU:
                    uuid = found.key
                else:  # an id NVML would not know: a GPU named after it
                    uuid = derived_uuid("GPU", base)
                plan = planned(uuid, numa, gpu_name)
                if replica is not None:
                    plan.replicas += 1
    _pack_migs(pooled, plans, mig_parent_name)
    return sorted(plans.values(), key=lambda p: -1 if p.numa is None else p.numa)


def _populate(gpu: FakeGpu, plan: _PlannedGpu, rng: random.Random, next_pid: int) -> int:
    """Give a planned GPU its MIG devices, load and processes; returns the next free pid."""
    if plan.migs:
        for slot, (mig_uuid, gi, ci, profile) in enumerate(plan.migs):
            size = _mig_memory(profile, gpu.memory_total)
            mig = gpu.add_mig(
                mig_uuid,
                slot + 1 if gi is None else gi,
                ci,
                size,
                name=f"{gpu.name} MIG {_mig_label(profile, size)}",
            )
            mig.load = rng.uniform(0.2, 0.9)
            mig.processes.append(FakeProcess(next_pid, int(size * rng.uniform(0.3, 0.8))))
            next_pid += rng.randrange(3, 400)
        gpu.load = sum(m.load for m in gpu.mig_devices if m is not None) / len(plan.migs)
        return next_pid
    if plan.replicas == 0 and rng.random() < 1 / 6:
        gpu.load = 0.0  # allocated but idle: no process
        return next_pid
    gpu.load = rng.uniform(0.3, 0.95)
    sharers = max(1, plan.replicas)
    for _ in range(sharers):
        share = gpu.memory_total * rng.uniform(0.2, 0.8) / sharers
        gpu.processes.append(FakeProcess(next_pid, int(share)))
        next_pid += rng.randrange(3, 400)
    return next_pid


def _mig_label(profile: str, memory: int) -> str:
    """``1g.10gb`` from the resource name's profile, or from the memory."""
    if _MIG_PROFILE.match(profile):
        return profile.removeprefix("mig-")
    return f"{_mig_slices(profile)}g.{round(memory / (1000 * MIB))}gb"
