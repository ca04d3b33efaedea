"""Free whole physical cores per NUMA node, and threads per core. Pure.

The CPU manager's static policy takes whole physical cores first, and with its
``full-pcpus-only`` option it takes nothing else (upstream
``pkg/kubelet/cm/cpumanager/cpu_assignment.go``, ``takeByTopologyNUMAPacked``;
``policy_static.go``, ``FullPhysicalCPUsOnly``). What it needs is the number of
physical cores whose every online SMT sibling is a free shared-pool CPU: allocatable,
exclusive to nobody, not reserved (the ``shared_free`` pool of :mod:`.cpus`).

A core is the set of its online siblings (``thread_siblings_list``); an offline sibling
is not part of it, as the kubelet's CPU topology (built from the online CPUs) has none.
Where sysfs gave no siblings the facts are unknown: None, never zero.
"""

from __future__ import annotations

from collections.abc import Iterable

from podres_exporter.core.accounting.cpus import CpuAssignment, cpu_numa
from podres_exporter.core.model import NodeTopology


def physical_cores(topology: NodeTopology) -> list[frozenset[int]]:
    """Each physical core as the set of its online CPUs, in order of its first CPU; a CPU
    whose siblings sysfs did not give is on no core."""
    online = topology.online_cpus
    cores = {siblings & online for siblings in topology.thread_siblings.values()}
    return sorted((c for c in cores if c), key=min)


def free_cores(
    assignments: Iterable[CpuAssignment], topology: NodeTopology
) -> dict[str, int] | None:
    """Physical cores whose every online CPU is in the free shared pool, per NUMA label
    (every NUMA node with an online CPU present, 0 when none is free); None without
    sibling facts."""
    cores = physical_cores(topology)
    if not cores:
        return None
    free_cpus = {a.cpu for a in assignments if a.pool == "shared_free"}
    counts = {str(node): 0 for node in topology.numa_nodes}
    for core in cores:
        if core <= free_cpus:
            # The siblings of one core share its NUMA node; label a core that spans
            # nodes (never seen) by all of them, so that no node counts it alone.
            labels = sorted({cpu_numa(topology, cpu) for cpu in core})
            numa = labels[0] if len(labels) == 1 else ",".join(labels)
            counts[numa] = counts.get(numa, 0) + 1
    return counts


def threads_per_core(topology: NodeTopology) -> int | None:
    """Online CPUs per physical core as the kubelet counts them: CPUs over cores,
    rounded down (upstream ``cpumanager/topology/topology.go``, ``CPUsPerCore``); None
    without sibling facts."""
    cores = physical_cores(topology)
    if not cores:
        return None
    return sum(len(c) for c in cores) // len(cores)
