"""What each NVML code means to a query (``sources/gpu/calls.py``): a value not there
leaves its field None, the GPU healthy.
"""

from __future__ import annotations

import pynvml
import pytest

from podres_exporter.sources.gpu import NvmlBackend
from podres_sim.nvml import FakeNvml
from tests.sources.gpu.support import (
    GIB,
    GPU_A,
    GPU_B,
    METRIC_FIELDS,
    by_uuid,
    two_gpus,
)

UNSUPPORTED_FUNCTIONS = (
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetProcessUtilization",
)


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION])
def test_unsupported_queries_leave_their_field_none(code: int) -> None:
    """NOT_SUPPORTED / NO_PERMISSION on a query: that field is None, the GPU healthy."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A, numa_node=0)
    fake.add_process(GPU_A, 100, GIB)
    for function in UNSUPPORTED_FUNCTIONS:
        fake.set_error(function, code)
    (gpu,) = NvmlBackend(fake).read().gpus
    assert gpu.healthy
    assert gpu.error is None
    assert gpu.uuid == GPU_A
    assert gpu.name == ""
    assert gpu.pci_bus_id is None
    assert gpu.numa_node is None
    assert gpu.mig_enabled is None
    assert gpu.processes == ()
    for name in METRIC_FIELDS:
        assert getattr(gpu, name) is None, name


def test_one_unsupported_query_leaves_the_rest() -> None:
    """An unsupported query on one GPU touches only that field of that GPU."""
    fake = two_gpus()
    fake.set_unsupported("nvmlDeviceGetPowerUsage", GPU_A)
    gpus = by_uuid(NvmlBackend(fake).read())
    assert gpus[GPU_A].power_watts is None
    assert gpus[GPU_A].power_limit_watts == 700.0
    assert gpus[GPU_B].power_watts == 200.0


def test_other_nvml_errors_leave_the_field_none() -> None:
    """A code that says nothing about the device (corrupted infoROM) only loses the field."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A, ecc_corrected=3)
    fake.set_error("nvmlDeviceGetTotalEccErrors", pynvml.NVML_ERROR_CORRUPTED_INFOROM)
    (gpu,) = NvmlBackend(fake).read().gpus
    assert gpu.healthy
    assert gpu.ecc_corrected_total is None
    assert gpu.power_watts == 70.0
