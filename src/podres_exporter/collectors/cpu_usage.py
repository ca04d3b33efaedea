"""CPU use of the exclusive CPUs and the shared pool."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import RenderContext
from podres_exporter.collectors.families import HOLDER_LABELS, family, holder_values


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
