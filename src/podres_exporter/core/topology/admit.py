"""Admitting a pod the way the kubelet v1.28 does: the Topology Manager's scope walks
the containers (or the pod), asks each hint provider for hints, merges them under the
policy, and the device, CPU and memory managers allocate along the chosen affinity.

``admit`` decides; ``assign`` also returns the node after the admission and what each
container got; ``apply`` returns the node alone; ``count_fits`` counts how many more
pods of one shape admit, by repeated ``apply``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from podres_exporter.core.topology import masks
from podres_exporter.core.topology.books import Books
from podres_exporter.core.topology.cpus import allocate_cpus, cpu_hints
from podres_exporter.core.topology.devices import allocate_devices, device_hints
from podres_exporter.core.topology.memory import allocate_memory, memory_hints
from podres_exporter.core.topology.merge import Hint, ProviderHints, merge
from podres_exporter.core.topology.model import (
    CPU,
    Container,
    CpuPolicy,
    Decision,
    MemoryPolicy,
    NodeState,
    Placement,
    Pod,
    QoS,
    Reason,
    Scope,
    TopologyPolicy,
)
from podres_exporter.core.topology.qos import qos
from podres_exporter.core.topology.requests import (
    device_requests,
    guaranteed_cpus,
    memory_requests,
    pod_device_requests,
    pod_guaranteed_cpus,
    pod_memory_requests,
)
from podres_exporter.core.topology.shortage import Asked, explain

__all__ = ["TOPOLOGY_AFFINITY_MESSAGE", "Assignment", "admit", "apply", "assign", "count_fits"]

#: topologymanager/topology_manager.go ``TopologyAffinityError.Error``.
TOPOLOGY_AFFINITY_MESSAGE = "Resources cannot be allocated with Topology locality"


@dataclass(frozen=True)
class Assignment:
    """What one container got: exclusive CPU ids, device ids per resource, pinned memory
    per (type, NUMA node) in bytes, and the NUMA nodes its memory blocks name."""

    container: str
    init: bool
    cpus: tuple[int, ...] = ()
    devices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    memory: Mapping[tuple[str, int], int] = field(default_factory=dict)
    memory_numa: tuple[int, ...] = ()


class _Refused(Exception):
    """An allocation failed: the kubelet's reason and message."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def _unexpected(err: str) -> _Refused:
    """admission.go ``GetPodAdmitResult`` wrapping a plain error (unexpectedAdmissionError)."""
    return _Refused(Reason.UNEXPECTED, f"Allocate failed due to {err}, which is unexpected")


def _providers(
    books: Books, devices: Mapping[str, int], cpus: int, memory: Mapping[str, int]
) -> list[ProviderHints]:
    """The hint providers in the kubelet's order (container_manager_linux.go adds the
    device manager, then the CPU manager, then the memory manager)."""
    p = books.node.policies
    cpu: ProviderHints = None
    if p.cpu is CpuPolicy.STATIC and cpus > 0:
        # policy_static.go GetTopologyHints / GetPodTopologyHints
        hints = cpu_hints(
            books.topo,
            books.free_cpus,
            books.cpu_reuse,
            cpus,
            align_by_socket=p.align_by_socket,
        )
        cpu = {CPU: hints}
    mem: ProviderHints = None
    if p.memory is MemoryPolicy.STATIC and memory:
        mem = dict(memory_hints(books, memory))
    return [dict(device_hints(books, devices)), cpu, mem]


def _full_pcpus_check(books: Books, count: int) -> None:
    """policy_static.go ``Allocate`` with full-pcpus-only: the request must be a multiple
    of the CPUs per core, and no more than the free CPUs outside the reserved CPUs' cores
    (``GetAvailablePhysicalCPUs``); else SMTAlignmentError."""
    per_core = max(1, books.topo.cpus_per_core)
    if count % per_core:
        raise _Refused(
            Reason.SMT_ALIGNMENT,
            f"SMT Alignment Error: requested {count} cpus not multiple cpus per core = {per_core}",
        )
    reserved_cores = {books.topo.cpus[c].core for c in books.node.reserved_cpus}
    physical = sum(1 for c in books.free_cpus if books.topo.cpus[c].core not in reserved_cores)
    if count > physical:
        msg = f"SMT Alignment Error: requested {count} cpus not multiple cpus per core = {per_core}"
        if physical > 0:
            msg = (
                "SMT Alignment Error: not enough free physical CPUs: available physical CPUs"
                f" = {physical}, requested CPUs = {count}, CPUs per core = {per_core}"
            )
        raise _Refused(Reason.SMT_ALIGNMENT, msg)


