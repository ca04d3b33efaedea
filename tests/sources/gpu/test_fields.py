"""A GPU's fields (``sources/gpu/fields.py``): every field in its unit, clock event
reasons, ECC, the identity, and the slow fields' cadence.
"""

from __future__ import annotations

import pynvml
import pytest

from podres_exporter.core.telemetry import GpuReading
from podres_exporter.sources.gpu import NvmlBackend, pci_bus_id_from_nvml
from podres_sim.nvml import FakeNvml
from tests.sources.gpu.support import (
    GIB,
    GPU_A,
    GPU_B,
    Clock,
    by_uuid,
    two_gpus,
)


def test_full_gpu_every_field_converted_to_its_unit() -> None:
    """Every field of a whole GPU comes out in SI units, ratios and Hz."""
    fake = FakeNvml(driver_version="550.54.15")
    fake.add_gpu(
        GPU_A,
        name="NVIDIA H100 80GB HBM3",
        pci_bus_id="0000:AF:00.0",
        numa_node=1,
        memory_total=80 * GIB,
        memory_used=12 * GIB,
        utilization_gpu=87,
        utilization_memory=41,
        power_usage_mw=312_500,
        power_limit_mw=700_000,
        energy_mj=123_456_789,
        temperature_c=64,
        sm_clock_mhz=1980,
        memory_clock_mhz=2619,
        clock_event_reasons=pynvml.nvmlClocksEventReasonSwPowerCap,
        pcie_tx_kbps=1000,
        pcie_rx_kbps=2500,
        ecc_corrected=7,
        ecc_uncorrected=1,
        remapped_rows=(3, 1, 1, 0),
    )
    inv = NvmlBackend(fake).read()
    assert inv.available
    assert inv.error is None
    assert inv.driver_version == "550.54.15"
    (gpu,) = inv.gpus
    assert gpu == GpuReading(
        uuid=GPU_A,
        index=0,
        name="NVIDIA H100 80GB HBM3",
        pci_bus_id="0000:af:00.0",
        numa_node=1,
        mig_enabled=False,
        utilization_gpu_ratio=0.87,
        utilization_memory_ratio=0.41,
        memory_used_bytes=12 * GIB,
        memory_total_bytes=80 * GIB,
        power_watts=312.5,
        power_limit_watts=700.0,
        energy_joules_total=123_456.789,
        temperature_celsius=64.0,
        sm_clock_hz=1980e6,
        memory_clock_hz=2619e6,
        clock_event_reasons=("sw_power_cap",),
        pcie_tx_bytes_per_second=1000 * 1024.0,
        pcie_rx_bytes_per_second=2500 * 1024.0,
        ecc_corrected_total=7,
        ecc_uncorrected_total=1,
        remapped_rows_correctable=3,
        remapped_rows_uncorrectable=1,
        remapped_rows_pending=True,
        remapped_rows_failure=False,
    )


@pytest.mark.parametrize(
    ("nvml_id", "expected"),
    [
        ("00000000:17:00.0", "0000:17:00.0"),
        ("00000000:AF:1F.7", "0000:af:1f.7"),
        (b"00000001:3B:00.0", "0001:3b:00.0"),
        ("0000:17:00.0", "0000:17:00.0"),
        ("17:00.0", "0000:17:00.0"),
        ("not-a-bus-id", None),
    ],
)
def test_pci_bus_id_normalised(nvml_id: str | bytes, expected: str | None) -> None:
    """NVML's 8-digit-domain bus id becomes the lower-case 4-digit-domain address."""
    assert pci_bus_id_from_nvml(nvml_id) == expected


def test_clock_event_reasons_decoded_to_short_names() -> None:
    """Every reason bit set maps to its short name, in a fixed order."""
    fake = FakeNvml()
    fake.add_gpu(
        GPU_A,
        clock_event_reasons=(
            pynvml.nvmlClocksEventReasonGpuIdle
            | pynvml.nvmlClocksEventReasonApplicationsClocksSetting
            | pynvml.nvmlClocksEventReasonSwPowerCap
            | pynvml.nvmlClocksEventReasonHwSlowdown
            | pynvml.nvmlClocksEventReasonSyncBoost
            | pynvml.nvmlClocksEventReasonSwThermalSlowdown
            | pynvml.nvmlClocksEventReasonHwThermalSlowdown
            | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
            | pynvml.nvmlClocksEventReasonDisplayClockSetting
        ),
    )
    (gpu,) = NvmlBackend(fake).read().gpus
    assert gpu.clock_event_reasons == (
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
        "display_clocks_setting",
    )


