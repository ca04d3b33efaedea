"""The node state the admission rules need, rebuilt from what the exporter reads: the
kubelet's pod-resources answers (``KubeletReading``) and the sysfs CPU topology.

Free CPUs are the allocatable CPUs no container or pod holds; free devices the
allocatable (healthy) devices nobody holds; every registered device is the allocatable
ones plus the held ones unless the caller knows more (an unhealthy free device is
invisible to the pod-resources API); free memory is the allocatable memory per NUMA
node less the pinned blocks, a block spanning several NUMA nodes taken node by node in
order (as memorymanager ``updateMachineState`` does; the split inside a group never
changes a decision, only the sum does); the memory manager's groups come from the
blocks' NUMA nodes. Without ``cores``, every CPU is its own core (no SMT known).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from podres_exporter.core.model import KubeletReading, MemoryBlock, NodeTopology
from podres_exporter.core.topology.model import (
    CpuInfo,
    DeviceInfo,
    NodeState,
    NumaMemory,
    Policies,
)

__all__ = ["NodeFacts", "from_reading"]


def _held_blocks(reading: KubeletReading) -> list[MemoryBlock]:
    out: list[MemoryBlock] = []
    for pod in reading.pods:
        out.extend(pod.memory)
        for c in pod.containers:
            out.extend(c.memory)
    return out


def _memory(
    reading: KubeletReading,
) -> tuple[dict[str, dict[int, NumaMemory]], dict[int, tuple[int, ...]], dict[int, int]]:
    alloc = reading.allocatable
    total: dict[str, dict[int, int]] = {}
    for b in alloc.memory if alloc else ():
        for n in b.numa or ():
            total.setdefault(b.memory_type, {})[n] = total.get(b.memory_type, {}).get(
                n, 0
            ) + b.size_bytes // len(b.numa or (n,))
    free = {t: dict(per) for t, per in total.items()}
    cells: dict[int, tuple[int, ...]] = {}
    assignments: dict[int, int] = {}
    for b in _held_blocks(reading):
        nodes = tuple(sorted(b.numa or ()))
        need = b.size_bytes
        for n in nodes:
            assignments[n] = assignments.get(n, 0) + 1
            cells[n] = nodes
            have = free.get(b.memory_type, {}).get(n, 0)
            got = min(have, need)
            if b.memory_type in free and n in free[b.memory_type]:
                free[b.memory_type][n] = have - got
            need -= got
    memory = {
        t: {n: NumaMemory(size, free[t][n]) for n, size in sorted(per.items())}
        for t, per in total.items()
    }
    return memory, cells, assignments


def _devices(
    reading: KubeletReading,
    registered: Mapping[str, Iterable[DeviceInfo]] | None,
) -> tuple[dict[str, tuple[DeviceInfo, ...]], dict[str, frozenset[str]]]:
    alloc = reading.allocatable
    healthy: dict[str, dict[str, DeviceInfo]] = {}
    for d in alloc.devices if alloc else ():
        healthy.setdefault(d.resource, {})[d.device_id] = DeviceInfo(
            d.device_id, frozenset(d.numa or ())
        )
    held: dict[str, dict[str, DeviceInfo]] = {}
    for pod in reading.pods:
        for c in pod.containers:
            for d in c.devices:
                held.setdefault(d.resource, {})[d.device_id] = DeviceInfo(
                    d.device_id, frozenset(d.numa or ())
                )
    every: dict[str, dict[str, DeviceInfo]] = {}
    for src in (held, healthy):
        for r, ds in src.items():
            every.setdefault(r, {}).update(ds)
    for r, known in (registered or {}).items():
        every[r] = {d.id: d for d in known}
    free = {
        r: frozenset(set(healthy.get(r, {})) - set(held.get(r, {})))
        for r in sorted(set(every) | set(healthy))
    }
    devices = {r: tuple(sorted(ds.values(), key=lambda d: d.id)) for r, ds in every.items()}
    return devices, free


@dataclass(frozen=True)
class NodeFacts:
    """What the pod-resources API does not tell: the reserved CPUs (default: the online
    CPUs that are not allocatable), each CPU's core (default: its own) and socket
    (default: its NUMA node), the NUMA distances, and every registered device when
    known (default: the allocatable and the held ones)."""

    reserved_cpus: frozenset[int] | None = None
    cores: Mapping[int, int] = field(default_factory=dict)
    sockets: Mapping[int, int] = field(default_factory=dict)
    distances: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    registered_devices: Mapping[str, Iterable[DeviceInfo]] | None = None


def from_reading(
    reading: KubeletReading,
    topology: NodeTopology,
    policies: Policies,
    facts: NodeFacts | None = None,
) -> NodeState:
    """The ``NodeState`` of one node from the exporter's reading (see the module
    docstring)."""
    f = facts or NodeFacts()
    online = sorted(topology.online_cpus)
    cpus = tuple(
        CpuInfo(
            c,
            f.cores.get(c, c),
            f.sockets.get(c, topology.cpu_to_numa.get(c, 0)),
            topology.cpu_to_numa.get(c, 0),
        )
        for c in online
    )
    alloc = reading.allocatable
    allocatable = alloc.cpu_ids if alloc else frozenset()
    held: set[int] = set()
    for pod in reading.pods:
        held |= pod.cpu_ids
        for c in pod.containers:
            held |= c.cpu_ids
    if f.reserved_cpus is not None:
        reserved = f.reserved_cpus
    else:
        reserved = frozenset(online) - allocatable if allocatable else frozenset()
    devices, free_devices = _devices(reading, f.registered_devices)
    memory, cells, assignments = _memory(reading)
    return NodeState(
        policies=policies,
        cpus=cpus,
        free_cpus=frozenset(allocatable) - held - reserved,
        reserved_cpus=reserved,
        devices=devices,
        free_devices=free_devices,
        memory=memory,
        distances=f.distances,
        numa_nodes=topology.numa_nodes,
        memory_cells=cells,
        memory_assignments=assignments,
    )