def _allocate(books: Books, klass: QoS, c: Container, init: bool, hint: Hint) -> Assignment:
    """scope.go ``allocateAlignedResources``: each provider's ``Allocate`` in order."""
    p = books.node.policies
    devices: dict[str, tuple[str, ...]] = {}
    for r, q in device_requests(books, c).items():
        # devicemanager/manager.go Allocate: init containers' devices become reusable
        got = allocate_devices(books, r, q, hint.mask)
        if isinstance(got, str):
            raise _unexpected(got)
        reuse = books.device_reuse.setdefault(r, set())
        books.free_devices.get(r, set()).difference_update(got)
        if init:
            reuse.update(got)
        else:
            reuse.difference_update(got)
        devices[r] = tuple(got)
    cpus: list[int] = []
    count = guaranteed_cpus(klass, c) if p.cpu is CpuPolicy.STATIC else 0
    if count:
        if p.full_pcpus_only:
            _full_pcpus_check(books, count)
        allocatable = books.free_cpus | books.cpu_reuse
        got_cpus = allocate_cpus(
            books.topo, allocatable, count, hint.mask, align_by_socket=p.align_by_socket
        )
        if got_cpus is None:
            raise _unexpected("not enough cpus available to satisfy request")
        cpus = got_cpus
        books.free_cpus.difference_update(cpus)
        # policy_static.go updateCPUsToReuse
        if init:
            books.cpu_reuse.update(cpus)
        else:
            books.cpu_reuse.difference_update(cpus)
    memory: dict[tuple[str, int], int] = {}
    memory_numa: tuple[int, ...] = ()
    wanted = memory_requests(klass, c) if p.memory is MemoryPolicy.STATIC else {}
    if wanted:
        got_mem = allocate_memory(books, wanted, hint, init=init)
        if isinstance(got_mem, str):
            raise _unexpected(got_mem)
        memory_numa, memory = got_mem
    return Assignment(c.name, init, tuple(cpus), devices, memory, memory_numa)


def _placement(name: str | None, init: bool, hint: Hint) -> Placement:
    affinity = None if hint.mask is None else masks.bits(hint.mask)
    return Placement(name, init, affinity, hint.preferred)


def _containers(pod: Pod) -> list[tuple[Container, bool]]:
    return [(c, True) for c in pod.init_containers] + [(c, False) for c in pod.containers]


def _merge(books: Books, providers: list[ProviderHints]) -> tuple[Hint, bool]:
    p = books.node.policies
    return merge(
        p.topology,
        books.topo.nodes,
        providers,
        prefer_closest=p.prefer_closest_numa_nodes,
        distances=books.node.distances,
    )


def _run(node: NodeState, pod: Pod) -> tuple[Decision, Books, tuple[Assignment, ...]]:
    """The scopes (scope_none.go / scope_container.go / scope_pod.go ``Admit``)."""
    books = Books.of(node)
    klass = qos(pod)
    policy = node.policies.topology
    placements: list[Placement] = []
    done: list[Assignment] = []
    current: str | None = None
    try:
        if policy is TopologyPolicy.NONE:
            # scope.go admitPolicyNone: allocate every container with no hint (GetAffinity
            # then answers the zero TopologyHint: nil mask, not preferred)
            for c, init in _containers(pod):
                current = c.name
                done.append(_allocate(books, klass, c, init, Hint(None, False)))
        elif node.policies.scope is Scope.POD:
            asked = Asked(
                pod_device_requests(books, pod),
                pod_guaranteed_cpus(klass, pod) if node.policies.cpu is CpuPolicy.STATIC else 0,
                pod_memory_requests(klass, pod)
                if node.policies.memory is MemoryPolicy.STATIC
                else {},
            )
            hint, ok = _merge(books, _providers(books, asked.devices, asked.cpus, asked.memory))
            if not ok:
                return _affinity_error(books, asked, placements, None), books, ()
            placements.append(_placement(None, False, hint))
            for c, init in _containers(pod):
                current = c.name
                done.append(_allocate(books, klass, c, init, hint))
        else:
            for c, init in _containers(pod):
                current = c.name
                asked = Asked(
                    device_requests(books, c),
                    guaranteed_cpus(klass, c) if node.policies.cpu is CpuPolicy.STATIC else 0,
                    memory_requests(klass, c)
                    if node.policies.memory is MemoryPolicy.STATIC
                    else {},
                )
                hint, ok = _merge(books, _providers(books, asked.devices, asked.cpus, asked.memory))
                if not ok:
                    return _affinity_error(books, asked, placements, c.name), books, ()
                placements.append(_placement(c.name, init, hint))
                done.append(_allocate(books, klass, c, init, hint))
    except _Refused as e:
        refused = Decision(False, e.reason, e.message, tuple(placements), current)
        return refused, books, ()
    return Decision(True, Reason.ADMITTED, "", tuple(placements)), books, tuple(done)


def _affinity_error(
    books: Books, asked: Asked, placements: list[Placement], container: str | None
) -> Decision:
    return Decision(
        False,
        Reason.TOPOLOGY_AFFINITY,
        TOPOLOGY_AFFINITY_MESSAGE,
        tuple(placements),
        container,
        explain(books, asked),
    )


def admit(node: NodeState, pod: Pod) -> Decision:
    """The kubelet's admission decision for ``pod`` on ``node``."""
    return _run(node, pod)[0]


def assign(node: NodeState, pod: Pod) -> tuple[Decision, NodeState, tuple[Assignment, ...]]:
    """Admit ``pod`` and, when admitted, the node after it and each container's share
    (the node unchanged and no shares when refused)."""
    decision, books, done = _run(node, pod)
    if not decision.admitted:
        return decision, node, ()
    return decision, books.close(), done


def apply(node: NodeState, pod: Pod, decision: Decision | None = None) -> NodeState:
    """The node after admitting ``pod`` (``decision`` from ``admit``; recomputed, since
    the choice of CPUs and devices is not part of it). The node unchanged when the pod
    is refused."""
    if decision is not None and not decision.admitted:
        return node
    return assign(node, pod)[1]


def count_fits(node: NodeState, pod: Pod, limit: int) -> int:
    """How many more pods of this shape the node admits, one after the other, at most
    ``limit``."""
    n = 0
    while n < limit:
        decision, node, _ = assign(node, pod)
        if not decision.admitted:
            break
        n += 1
    return n
