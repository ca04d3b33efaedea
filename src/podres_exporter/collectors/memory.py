"""Memory and hugepages per NUMA node, and pinned memory per container.

``podres_node_memory_bytes``, ``podres_node_allocatable_memory_bytes``,
``podres_container_memory_bytes`` and, for pods with
pod-level memory, ``podres_pod_shared_pool_memory_bytes``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, accounting
from podres_exporter.collectors.families import HOLDER_LABELS, family, holder_values, labelled
from podres_exporter.core.accounting import Accounting


def _families(acc: Accounting) -> Iterator[Metric]:
    yield labelled(
        "podres_node_memory_bytes",
        "Memory-manager memory per NUMA node, type (memory, hugepages-2Mi, ...) and state: "
        "allocated (pinned to containers), free (allocatable minus allocated).",
        ["numa_node", "memory_type", "state"],
        sorted(acc.node_memory.items()),
    )
    if acc.allocatable_memory:
        yield labelled(
            "podres_node_allocatable_memory_bytes",
            "Memory-manager memory the kubelet can pin, per NUMA node and type.",
            ["numa_node", "memory_type"],
            sorted(acc.allocatable_memory.items()),
        )
    yield family(
        "podres_container_memory_bytes",
        "Memory pinned to a container by the memory manager, per NUMA node and type.",
        [*HOLDER_LABELS, "numa_node", "memory_type"],
        acc.container_memory,
        lambda m: [*holder_values(m.holder), m.numa, m.memory_type],
        lambda m: m.size_bytes,
    )
    if acc.pod_shared_memory:
        yield family(
            "podres_pod_shared_pool_memory_bytes",
            "Pod-level memory no container of the pod claims (the pod's private shared "
            "pool), per NUMA placement and type; only pods with pod-level memory.",
            ["namespace", "pod", "numa_node", "memory_type"],
            acc.pod_shared_memory,
            lambda m: [m.namespace, m.pod, m.numa, m.memory_type],
            lambda m: m.size_bytes,
        )


COLLECTOR: Final = PartCollector(
    "memory",
    "memory-manager memory and hugepages per NUMA node and container",
    accounting,
    _families,
)
