"""Why the Topology Manager refused a pod, in words a person can act on: which resource
is short on which NUMA node(s) under which policy.

The kubelet itself only says ``TopologyAffinityError``; this reading of the hints is
ours. A resource is short when, alone, it has no hint the policy accepts (restricted:
no preferred hint; single-numa-node: no preferred single-NUMA hint); ``numa_nodes`` are
the nodes of the masks of the preferred width that could hold it on an empty node but
lack free units now. When every resource alone has an acceptable hint, the resources
cannot be aligned together: ``resource`` names them joined by ``+``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from podres_exporter.core.topology.books import Books
from podres_exporter.core.topology.cpus import cpu_hints
from podres_exporter.core.topology.devices import device_hints
from podres_exporter.core.topology.memory import memory_hints
from podres_exporter.core.topology.merge import Hint
from podres_exporter.core.topology.model import (
    CPU,
    CpuPolicy,
    MemoryPolicy,
    Shortage,
    TopologyPolicy,
)

__all__ = ["Asked", "explain"]


@dataclass(frozen=True, slots=True)
class Asked:
    """What a container (or the pod, under scope ``pod``) asks each provider for."""

    devices: Mapping[str, int]
    cpus: int
    memory: Mapping[str, int]


def _acceptable(policy: TopologyPolicy, h: Hint) -> bool:
    if not h.preferred:
        return False
    return (
        policy is not TopologyPolicy.SINGLE_NUMA_NODE or h.mask is None or h.mask.bit_count() == 1
    )


def _per_node(books: Books, resource: str) -> tuple[dict[int, int], dict[int, int]]:
    """(capacity, free) per NUMA node of one resource, in its unit."""
    nodes = books.topo.nodes
    cap = dict.fromkeys(nodes, 0)
    free = dict.fromkeys(nodes, 0)
    if resource == CPU:
        for c in books.topo.cpus.values():
            cap[c.numa] = cap.get(c.numa, 0) + 1
        for cid in books.free_cpus | books.cpu_reuse:
            n = books.topo.cpus[cid].numa
            free[n] = free.get(n, 0) + 1
    elif resource in books.devices or resource in books.free_devices:
        every = books.devices.get(resource, {})
        for d in every.values():
            for n in d.numa:
                cap[n] = cap.get(n, 0) + 1
        for did in books.free_devices.get(resource, set()) | books.device_reuse.get(
            resource, set()
        ):
            info = every.get(did)
            for n in info.numa if info else ():
                free[n] = free.get(n, 0) + 1
    else:
        for n, m in books.node.memory.get(resource, {}).items():
            cap[n] = m.allocatable
            free[n] = books.memory_free.get(resource, {}).get(n, 0)
    return cap, free


def _short(books: Books, resource: str, requested: int, policy: TopologyPolicy) -> Shortage:
    cap, free = _per_node(books, resource)
    nodes = books.topo.nodes
    widths = [1] if policy is TopologyPolicy.SINGLE_NUMA_NODE else range(1, len(nodes) + 1)
    for width in widths:
        combos = [
            c for c in itertools.combinations(nodes, width) if sum(cap[n] for n in c) >= requested
        ]
        if combos:
            short = sorted({n for c in combos if sum(free[n] for n in c) < requested for n in c})
            best = max(sum(free[n] for n in c) for c in combos)
            return Shortage(resource, tuple(short), policy, requested, best)
    return Shortage(resource, nodes, policy, requested, max((free[n] for n in nodes), default=0))


def explain(books: Books, asked: Asked) -> Shortage:
    """The shortage behind a TopologyAffinityError (see the module docstring)."""
    policy = books.node.policies.topology
    per_resource: dict[str, tuple[int, list[Hint] | None]] = {}
    for r, hints in device_hints(books, asked.devices).items():
        per_resource[r] = (asked.devices[r], None if hints is None else list(hints))
    if asked.cpus and books.node.policies.cpu is CpuPolicy.STATIC:
        per_resource[CPU] = (
            asked.cpus,
            cpu_hints(
                books.topo,
                books.free_cpus,
                books.cpu_reuse,
                asked.cpus,
                align_by_socket=books.node.policies.align_by_socket,
            ),
        )
    if asked.memory and books.node.policies.memory is MemoryPolicy.STATIC:
        mem = memory_hints(books, asked.memory)
        for r, q in asked.memory.items():
            per_resource[r] = (q, list(mem.get(r, [])))
    aligned: list[str] = []
    for r, (q, hints) in per_resource.items():
        if hints is None:
            continue
        if not any(_acceptable(policy, h) for h in hints):
            return _short(books, r, q, policy)
        aligned.append(r)
    return Shortage("+".join(aligned), (), policy, 0, 0)
