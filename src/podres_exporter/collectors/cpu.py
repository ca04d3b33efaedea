"""CPU pools per NUMA node and exclusive CPUs per container.

``podres_node_cpus``, ``podres_node_allocatable_cpus``, ``podres_cpu_shared_pool_basis``,
``podres_container_exclusive_cpus``, ``podres_cpu_assignment_info`` and, for pods with
pod-level CPU sets, ``podres_pod_shared_pool_cpus``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, accounting
from podres_exporter.collectors.families import (
    HOLDER_LABELS,
    family,
    holder_values,
    info,
    labelled,
)
from podres_exporter.core.accounting import Accounting


def _families(acc: Accounting) -> Iterator[Metric]:
    if acc.cpu_basis == "unknown":
        return
    yield labelled(
        "podres_node_cpus",
        "CPUs per NUMA node and pool: exclusive (held by one container), "
        "shared_free (allocatable minus all exclusive), reserved (online, not allocatable); "
        "the pools add up to the online CPUs.",
        ["numa_node", "pool"],
        sorted(acc.node_cpus.items()),
    )
    yield labelled(
        "podres_node_allocatable_cpus",
        "CPUs the kubelet may hand out, per NUMA node (the online CPUs when it reports none).",
        ["numa_node"],
        [((numa,), n) for numa, n in sorted(acc.allocatable_cpus.items())],
    )
    yield labelled(
        "podres_cpu_shared_pool_basis",
        "1 for the basis of the shared pool: 'allocatable' (the kubelet reports allocatable "
        "CPUs) or 'online' (it reports none: CPU manager policy none, or no "
        "GetAllocatableResources; the node's online CPUs are the pool).",
        ["basis"],
        [((b,), acc.cpu_basis == b) for b in ("allocatable", "online")],
    )
    yield family(
        "podres_container_exclusive_cpus",
        "CPUs held exclusively by a container, per NUMA node.",
        [*HOLDER_LABELS, "numa_node"],
        acc.container_cpus,
        lambda row: [*holder_values(row.holder), row.numa],
        lambda row: row.value,
    )
    if acc.pod_shared_cpus:
        yield family(
            "podres_pod_shared_pool_cpus",
            "CPUs of a pod's private shared pool (pod-level CPUs no container of the pod "
            "holds exclusively), per NUMA node of the pod-level set; only pods with one.",
            ["namespace", "pod", "numa_node"],
            acc.pod_shared_cpus,
            lambda row: [row.namespace, row.pod, row.numa],
            lambda row: row.value,
        )
    yield info(
        "podres_cpu_assignment",
        "One series per CPU: its NUMA node, pool and, when exclusive, its holder.",
        ["cpu", "numa_node", "pool", *HOLDER_LABELS],
        acc.cpu_assignments,
        lambda a: [str(a.cpu), a.numa, a.pool, *holder_values(a.holder)],
    )


COLLECTOR: Final = PartCollector(
    "cpu", "CPU pools per NUMA node and exclusive CPUs per container", accounting, _families
)
