"""NvmlBackend against FakeNvml: units, MIG, processes, XIDs, failures, driver life cycle."""

from __future__ import annotations

import ctypes
import threading

import pynvml
import pytest
from structlog.testing import capture_logs

from podres_exporter.core.telemetry import GpuInventory, GpuProcess, GpuReading
from podres_exporter.sources.gpu import NvmlBackend, open_nvml_backend, pci_bus_id_from_nvml
from podres_sim.nvml import FakeNvml

GPU_A = "GPU-0c5a1f2e-8a7f-4c1e-9b3d-111111111111"
GPU_B = "GPU-0c5a1f2e-8a7f-4c1e-9b3d-222222222222"
GPU_M = "GPU-0c5a1f2e-8a7f-4c1e-9b3d-333333333333"
MIG_1 = "MIG-7e1d0c2b-1111-4a2b-8c3d-aaaaaaaaaaaa"
MIG_2 = "MIG-7e1d0c2b-2222-4a2b-8c3d-bbbbbbbbbbbb"
GIB = 1 << 30


class Clock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def by_uuid(inventory: GpuInventory) -> dict[str, GpuReading]:
    return {g.uuid: g for g in inventory.gpus}


def two_gpus() -> FakeNvml:
    fake = FakeNvml()
    fake.add_gpu(GPU_A, pci_bus_id="0000:17:00.0", numa_node=0, power_usage_mw=100_000)
    fake.add_gpu(GPU_B, pci_bus_id="0000:9a:00.0", numa_node=1, power_usage_mw=200_000)
    return fake


METRIC_FIELDS = (
    "utilization_gpu_ratio",
    "utilization_memory_ratio",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_watts",
    "power_limit_watts",
    "energy_joules_total",
    "temperature_celsius",
    "sm_clock_hz",
    "memory_clock_hz",
    "clock_event_reasons",
    "pcie_tx_bytes_per_second",
    "pcie_rx_bytes_per_second",
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    "remapped_rows_pending",
    "remapped_rows_failure",
)


# ------------------------------------------------------------------ full GPUs


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


def test_gpus_are_read_in_nvml_index_order() -> None:
    """Each GPU carries its NVML index, PCI address and NUMA node."""
    inv = NvmlBackend(two_gpus()).read()
    assert [(g.uuid, g.index, g.pci_bus_id, g.numa_node) for g in inv.gpus] == [
        (GPU_A, 0, "0000:17:00.0", 0),
        (GPU_B, 1, "0000:9a:00.0", 1),
    ]


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


# ------------------------------------------------------------ unsupported fields


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


# ------------------------------------------------------------------------ MIG


def mig_fake() -> FakeNvml:
    fake = FakeNvml()
    fake.add_gpu(GPU_A, pci_bus_id="0000:17:00.0", numa_node=0)
    fake.add_mig_gpu(
        GPU_M,
        instances=[(MIG_1, 7, 0, 10 * GIB), (MIG_2, 8, 0, 20 * GIB)],
        pci_bus_id="0000:9a:00.0",
        numa_node=1,
        power_usage_mw=150_000,
        energy_mj=5_000,
    )
    fake.mig(MIG_1).memory_used = 3 * GIB
    fake.add_process(MIG_1, 4242, 3 * GIB)
    fake.add_process(MIG_2, 4343, None)
    return fake


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


# ------------------------------------------------------------------ processes


def test_processes_merge_memory_and_samples() -> None:
    """Compute processes and utilisation samples are merged per pid."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A)
    fake.add_process(GPU_A, 300, 2 * GIB)
    fake.add_process(GPU_A, 100, GIB)
    fake.add_process(GPU_A, 200, None)
    fake.add_sample(GPU_A, 100, sm_util=10, mem_util=5)
    fake.add_sample(GPU_A, 100, sm_util=60, mem_util=25)  # the newest sample wins
    fake.add_sample(GPU_A, 300, sm_util=30, mem_util=12)
    fake.add_sample(GPU_A, 999, sm_util=4, mem_util=1)  # a sample without a compute context
    (gpu,) = NvmlBackend(fake).read().gpus
    assert gpu.processes == (
        GpuProcess(pid=100, used_memory_bytes=GIB, sm_ratio=0.6, memory_ratio=0.25),
        GpuProcess(pid=200),
        GpuProcess(pid=300, used_memory_bytes=2 * GIB, sm_ratio=0.3, memory_ratio=0.12),
        GpuProcess(pid=999, sm_ratio=0.04, memory_ratio=0.01),
    )


def test_process_samples_only_since_the_last_read() -> None:
    """The newest sample timestamp is kept per device: old samples are not reused."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A)
    fake.add_gpu(GPU_B)
    fake.add_process(GPU_A, 100, GIB)
    fake.add_sample(GPU_A, 100, sm_util=50, mem_util=20)
    backend = NvmlBackend(fake)
    first = by_uuid(backend.read())[GPU_A].processes
    assert first == (GpuProcess(pid=100, used_memory_bytes=GIB, sm_ratio=0.5, memory_ratio=0.2),)
    second = by_uuid(backend.read())[GPU_A].processes
    assert second == (GpuProcess(pid=100, used_memory_bytes=GIB),)
    fake.add_sample(GPU_B, 7, sm_util=99, mem_util=99)  # another device's clock moves on
    fake.add_sample(GPU_A, 100, sm_util=70, mem_util=30)
    third = by_uuid(backend.read())
    assert third[GPU_A].processes == (
        GpuProcess(pid=100, used_memory_bytes=GIB, sm_ratio=0.7, memory_ratio=0.3),
    )
    assert third[GPU_B].processes == (GpuProcess(pid=7, sm_ratio=0.99, memory_ratio=0.99),)


