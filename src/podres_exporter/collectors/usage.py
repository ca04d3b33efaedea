"""CPU use of the exclusive CPUs and the shared pool; NUMA alignment; idle held devices."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import HOLDER_LABELS, RenderContext, family, holder_values


class CpuUsageCollector:
    """``podres_cpu_busy_seconds_total`` and ``podres_shared_pool_busy_ratio``."""

    name = "cpu_usage"
    default_enabled = True
    description = "busy time of each exclusive CPU and the shared pool's busy ratio per NUMA node"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        joined = ctx.view.joined
        if joined is None:
            return
        yield family(
            "podres_cpu_busy_seconds",
            "Busy time (all but idle and iowait) of each exclusively held CPU, with its holder.",
            ["cpu", "numa_node", *HOLDER_LABELS],
            joined.cpu_busy,
            lambda c: [str(c.cpu), c.numa, *holder_values(c.holder)],
            lambda c: c.busy_seconds,
            counter=True,
        )
        ratio = GaugeMetricFamily(
            "podres_shared_pool_busy_ratio",
            "Busy share of the shared-pool CPUs of a NUMA node between the last two polls (0-1): "
            "contention of every container without exclusive CPUs.",
            labels=["numa_node"],
        )
        for numa, value in sorted(joined.shared_pool_busy_ratio.items()):
            ratio.add_metric([numa], value)
        yield ratio


class PlacementCollector:
    """NUMA alignment, idle held devices and how device ids resolved."""

    name = "placement"
    default_enabled = True
    description = "NUMA alignment per container, idle held devices, device-id resolution"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        joined = ctx.view.joined
        if joined is None:
            return
        yield family(
            "podres_container_numa_aligned",
            "1 when the container's exclusive CPUs, devices and pinned memory sit on the same "
            "NUMA node(s), 0 when they straddle.",
            list(HOLDER_LABELS),
            joined.numa_aligned,
            lambda a: holder_values(a[0]),
            lambda a: a[1],
        )
        now = ctx.view.snapshot.taken_at
        yield family(
            "podres_held_device_idle_seconds",
            "How long a device held by one container has shown no utilisation (GPU, amdgpu); "
            "counted from when the exporter first saw it idle.",
            ["device", *HOLDER_LABELS],
            joined.idle,
            lambda d: [d.device, *holder_values(d.holder)],
            lambda d: max(0.0, now - d.idle_since),
        )
        info = InfoMetricFamily(
            "podres_device_resolution",
            "One series per kubelet device id: the physical device it names and whether "
            "telemetry was found for it.",
            labels=["resource", "device_id", "kind", "physical_id", "matched"],
        )
        unmatched: dict[str, int] = {}
        for r in joined.resolutions:
            info.add_metric(
                [
                    r.resource,
                    r.device_id,
                    r.kind.value,
                    r.physical_id,
                    "true" if r.matched else "false",
                ],
                {},
            )
            unmatched[r.resource] = unmatched.get(r.resource, 0) + (0 if r.matched else 1)
        yield info
        count = GaugeMetricFamily(
            "podres_device_ids_unmatched",
            "Device ids of a resource that matched no telemetry device (exported as allocation "
            "only): an unknown id shape, or hardware no source reads.",
            labels=["resource"],
        )
        for resource, n in sorted(unmatched.items()):
            count.add_metric([resource], n)
        yield count


class SourcesCollector:
    """``podres_source_*``: how each telemetry source fared."""

    name = "sources"
    default_enabled = True
    description = "success, duration and staleness of each telemetry source"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        telemetry = ctx.view.snapshot.telemetry
        if telemetry is None:
            return
        rows = sorted(telemetry.sources.items())
        yield family(
            "podres_source_up",
            "1 when the source's latest read succeeded.",
            ["source"],
            rows,
            lambda s: [s[0]],
            lambda s: s[1].ok,
        )
        yield family(
            "podres_source_stale",
            "1 when the source's data served is from an earlier read (failed, or running past "
            "--source-timeout).",
            ["source"],
            rows,
            lambda s: [s[0]],
            lambda s: s[1].stale,
        )
        yield family(
            "podres_source_duration_seconds",
            "Duration of the source's latest read.",
            ["source"],
            rows,
            lambda s: [s[0]],
            lambda s: s[1].duration_s,
        )
        yield family(
            "podres_source_last_success_timestamp_seconds",
            "Unix time of the source's last successful read.",
            ["source"],
            rows,
            lambda s: [s[0]],
            lambda s: s[1].last_success,
        )