def test_no_clock_event_reason_is_an_empty_tuple() -> None:
    """A GPU running unconstrained reports no reasons (not None)."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A, clock_event_reasons=pynvml.nvmlClocksEventReasonNone)
    (gpu,) = NvmlBackend(fake).read().gpus
    assert gpu.clock_event_reasons == ()


def test_clock_reasons_fall_back_to_the_throttle_function() -> None:
    """Without nvmlDeviceGetCurrentClocksEventReasons the older Throttle function is used."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A, clock_event_reasons=pynvml.nvmlClocksThrottleReasonHwThermalSlowdown)
    fake.hide_function("nvmlDeviceGetCurrentClocksEventReasons")
    (gpu,) = NvmlBackend(fake).read().gpus
    assert gpu.clock_event_reasons == ("hw_thermal",)
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1


def test_clock_reasons_fall_back_when_the_driver_lacks_the_event_function() -> None:
    """A driver without the new symbol (FUNCTION_NOT_FOUND) also falls back."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A, clock_event_reasons=pynvml.nvmlClocksThrottleReasonSyncBoost)
    fake.set_error("nvmlDeviceGetCurrentClocksEventReasons", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    (gpu,) = NvmlBackend(fake).read().gpus
    assert gpu.clock_event_reasons == ("sync_boost",)


def test_ecc_totals_are_the_aggregate_counters() -> None:
    """ECC totals come from the lifetime (aggregate) counters, not the volatile ones."""
    fake = FakeNvml()
    gpu = fake.add_gpu(GPU_A, ecc_corrected=40, ecc_uncorrected=2)
    gpu.ecc_corrected_volatile = 5
    gpu.ecc_uncorrected_volatile = 0
    (reading,) = NvmlBackend(fake).read().gpus
    assert (reading.ecc_corrected_total, reading.ecc_uncorrected_total) == (40, 2)


def test_numa_node_none_without_the_function_or_support() -> None:
    """No nvmlDeviceGetNumaNodeId in pynvml, or NOT_SUPPORTED: numa_node is None."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A, numa_node=None)
    fake.add_gpu(GPU_B, numa_node=1)
    assert [g.numa_node for g in NvmlBackend(fake).read().gpus] == [None, 1]
    old = FakeNvml()
    old.add_gpu(GPU_A, numa_node=1)
    old.hide_function("nvmlDeviceGetNumaNodeId")
    assert [g.numa_node for g in NvmlBackend(old).read().gpus] == [None]


def test_slow_fields_are_read_at_most_every_slow_interval() -> None:
    """PCIe throughput, ECC, remapped rows and the power limit are asked of the driver
    once per slow interval and served from the last reading between; utilisation and
    power every read. A re-initialised NVML reads them at once."""
    fake = two_gpus()
    clock = Clock()
    backend = NvmlBackend(fake, clock=clock, slow_interval_s=30.0)
    first = by_uuid(backend.read())
    slow_calls = {
        f: fake.calls[f]
        for f in (
            "nvmlDeviceGetPcieThroughput",
            "nvmlDeviceGetTotalEccErrors",
            "nvmlDeviceGetRemappedRows",
            "nvmlDeviceGetEnforcedPowerLimit",
        )
    }
    assert slow_calls == {
        "nvmlDeviceGetPcieThroughput": 4,  # two GPUs, two directions
        "nvmlDeviceGetTotalEccErrors": 4,
        "nvmlDeviceGetRemappedRows": 2,
        "nvmlDeviceGetEnforcedPowerLimit": 2,
    }
    power_calls = fake.calls["nvmlDeviceGetPowerUsage"]
    fake.gpus[0].ecc_corrected = 7
    fake.gpus[0].pcie_tx_kbps = 10
    clock.now += 29.0
    second = by_uuid(backend.read())
    assert {f: fake.calls[f] for f in slow_calls} == slow_calls
    assert fake.calls["nvmlDeviceGetPowerUsage"] == power_calls + 2
    assert second[GPU_A].ecc_corrected_total == first[GPU_A].ecc_corrected_total == 0
    assert second[GPU_A].pcie_tx_bytes_per_second == 0
    clock.now += 1.0
    third = by_uuid(backend.read())
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 8
    assert third[GPU_A].ecc_corrected_total == 7
    assert third[GPU_A].pcie_tx_bytes_per_second == 10 * 1024


def test_without_a_slow_interval_every_read_asks_for_everything() -> None:
    fake = two_gpus()
    backend = NvmlBackend(fake, clock=Clock())
    backend.read()
    backend.read()
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 8
