"""CPU pools per NUMA node, one assignment per CPU, and the exclusive CPUs per holder.

Every online CPU is in exactly one pool of exclusive / shared_free / reserved, so the
pools add up to the online CPUs; allocatable is counted apart from them (it overlaps
exclusive and shared_free):
- allocatable: what the kubelet reports as allocatable; when it reports none
  (CPU manager policy ``none``, or GetAllocatableResources not served) the
  node's online CPUs stand in, and ``cpu_basis`` says ``online``. A v1alpha1
  kubelet reports no CPUs at all: no CPU rows, ``cpu_basis`` ``unknown``.
- exclusive: CPUs held exclusively by a container (or a pod).
- shared_free: the free shared pool, allocatable minus the union of exclusive CPUs.
- reserved: online but not allocatable (the kubelet's reserved CPUs).

Pod-level resources: a pod's pod-level CPU set is its whole exclusive budget and
contains the CPUs its exclusive containers list for themselves. A CPU in both is the
container's, counted once; a pod-level CPU no container lists is in the pod's private
shared pool, exclusive to the pod and held by the pod itself (holder container ``""``).

A CPU listed by several containers cannot be exclusive (kubelets 1.20 to 1.22
listed the whole shared cpuset for shared containers): it counts as shared and
is reported as the ``cpu_listed_by_several_containers`` anomaly.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from podres_exporter.core.accounting.holders import settle
from podres_exporter.core.model import (
    ApiVersion,
    Holder,
    KubeletReading,
    NodeTopology,
    PodAlloc,
    PodLiveness,
)

CPU_POOLS = ("exclusive", "shared_free", "reserved")


@dataclass(frozen=True, slots=True)
class CpuAssignment:
    """One CPU: its NUMA node label, its pool, and its holder when exclusive."""

    cpu: int
    numa: str
    pool: str
    holder: Holder | None


@dataclass(frozen=True, slots=True)
class HolderCount:
    """An amount held by one holder on one NUMA placement."""

    holder: Holder
    numa: str
    value: int


def cpu_holdings(pod: PodAlloc) -> Iterator[tuple[Holder, frozenset[int]]]:
    """Each container's CPUs; the pod's own (pod-level CPUs no container lists) as ``""``."""
    in_containers: set[int] = set()
    for c in pod.containers:
        in_containers |= c.cpu_ids
        yield Holder(pod.namespace, pod.name, c.name), c.cpu_ids
    private = pod.cpu_ids - in_containers
    if private:
        yield Holder(pod.namespace, pod.name, ""), private


def cpu_numa(topology: NodeTopology, cpu: int) -> str:
    """The NUMA label of ``cpu``: its node, or ``none`` where the topology does not place it."""
    node = topology.numa_of(cpu)
    return "none" if node is None else str(node)


def account_cpus(
    reading: KubeletReading,
    topology: NodeTopology,
    anomalies: Counter[str],
    liveness: PodLiveness | None = None,
    pod_states: dict[tuple[str, str], str] | None = None,
) -> tuple[str, dict[tuple[str, str], int], dict[str, int], list[CpuAssignment], list[HolderCount]]:
    """CPU pools per NUMA node, allocatable CPUs per NUMA node, one assignment per CPU,
    exclusive CPUs per holder."""
    if reading.api_version is ApiVersion.V1ALPHA1:
        return "unknown", {}, {}, [], []  # v1alpha1 carries no CPUs at all: unknown, not zero
    online = topology.online_cpus
    reported = reading.allocatable.cpu_ids if reading.allocatable is not None else frozenset()
    basis = "allocatable" if reported else "online"
    allocatable = reported or online

    # The holders listing each CPU, each once: a pod the kubelet lists twice is still
    # one holder (its series could not tell the two apart anyway).
    listed_by: dict[int, dict[Holder, None]] = defaultdict(dict)
    for pod in reading.pods:
        for holder, cpus in cpu_holdings(pod):
            for cpu in cpus:
                listed_by[cpu][holder] = None
    seen_states = {} if pod_states is None else pod_states
    counted = {
        cpu: settle(hs, liveness, seen_states, anomalies) if len(hs) > 1 else list(hs)
        for cpu, hs in listed_by.items()
    }
    owner = {cpu: hs[0] for cpu, hs in counted.items() if len(hs) == 1}
    anomalies["cpu_listed_by_several_containers"] += sum(
        1 for hs in counted.values() if len(hs) > 1
    )
    anomalies["cpu_not_online"] += len((set(owner) | allocatable) - online)

    exclusive = frozenset(owner)
    reserved = online - allocatable if basis == "allocatable" else frozenset()
    shared_free = allocatable - exclusive

    counts: dict[tuple[str, str], int] = {}
    per_node: dict[str, int] = {str(node): 0 for node in topology.numa_nodes}
    for node in topology.numa_nodes:
        for pool in CPU_POOLS:
            counts[(str(node), pool)] = 0
    for cpu in allocatable:
        numa = cpu_numa(topology, cpu)
        per_node[numa] = per_node.get(numa, 0) + 1
    for pool, cpus in (
        ("exclusive", exclusive),
        ("shared_free", shared_free),
        ("reserved", reserved),
    ):
        for cpu in cpus:
            key = (cpu_numa(topology, cpu), pool)
            counts[key] = counts.get(key, 0) + 1

    assignments = []
    for cpu in sorted(online | allocatable | exclusive):
        if cpu in owner:
            pool = "exclusive"
        elif cpu in shared_free:
            pool = "shared_free"
        else:
            pool = "reserved"
        assignments.append(CpuAssignment(cpu, cpu_numa(topology, cpu), pool, owner.get(cpu)))

    per_holder: Counter[tuple[Holder, str]] = Counter()
    for cpu, holder in owner.items():
        per_holder[(holder, cpu_numa(topology, cpu))] += 1
    held = [HolderCount(h, n, v) for (h, n), v in sorted(per_holder.items())]
    return basis, counts, per_node, assignments, held
