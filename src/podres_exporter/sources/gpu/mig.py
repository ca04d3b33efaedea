"""MIG devices, and the readings of a GPU that failed.

A GPU with MIG mode enabled is reported with its board-level fields (power, energy,
temperature, clocks, ECC, PCIe, XIDs) and no processes; each MIG device becomes its own
reading with ``parent_uuid``, the GPU- and compute-instance ids, its memory,
utilisation when NVML gives it (it usually answers NOT_SUPPORTED on MIG devices) and
its processes. Board-level fields are not asked of MIG devices, so per-pod sums of
power or energy cannot count a board twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from podres_exporter.core.telemetry import GpuReading
from podres_exporter.sources.gpu.calls import Nvml, text
from podres_exporter.sources.gpu.events import XidEvents
from podres_exporter.sources.gpu.fields import Identity, MigIdentity, memory_info, ratio
from podres_exporter.sources.gpu.processes import ProcessSampler
from podres_exporter.sources.gpu.structs import Memory, Utilization

__all__ = ["Tracking", "mig_reading", "read_migs", "unhealthy"]


class Tracking(NamedTuple):
    """What the backend follows per device from read to read: the device handles its
    XID events are counted by, and the process samples already seen."""

    events: XidEvents
    processes: ProcessSampler


def mig_reading(index: int, parent: Identity, mig: MigIdentity) -> GpuReading:
    """A MIG instance with no readings yet: its own ids, its parent GPU's index and placement."""
    return GpuReading(
        uuid=mig.uuid,
        index=index,
        name=mig.name,
        pci_bus_id=parent.pci_bus_id,
        numa_node=parent.numa_node,
        parent_uuid=parent.uuid,
        gpu_instance_id=mig.gpu_instance_id,
        compute_instance_id=mig.compute_instance_id,
    )


def unhealthy(
    index: int,
    ident: Identity,
    error: str,
    xids: Mapping[int, int],
    migs: tuple[MigIdentity, ...] = (),
) -> list[GpuReading]:
    """A GPU that failed, by what was known of it, with its MIG devices ``migs``:
    ``healthy=False``, ``error`` set, no metric fields."""
    gpu = GpuReading(
        uuid=ident.uuid,
        index=index,
        name=ident.name,
        pci_bus_id=ident.pci_bus_id,
        numa_node=ident.numa_node,
        healthy=False,
        error=error,
        xid_errors_total=xids,
    )
    out = [gpu]
    for mig in migs:
        out.append(replace(mig_reading(index, ident, mig), healthy=False, error=error))
    return out


def read_migs(
    nvml: Nvml,
    handle: Any,
    index: int,
    parent: Identity,
    tracking: Tracking,
) -> tuple[list[GpuReading], tuple[MigIdentity, ...]]:
    """The MIG devices of the GPU ``handle`` (their events counted on ``parent``), and
    what each is."""
    events, processes = tracking
    lib = nvml.lib
    out: list[GpuReading] = []
    idents: list[MigIdentity] = []
    slots = nvml.get_int(lib.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    for slot in range(slots):
        mig = nvml.get(lib.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        if mig is None:
            continue  # an empty slot
        uuid = nvml.get(lib.nvmlDeviceGetUUID, mig)
        if uuid is None:
            continue
        name = nvml.get(lib.nvmlDeviceGetName, mig)
        ident = MigIdentity(
            uuid=text(uuid),
            name="" if name is None else text(name),
            gpu_instance_id=nvml.get_int(lib.nvmlDeviceGetGpuInstanceId, mig),
            compute_instance_id=nvml.get_int(lib.nvmlDeviceGetComputeInstanceId, mig),
        )
        events.remember(mig, parent.uuid)
        util: Utilization | None = nvml.get(lib.nvmlDeviceGetUtilizationRates, mig)
        mem: Memory | None = memory_info(nvml, mig)
        idents.append(ident)
        out.append(
            replace(
                mig_reading(index, parent, ident),
                utilization_gpu_ratio=None if util is None else ratio(util.gpu),
                utilization_memory_ratio=None if util is None else ratio(util.memory),
                memory_used_bytes=None if mem is None else int(mem.used),
                memory_total_bytes=None if mem is None else int(mem.total),
                processes=processes.read(nvml, mig, ident.uuid),
            )
        )
    return out, tuple(idents)
