"""NVIDIA GPUs and MIG instances through NVML, labelled with their holder.

``podres_gpu_*``: per GPU and MIG instance; shared GPUs once, with no holder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, view
from podres_exporter.collectors.families import (
    HOLDER_LABELS,
    Breakdown,
    Table,
    holder_values,
    info,
    numa_value,
    per_row,
)
from podres_exporter.core.identity import GPU_LABELS, gpu_values
from podres_exporter.core.join import GpuHolderUsage, GpuRow
from podres_exporter.core.telemetry import CLOCK_EVENT_REASONS, GpuReading
from podres_exporter.core.view import NodeView

# Every GPU family: the device's identity (uuid, gpu index, MIG instance ids), and holder.
LABELS = (*GPU_LABELS, *HOLDER_LABELS)
_INFO_LABELS = (
    *GPU_LABELS,
    "model",
    "driver_version",
    "pci_bus_id",
    "numa_node",
    "mig_mode",
    "parent_uuid",
)


def _labels(row: GpuRow) -> list[str]:
    return [*gpu_values(row.gpu), *holder_values(row.held.single)]


def _identity(r: GpuRow, driver_version: str | None) -> list[str]:
    g = r.gpu
    mig = "" if g.mig_enabled is None else ("enabled" if g.mig_enabled else "disabled")
    return [
        *gpu_values(g),
        g.name,
        driver_version or "",
        g.pci_bus_id or "",
        numa_value(g.numa_node),
        mig,
        g.parent_uuid or "",
    ]


def _by_kind(
    *kinds: tuple[str, Callable[[GpuRow], int | None]],
) -> Callable[[Sequence[GpuRow]], Iterator[tuple[GpuRow, tuple[str], int | None]]]:
    """Samples of each kind over every row, kind by kind: (kind, its value of a row)."""

    def samples(rows: Sequence[GpuRow]) -> Iterator[tuple[GpuRow, tuple[str], int | None]]:
        for kind, get in kinds:
            for r in rows:
                yield r, (kind,), get(r)

    return samples


def _clock_event_reasons(rows: Sequence[GpuRow]) -> Iterator[tuple[GpuRow, tuple[str], bool]]:
    """Every reason of each GPU that reports them: active or not."""
    for r in rows:
        active = r.gpu.clock_event_reasons
        if active is not None:
            for reason in CLOCK_EVENT_REASONS:
                yield r, (reason,), reason in active


def _xids(rows: Sequence[GpuRow]) -> Iterator[tuple[GpuRow, tuple[str], int]]:
    for r in rows:
        for code, n in sorted(r.gpu.xid_errors_total.items()):
            yield r, (str(code),), n


# Per device, never with a holder: whether it answered and whether it is shared.
_DEVICES: Final[Table[GpuRow]] = Table(
    GPU_LABELS,
    lambda r: gpu_values(r.gpu),
    (
        per_row(
            "podres_gpu_healthy",
            "1 when the device answered NVML in the latest read, "
            "0 when it failed (lost, timed out).",
            lambda r: r.gpu.healthy,
        ),
        per_row(
            "podres_gpu_shared",
            "1 when several containers hold the device (time-slicing or MPS replicas): its "
            "series then carry no holder and podres_container_device_info lists the holders.",
            lambda r: r.held.shared,
        ),
    ),
)

_GPUS: Final[Table[GpuRow]] = Table(
    LABELS,
    _labels,
    (
        per_row(
            "podres_gpu_utilization_ratio",
            "Share of time a kernel ran on the GPU (0-1).",
            lambda r: r.gpu.utilization_gpu_ratio,
        ),
        per_row(
            "podres_gpu_memory_utilization_ratio",
            "Share of time device memory was read or written (0-1).",
            lambda r: r.gpu.utilization_memory_ratio,
        ),
        per_row(
            "podres_gpu_memory_used_bytes",
            "Device memory in use.",
            lambda r: r.gpu.memory_used_bytes,
        ),
        per_row(
            "podres_gpu_memory_total_bytes",
            "Device memory in all.",
            lambda r: r.gpu.memory_total_bytes,
        ),
        per_row("podres_gpu_power_watts", "Power draw.", lambda r: r.gpu.power_watts),
        per_row("podres_gpu_power_limit_watts", "Power limit.", lambda r: r.gpu.power_limit_watts),
        per_row(
            "podres_gpu_temperature_celsius",
            "GPU temperature.",
            lambda r: r.gpu.temperature_celsius,
        ),
        per_row("podres_gpu_sm_clock_hertz", "SM clock.", lambda r: r.gpu.sm_clock_hz),
        per_row("podres_gpu_memory_clock_hertz", "Memory clock.", lambda r: r.gpu.memory_clock_hz),
        per_row(
            "podres_gpu_pcie_transmit_bytes_per_second",
            "PCIe throughput from the GPU.",
            lambda r: r.gpu.pcie_tx_bytes_per_second,
        ),
        per_row(
            "podres_gpu_pcie_receive_bytes_per_second",
            "PCIe throughput to the GPU.",
            lambda r: r.gpu.pcie_rx_bytes_per_second,
        ),
        per_row(
            "podres_gpu_remapping_pending",
            "1 when a row remapping waits for a GPU reset.",
            lambda r: r.gpu.remapped_rows_pending,
        ),
        per_row(
            "podres_gpu_remapping_failed",
            "1 when a row remapping failed.",
            lambda r: r.gpu.remapped_rows_failure,
        ),
        per_row(
            "podres_gpu_energy_joules",
            "Energy used since the driver loaded.",
            lambda r: r.gpu.energy_joules_total,
            counter=True,
        ),
        Breakdown(
            "podres_gpu_ecc_errors",
            "ECC errors over the GPU's lifetime (aggregate), by type.",
            ("type",),
            _by_kind(
                ("corrected", lambda r: r.gpu.ecc_corrected_total),
                ("uncorrected", lambda r: r.gpu.ecc_uncorrected_total),
            ),
            counter=True,
        ),
        Breakdown(
            "podres_gpu_remapped_rows",
            "Memory rows remapped, by the kind of error that caused it.",
            ("cause",),
            _by_kind(
                ("correctable", lambda r: r.gpu.remapped_rows_correctable),
                ("uncorrectable", lambda r: r.gpu.remapped_rows_uncorrectable),
            ),
            counter=True,
        ),
        Breakdown(
            "podres_gpu_clock_event_reason",
            "1 for each clock event (throttle) reason active now, 0 for the others.",
            ("reason",),
            _clock_event_reasons,
        ),
        Breakdown(
            "podres_gpu_xid_errors",
            "XID errors seen since the exporter started, by XID code.",
            ("xid",),
            _xids,
            counter=True,
        ),
    ),
)

# A holder's use of a GPU, with the GPU's reading (for its identity).
_Usage = tuple[GpuHolderUsage, GpuReading]

_HOLDER_USAGE: Final[Table[_Usage]] = Table(
    LABELS,
    lambda u: [*gpu_values(u[1]), *holder_values(u[0].holder)],
    (
        per_row(
            "podres_gpu_holder_processes",
            "Processes on the GPU per holder; the series with empty holder labels counts "
            "processes that belong to no container holding the GPU.",
            lambda u: u[0].processes,
        ),
        per_row(
            "podres_gpu_holder_sm_utilization_ratio",
            "Per-holder share of SM time from the driver's per-process samples (0-1).",
            lambda u: u[0].sm_ratio,
        ),
        per_row(
            "podres_gpu_holder_memory_used_bytes",
            "Per-holder device memory of its processes.",
            lambda u: u[0].used_memory_bytes,
        ),
    ),
)


def _families(v: NodeView) -> Iterator[Metric]:
    joined = v.joined
    telemetry = v.snapshot.telemetry
    if joined is None or telemetry is None or telemetry.gpus is None:
        return
    inv = telemetry.gpus
    yield GaugeMetricFamily(
        "podres_nvml_available",
        "1 when NVML (the NVIDIA driver) answered, 0 when there is none: no GPU data then.",
        value=1 if inv.available else 0,
    )
    yield info(
        "podres_gpu",
        "One series per GPU and MIG instance: identity and placement.",
        _INFO_LABELS,
        joined.gpus,
        lambda r: _identity(r, inv.driver_version),
    )
    yield from _DEVICES.render(joined.gpus)
    yield from _GPUS.render(joined.gpus)
    by_uuid = {r.gpu.uuid: r.gpu for r in joined.gpus}
    yield from _HOLDER_USAGE.render(
        [(u, by_uuid[u.uuid]) for u in joined.gpu_usage if u.uuid in by_uuid]
    )


COLLECTOR: Final = PartCollector(
    "gpu",
    "NVIDIA GPU and MIG telemetry from NVML, with the holding container",
    view,
    _families,
    needs=frozenset({"gpu"}),
)
