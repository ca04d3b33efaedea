"""Pod-level resources: each pod-scoped pod's private shared pool of CPUs and memory.

Kubelets with ``PodLevelResourceManagers`` and Topology Manager scope ``pod`` give a
pod its own CPU set and memory; what its containers do not claim is the pod's private
shared pool. A kubelet that sends no pod-level fields has no rows here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from podres_exporter.core.accounting.cpus import cpu_numa
from podres_exporter.core.accounting.memory import pod_memory_left
from podres_exporter.core.model import NodeTopology, PodAlloc, numa_label


@dataclass(frozen=True, slots=True)
class PodCount:
    """An amount a pod keeps in its private shared pool on one NUMA placement."""

    namespace: str
    pod: str
    numa: str
    value: int


@dataclass(frozen=True, slots=True)
class PodMemory:
    """Pod-level memory of one type that no container of the pod claims."""

    namespace: str
    pod: str
    memory_type: str
    numa: str
    size_bytes: int


def pod_pools(
    pods: Iterable[PodAlloc], topology: NodeTopology
) -> tuple[list[PodCount], list[PodMemory]]:
    """Each pod-scoped pod's private shared pool: CPUs per NUMA node, memory per type.

    A pod with a pod-level CPU set has a row for every NUMA node of that set, zero
    when its containers claim all of it; likewise for pod-level memory.
    """
    cpus: dict[tuple[str, str, str], int] = {}
    memory: dict[tuple[str, str, str, str], int] = {}
    for pod in pods:
        if pod.cpu_ids:
            claimed = frozenset().union(*(c.cpu_ids for c in pod.containers))
            for cpu in pod.cpu_ids:
                key = (pod.namespace, pod.name, cpu_numa(topology, cpu))
                cpus[key] = cpus.get(key, 0) + (cpu not in claimed)
        for b in pod_memory_left(pod):
            mkey = (pod.namespace, pod.name, b.memory_type, numa_label(b.numa))
            memory[mkey] = b.size_bytes
    return (
        [PodCount(ns, p, n, v) for (ns, p, n), v in sorted(cpus.items())],
        [PodMemory(ns, p, t, n, v) for (ns, p, t, n), v in sorted(memory.items())],
    )
