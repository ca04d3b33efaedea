"""MIG devices (``sources/gpu/mig.py``): one reading each after their GPU, with their own
ids and processes.
"""

from __future__ import annotations

from podres_exporter.core.telemetry import GpuProcess
from podres_exporter.sources.gpu import NvmlBackend
from tests.sources.gpu.support import (
    GIB,
    GPU_A,
    GPU_M,
    METRIC_FIELDS,
    MIG_1,
    MIG_2,
    by_uuid,
    mig_fake,
)


def test_mig_parent_and_instances() -> None:
    """A MIG-enabled GPU is followed by one reading per MIG device, linked to it."""
    inv = NvmlBackend(mig_fake()).read()
    assert [g.uuid for g in inv.gpus] == [GPU_A, GPU_M, MIG_1, MIG_2]
    gpus = by_uuid(inv)
    parent = gpus[GPU_M]
    assert parent.mig_enabled is True
    assert parent.parent_uuid is None
    assert parent.power_watts == 150.0
    assert parent.energy_joules_total == 5.0
    assert parent.utilization_gpu_ratio is None  # NVML has no board utilisation in MIG mode
    assert parent.processes == ()  # processes are reported on the MIG devices
    assert gpus[GPU_A].mig_enabled is False
    mig = gpus[MIG_1]
    assert mig.parent_uuid == GPU_M
    assert (mig.gpu_instance_id, mig.compute_instance_id) == (7, 0)
    assert (mig.index, mig.pci_bus_id, mig.numa_node) == (1, "0000:9a:00.0", 1)
    assert mig.name.startswith("NVIDIA A100-SXM4-80GB MIG")
    assert (mig.memory_used_bytes, mig.memory_total_bytes) == (3 * GIB, 10 * GIB)
    assert mig.processes == (GpuProcess(pid=4242, used_memory_bytes=3 * GIB),)
    assert gpus[MIG_2].processes == (GpuProcess(pid=4343),)
    assert gpus[MIG_2].gpu_instance_id == 8


def test_mig_unsupported_fields_are_none() -> None:
    """Fields NVML does not give per MIG device, or that belong to the board, are None."""
    mig = by_uuid(NvmlBackend(mig_fake()).read())[MIG_1]
    assert mig.healthy
    assert mig.mig_enabled is None
    for name in METRIC_FIELDS:
        if name not in ("memory_used_bytes", "memory_total_bytes"):
            assert getattr(mig, name) is None, name


def test_empty_mig_slot_is_skipped() -> None:
    """A destroyed MIG device leaves an empty slot, which is not reported."""
    fake = mig_fake()
    backend = NvmlBackend(fake)
    assert MIG_1 in by_uuid(backend.read())
    fake.gpu(GPU_M).remove_mig(MIG_1)
    assert [g.uuid for g in backend.read().gpus] == [GPU_A, GPU_M, MIG_2]


def test_mig_utilisation_reported_when_nvml_gives_it() -> None:
    """A MIG query that NVML answers is passed through (memory of a MIG device here)."""
    fake = mig_fake()
    fake.mig(MIG_2).memory_used = 5 * GIB
    mig = by_uuid(NvmlBackend(fake).read())[MIG_2]
    assert mig.memory_used_bytes == 5 * GIB