# ----------------------------------------------------------------------- XIDs


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


# ------------------------------------------------------------ failing devices


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


# -------------------------------------------------------------- driver life cycle


def test_driver_missing_is_no_data_and_retried_later() -> None:
    """No driver: available=False without error; init is retried every init_retry_s."""
    clock = Clock()
    fake = FakeNvml(driver_missing=True)
    fake.add_gpu(GPU_A)
    backend = NvmlBackend(fake, init_retry_s=60, clock=clock)
    assert backend.read() == GpuInventory(available=False)
    fake.load_driver()
    clock.now += 30
    assert backend.read() == GpuInventory(available=False)
    assert fake.calls["nvmlInit"] == 1
    clock.now += 30
    inv = backend.read()
    assert fake.calls["nvmlInit"] == 2
    assert inv.available
    assert [g.uuid for g in inv.gpus] == [GPU_A]
    fake.emit_xid(GPU_A, 79)
    assert backend.read().gpus[0].xid_errors_total == {79: 1}


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_NO_PERMISSION]
)
def test_driver_not_loaded_or_no_permission_is_no_data(code: int) -> None:
    """DRIVER_NOT_LOADED and NO_PERMISSION at init mean no data, not an error."""
    inv = NvmlBackend(FakeNvml(init_error=code)).read()
    assert inv == GpuInventory(available=False)


def test_other_init_failure_is_reported() -> None:
    """Any other init failure: available=False with the error."""
    inv = NvmlBackend(FakeNvml(init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)).read()
    assert not inv.available
    assert inv.error is not None
    assert inv.error.startswith("nvmlInit: ")


def test_nvml_lost_mid_run_shuts_down_and_reinitialises() -> None:
    """NVML uninitialised under a read: no data with the error, then init again later."""
    clock = Clock()
    fake = two_gpus()
    backend = NvmlBackend(fake, init_retry_s=10, clock=clock)
    assert backend.read().available
    fake.set_error("nvmlDeviceGetCount", pynvml.NVML_ERROR_UNINITIALIZED)
    inv = backend.read()
    assert not inv.available
    assert inv.error is not None
    assert "nvmlDeviceGetCount" in inv.error
    assert fake.init_count == 0  # shut down
    fake.clear_error("nvmlDeviceGetCount")
    assert backend.read() == GpuInventory(available=False)  # not retried yet
    clock.now += 10
    assert len(backend.read().gpus) == 2
    assert fake.calls["nvmlInit"] == 2


def test_read_never_raises() -> None:
    """Anything unexpected under a read becomes an inventory error."""

    class ExplodingNvml(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise RuntimeError("boom")

    fake = ExplodingNvml(driver_version="550.1")
    inv = NvmlBackend(fake).read()
    assert inv == GpuInventory(available=True, driver_version="550.1", error="RuntimeError: boom")


def test_close_frees_the_event_set_and_shuts_down() -> None:
    """close() frees the event set and calls nvmlShutdown; later reads give no data."""
    fake = two_gpus()
    backend = NvmlBackend(fake)
    backend.read()
    backend.close()
    assert fake.calls["nvmlEventSetFree"] == 1
    assert fake.calls["nvmlShutdown"] == 1
    assert fake.init_count == 0
    inv = backend.read()
    assert not inv.available
    assert fake.calls["nvmlInit"] == 1
    backend.close()
    assert fake.calls["nvmlShutdown"] == 1


def test_close_gives_up_on_a_read_stuck_in_nvml() -> None:
    """A read stuck in a wedged driver: close() returns after close_wait_s, logs so, and
    the read, once NVML answers, finds the backend closed; nothing is shut down twice."""
    fake = two_gpus()
    backend = NvmlBackend(fake, close_wait_s=0.05)
    fake.hang()
    results: list[GpuInventory] = []
    reader = threading.Thread(target=lambda: results.append(backend.read()))
    reader.start()
    while not fake.blocked:  # the read is in: it waits at its first NVML call
        reader.join(0.01)
    with capture_logs() as logs:
        backend.close()
    assert reader.is_alive(), "the read is still stuck"
    assert [e["event"] for e in logs] == ["nvml_close_abandoned"]
    fake.release()
    reader.join(5)
    assert len(results) == 1
    assert not backend.read().available  # closed
    assert fake.calls["nvmlShutdown"] == 0


def test_close_without_driver_does_nothing() -> None:
    """close() on a backend that never initialised calls nothing."""
    fake = FakeNvml(driver_missing=True)
    NvmlBackend(fake).close()
    assert fake.calls["nvmlShutdown"] == 0


# -------------------------------------------------------------- the real pynvml


def _nvml_library_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_real_pynvml_without_a_driver_is_no_data() -> None:
    """On a machine without the NVML library, the real pynvml gives available=False."""
    backend = open_nvml_backend()
    try:
        inv = backend.read()
    finally:
        backend.close()
    if _nvml_library_present():
        assert inv.error is None or inv.available is False
    else:
        assert inv == GpuInventory(available=False)


def test_real_pynvml_module_injected_directly() -> None:
    """NvmlBackend(pynvml).read() does not raise, GPU or not."""
    backend = NvmlBackend(pynvml)
    inv = backend.read()
    backend.close()
    assert isinstance(inv, GpuInventory)
    if not _nvml_library_present():
        assert not inv.available


# ------------------------------------------------------------------ cadence


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
