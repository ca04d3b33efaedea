"""NVIDIA GPUs and MIG instances through NVML, labelled with their holder."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import HOLDER_LABELS, RenderContext, family, holder_values
from podres_exporter.join import GpuHolderUsage, GpuRow

LABELS = ("uuid", *HOLDER_LABELS)
REASONS = (
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


def _labels(row: GpuRow) -> list[str]:
    return [row.gpu.uuid, *holder_values(row.held.single)]


class GpuCollector:
    """``podres_gpu_*``: per GPU and MIG instance; shared GPUs once, with no holder."""

    name = "gpu"
    default_enabled = True
    description = "NVIDIA GPU and MIG telemetry from NVML, with the holding container"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        joined = ctx.view.joined
        telemetry = ctx.view.snapshot.telemetry
        if joined is None or telemetry is None or telemetry.gpus is None:
            return
        inv = telemetry.gpus
        yield GaugeMetricFamily(
            "podres_nvml_available",
            "1 when NVML (the NVIDIA driver) answered, 0 when there is none: no GPU data then.",
            value=1 if inv.available else 0,
        )
        rows = joined.gpus
        info = InfoMetricFamily(
            "podres_gpu",
            "One series per GPU and MIG instance: identity and placement.",
            labels=[
                "uuid",
                "index",
                "model",
                "driver_version",
                "pci_bus_id",
                "numa_node",
                "mig_mode",
                "parent_uuid",
                "gpu_instance",
                "compute_instance",
            ],
        )
        for r in rows:
            g = r.gpu
            mig = "" if g.mig_enabled is None else ("enabled" if g.mig_enabled else "disabled")
            info.add_metric(
                [
                    g.uuid,
                    str(g.index),
                    g.name,
                    inv.driver_version or "",
                    g.pci_bus_id or "",
                    "none" if g.numa_node is None else str(g.numa_node),
                    mig,
                    g.parent_uuid or "",
                    "" if g.gpu_instance_id is None else str(g.gpu_instance_id),
                    "" if g.compute_instance_id is None else str(g.compute_instance_id),
                ],
                {},
            )
        yield info
        yield family(
            "podres_gpu_healthy",
            "1 when the device answered NVML in the latest read, "
            "0 when it failed (lost, timed out).",
            ["uuid"],
            rows,
            lambda r: [r.gpu.uuid],
            lambda r: r.gpu.healthy,
        )
        yield family(
            "podres_gpu_shared",
            "1 when several containers hold the device (time-slicing or MPS replicas): its "
            "series then carry no holder and podres_container_device_info lists the holders.",
            ["uuid"],
            rows,
            lambda r: [r.gpu.uuid],
            lambda r: r.held.shared,
        )
        gauges: list[tuple[str, str, Callable[[GpuRow], float | int | None]]] = [
            (
                "podres_gpu_utilization_ratio",
                "Share of time a kernel ran on the GPU (0-1).",
                lambda r: r.gpu.utilization_gpu_ratio,
            ),
            (
                "podres_gpu_memory_utilization_ratio",
                "Share of time device memory was read or written (0-1).",
                lambda r: r.gpu.utilization_memory_ratio,
            ),
            (
                "podres_gpu_memory_used_bytes",
                "Device memory in use.",
                lambda r: r.gpu.memory_used_bytes,
            ),
            (
                "podres_gpu_memory_total_bytes",
                "Device memory in all.",
                lambda r: r.gpu.memory_total_bytes,
            ),
            ("podres_gpu_power_watts", "Power draw.", lambda r: r.gpu.power_watts),
            ("podres_gpu_power_limit_watts", "Power limit.", lambda r: r.gpu.power_limit_watts),
            (
                "podres_gpu_temperature_celsius",
                "GPU temperature.",
                lambda r: r.gpu.temperature_celsius,
            ),
            ("podres_gpu_sm_clock_hertz", "SM clock.", lambda r: r.gpu.sm_clock_hz),
            ("podres_gpu_memory_clock_hertz", "Memory clock.", lambda r: r.gpu.memory_clock_hz),
            (
                "podres_gpu_pcie_transmit_bytes_per_second",
                "PCIe throughput from the GPU.",
                lambda r: r.gpu.pcie_tx_bytes_per_second,
            ),
            (
                "podres_gpu_pcie_receive_bytes_per_second",
                "PCIe throughput to the GPU.",
                lambda r: r.gpu.pcie_rx_bytes_per_second,
            ),
            (
                "podres_gpu_remapping_pending",
                "1 when a row remapping waits for a GPU reset.",
                lambda r: r.gpu.remapped_rows_pending,
            ),
            (
                "podres_gpu_remapping_failed",
                "1 when a row remapping failed.",
                lambda r: r.gpu.remapped_rows_failure,
            ),
        ]
        for name, doc, get in gauges:
            yield family(name, doc, LABELS, rows, _labels, get)
        yield family(
            "podres_gpu_energy_joules",
            "Energy used since the driver loaded.",
            LABELS,
            rows,
            _labels,
            lambda r: r.gpu.energy_joules_total,
            counter=True,
        )
        ecc = [(r, "corrected", r.gpu.ecc_corrected_total) for r in rows]
        ecc += [(r, "uncorrected", r.gpu.ecc_uncorrected_total) for r in rows]
        yield family(
            "podres_gpu_ecc_errors",
            "ECC errors over the GPU's lifetime (aggregate), by type.",
            [*LABELS, "type"],
            ecc,
            lambda e: [*_labels(e[0]), e[1]],
            lambda e: e[2],
            counter=True,
        )
        remap = [(r, "correctable", r.gpu.remapped_rows_correctable) for r in rows]
        remap += [(r, "uncorrectable", r.gpu.remapped_rows_uncorrectable) for r in rows]
        yield family(
            "podres_gpu_remapped_rows",
            "Memory rows remapped, by the kind of error that caused it.",
            [*LABELS, "cause"],
            remap,
            lambda e: [*_labels(e[0]), e[1]],
            lambda e: e[2],
            counter=True,
        )
        reasons = [
            (r, reason, reason in r.gpu.clock_event_reasons)
            for r in rows
            if r.gpu.clock_event_reasons is not None
            for reason in REASONS
        ]
        yield family(
            "podres_gpu_clock_event_reason",
            "1 for each clock event (throttle) reason active now, 0 for the others.",
            [*LABELS, "reason"],
            reasons,
            lambda e: [*_labels(e[0]), e[1]],
            lambda e: e[2],
        )
        xids = [(r, code, n) for r in rows for code, n in sorted(r.gpu.xid_errors_total.items())]
        yield family(
            "podres_gpu_xid_errors",
            "XID errors seen since the exporter started, by XID code.",
            [*LABELS, "xid"],
            xids,
            lambda e: [*_labels(e[0]), str(e[1])],
            lambda e: e[2],
            counter=True,
        )
        usage = joined.gpu_usage

        def ulabels(u: GpuHolderUsage) -> list[str]:
            return [u.uuid, *holder_values(u.holder)]

        yield family(
            "podres_gpu_holder_processes",
            "Processes on the GPU per holder; the series with empty holder labels counts "
            "processes that belong to no container holding the GPU.",
            LABELS,
            usage,
            ulabels,
            lambda u: u.processes,
        )
        yield family(
            "podres_gpu_holder_sm_utilization_ratio",
            "Per-holder share of SM time from the driver's per-process samples (0-1).",
            LABELS,
            usage,
            ulabels,
            lambda u: u.sm_ratio,
        )
        yield family(
            "podres_gpu_holder_memory_used_bytes",
            "Per-holder device memory of its processes.",
            LABELS,
            usage,
            ulabels,
            lambda u: u.used_memory_bytes,
        )
