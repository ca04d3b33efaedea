"""XID errors (``sources/gpu/events.py``): one event set, counts per GPU and code, a MIG
device's on its GPU.
"""

from __future__ import annotations

from podres_exporter.sources.gpu import NvmlBackend
from tests.sources.gpu.support import (
    GPU_A,
    GPU_B,
    GPU_M,
    MIG_2,
    by_uuid,
    mig_fake,
    two_gpus,
)


def test_xid_errors_counted_per_gpu_and_code_across_reads() -> None:
    """XID events are counted per GPU and per code, and the counts only grow."""
    fake = two_gpus()
    backend = NvmlBackend(fake)
    assert by_uuid(backend.read())[GPU_A].xid_errors_total == {}
    fake.emit_xid(GPU_A, 79)
    fake.emit_xid(GPU_A, 79)
    fake.emit_xid(GPU_A, 48)
    fake.emit_xid(GPU_B, 13)
    gpus = by_uuid(backend.read())
    assert gpus[GPU_A].xid_errors_total == {48: 1, 79: 2}
    assert gpus[GPU_B].xid_errors_total == {13: 1}
    gpus = by_uuid(backend.read())
    assert gpus[GPU_A].xid_errors_total == {48: 1, 79: 2}
    fake.emit_xid(GPU_A, 79)
    assert by_uuid(backend.read())[GPU_A].xid_errors_total == {48: 1, 79: 3}


def test_xid_uses_one_event_set_registered_at_init() -> None:
    """One event set, each GPU registered once for XIDs, drained without blocking."""
    fake = two_gpus()
    backend = NvmlBackend(fake)
    assert fake.calls["nvmlEventSetCreate"] == 1
    assert fake.calls["nvmlDeviceRegisterEvents"] == 2
    fake.emit_xid(GPU_B, 31)
    backend.read()
    backend.read()
    assert fake.calls["nvmlEventSetCreate"] == 1
    assert fake.calls["nvmlDeviceRegisterEvents"] == 2
    assert fake.calls["nvmlEventSetWait"] == 3  # one event, then a timeout per read


def test_xid_on_a_mig_device_counts_on_its_gpu() -> None:
    """An XID raised for a MIG device is counted on the parent GPU."""
    fake = mig_fake()
    backend = NvmlBackend(fake)
    fake.emit_xid(MIG_2, 43)
    gpus = by_uuid(backend.read())
    assert gpus[GPU_M].xid_errors_total == {43: 1}
    assert gpus[MIG_2].xid_errors_total == {}


def test_gpu_missed_at_init_is_registered_later() -> None:
    """A GPU that could not be registered at init is registered at a later read."""
    fake = two_gpus()
    fake.break_gpu(GPU_B)
    backend = NvmlBackend(fake)
    fake.heal_gpu(GPU_B)
    backend.read()
    fake.emit_xid(GPU_B, 79)
    assert by_uuid(backend.read())[GPU_B].xid_errors_total == {79: 1}


def test_reads_work_without_event_support() -> None:
    """No event sets on this driver: no XID counts, everything else as usual."""
    fake = two_gpus()
    fake.set_unsupported("nvmlEventSetCreate")
    gpus = by_uuid(NvmlBackend(fake).read())
    assert gpus[GPU_A].healthy
    assert gpus[GPU_A].xid_errors_total == {}
    assert gpus[GPU_A].power_watts == 100.0
