"""One reading of every GPU (``sources/gpu/reading.py``): in index order, the identity
asked once, and a failing GPU unhealthy while the others flow.
"""

from __future__ import annotations

import pynvml
import pytest

from podres_exporter.core.telemetry import GpuInventory
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim.nvml import FakeNvml
from tests.sources.gpu.support import (
    GPU_A,
    GPU_B,
    GPU_M,
    METRIC_FIELDS,
    MIG_1,
    MIG_2,
    by_uuid,
    mig_fake,
    two_gpus,
)


def test_gpus_are_read_in_nvml_index_order() -> None:
    """Each GPU carries its NVML index, PCI address and NUMA node."""
    inv = NvmlBackend(two_gpus()).read()
    assert [(g.uuid, g.index, g.pci_bus_id, g.numa_node) for g in inv.gpus] == [
        (GPU_A, 0, "0000:17:00.0", 0),
        (GPU_B, 1, "0000:9a:00.0", 1),
    ]


def test_identity_is_asked_once_per_gpu() -> None:
    """Name, PCI address and NUMA node are static: asked at the first read only."""
    fake = two_gpus()
    backend = NvmlBackend(fake)
    backend.read()
    backend.read()
    assert fake.calls["nvmlDeviceGetPciInfo"] == 2
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 4


def test_no_gpu_is_no_data() -> None:
    """A driver with no GPU: available=False, the driver version still given."""
    inv = NvmlBackend(FakeNvml(driver_version="555.42.02")).read()
    assert inv == GpuInventory(available=False, driver_version="555.42.02")


def test_lost_gpu_is_unhealthy_while_the_other_flows_then_recovers() -> None:
    """A lost GPU is reported unhealthy with its identity; the other GPU keeps its values."""
    fake = two_gpus()
    backend = NvmlBackend(fake)
    backend.read()
    fake.emit_xid(GPU_A, 79)
    fake.break_gpu(GPU_A)
    fake.gpu(GPU_B).power_usage_mw = 250_000
    gpus = by_uuid(backend.read())
    lost = gpus[GPU_A]
    assert not lost.healthy
    assert lost.error is not None
    assert "GPU is lost" in lost.error
    assert (lost.index, lost.pci_bus_id, lost.numa_node) == (0, "0000:17:00.0", 0)
    assert lost.name == "NVIDIA H100 80GB HBM3"
    assert lost.xid_errors_total == {79: 1}  # counters survive
    for name in METRIC_FIELDS:
        assert getattr(lost, name) is None, name
    assert gpus[GPU_B].healthy
    assert gpus[GPU_B].power_watts == 250.0

    fake.heal_gpu(GPU_A)
    back = by_uuid(backend.read())[GPU_A]
    assert back.healthy
    assert back.error is None
    assert back.power_watts == 100.0


@pytest.mark.parametrize(
    "code",
    [
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_TIMEOUT,
        pynvml.NVML_ERROR_UNKNOWN,
        pynvml.NVML_ERROR_RESET_REQUIRED,
    ],
)
def test_device_fatal_code_on_any_query_marks_the_gpu_unhealthy(code: int) -> None:
    """GPU_IS_LOST, TIMEOUT, UNKNOWN, RESET_REQUIRED on one query: the GPU is unhealthy."""
    fake = two_gpus()
    fake.set_error("nvmlDeviceGetTemperature", code, GPU_B)
    gpus = by_uuid(NvmlBackend(fake).read())
    assert gpus[GPU_A].healthy
    assert not gpus[GPU_B].healthy
    error = gpus[GPU_B].error
    assert error is not None
    assert error.startswith("nvmlDeviceGetTemperature: ")
    assert gpus[GPU_B].power_watts is None


def test_no_handle_is_unhealthy_with_the_last_known_identity() -> None:
    """No handle for an index: unhealthy, named by what the last read learnt of it."""
    fake = two_gpus()
    backend = NvmlBackend(fake)
    backend.read()
    fake.break_gpu(GPU_A, pynvml.NVML_ERROR_UNKNOWN, handle=True)
    lost = backend.read().gpus[0]
    assert (lost.uuid, lost.index, lost.healthy) == (GPU_A, 0, False)
    assert lost.error is not None
    assert lost.error.startswith("nvmlDeviceGetHandleByIndex: ")
    assert lost.pci_bus_id == "0000:17:00.0"


def test_no_handle_before_any_read_has_no_uuid() -> None:
    """A GPU never read before that fails its handle is reported by index only."""
    fake = two_gpus()
    fake.break_gpu(GPU_A, handle=True)
    lost = NvmlBackend(fake).read().gpus[0]
    assert (lost.uuid, lost.index, lost.healthy) == ("", 0, False)


def test_lost_mig_gpu_reports_its_mig_devices_unhealthy() -> None:
    """When a MIG-enabled GPU is lost, its known MIG devices are reported unhealthy too."""
    fake = mig_fake()
    backend = NvmlBackend(fake)
    backend.read()
    fake.break_gpu(GPU_M)
    gpus = by_uuid(backend.read())
    assert [g.uuid for g in backend.read().gpus] == [GPU_A, GPU_M, MIG_1, MIG_2]
    assert gpus[GPU_A].healthy
    for uuid in (GPU_M, MIG_1, MIG_2):
        assert not gpus[uuid].healthy, uuid
    assert gpus[MIG_1].parent_uuid == GPU_M
    assert gpus[MIG_1].gpu_instance_id == 7
    fake.heal_gpu(GPU_M)
    assert all(g.healthy for g in backend.read().gpus)
