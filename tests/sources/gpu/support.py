"""The fake NVMLs and the helpers the GPU backend's tests share."""

from __future__ import annotations

from podres_exporter.core.telemetry import GpuInventory, GpuReading
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
