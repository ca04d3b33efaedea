"""CPU pools per NUMA node and exclusive CPUs per container."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import RenderContext
from podres_exporter.collectors.families import HOLDER_LABELS, holder_values, info


class CpuCollector:
    """``podres_node_cpus``, ``podres_container_exclusive_cpus``, ``podres_cpu_assignment_info``."""

    name = "cpu"
    default_enabled = True
    description = "CPU pools per NUMA node and exclusive CPUs per container"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        acc = ctx.view.accounting
        if acc is None or acc.cpu_basis == "unknown":
            return
        node = GaugeMetricFamily(
            "podres_node_cpus",
            "CPUs per NUMA node and pool: allocatable, exclusive (held by one container), "
            "shared_free (allocatable minus all exclusive), reserved (online, not allocatable).",
            labels=["numa_node", "pool"],
        )
        for (numa, pool), n in sorted(acc.node_cpus.items()):
            node.add_metric([numa, pool], n)
        yield node
        basis = GaugeMetricFamily(
            "podres_cpu_shared_pool_basis",
            "1 for the basis of the shared pool: 'allocatable' (the kubelet reports allocatable "
            "CPUs) or 'online' (it reports none: CPU manager policy none, or no "
            "GetAllocatableResources; the node's online CPUs are the pool).",
            labels=["basis"],
        )
        for b in ("allocatable", "online"):
            basis.add_metric([b], 1 if acc.cpu_basis == b else 0)
        yield basis
        held = GaugeMetricFamily(
            "podres_container_exclusive_cpus",
            "CPUs held exclusively by a container, per NUMA node.",
            labels=[*HOLDER_LABELS, "numa_node"],
        )
        for row in acc.container_cpus:
            held.add_metric([*holder_values(row.holder), row.numa], row.value)
        yield held
        yield info(
            "podres_cpu_assignment",
            "One series per CPU: its NUMA node, pool and, when exclusive, its holder.",
            ["cpu", "numa_node", "pool", *HOLDER_LABELS],
            acc.cpu_assignments,
            lambda a: [str(a.cpu), a.numa, a.pool, *holder_values(a.holder)],
        )
