"""Memory and hugepages per NUMA node, and pinned memory per container."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import RenderContext
from podres_exporter.collectors.families import HOLDER_LABELS, holder_values


class MemoryCollector:
    """``podres_node_memory_bytes`` and ``podres_container_memory_bytes``."""

    name = "memory"
    default_enabled = True
    description = "memory-manager memory and hugepages per NUMA node and container"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        acc = ctx.view.accounting
        if acc is None:
            return
        node = GaugeMetricFamily(
            "podres_node_memory_bytes",
            "Memory-manager memory per NUMA node, type (memory, hugepages-2Mi, ...) and state: "
            "allocatable, allocated, free.",
            labels=["numa_node", "memory_type", "state"],
        )
        for (numa, mtype, state), n in sorted(acc.node_memory.items()):
            node.add_metric([numa, mtype, state], n)
        yield node
        held = GaugeMetricFamily(
            "podres_container_memory_bytes",
            "Memory pinned to a container by the memory manager, per NUMA node and type.",
            labels=[*HOLDER_LABELS, "numa_node", "memory_type"],
        )
        for m in acc.container_memory:
            held.add_metric([*holder_values(m.holder), m.numa, m.memory_type], m.size_bytes)
        yield held
