"""Pod-level resources: a pod's own CPUs and memory, and its private shared pool."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podres_exporter.core.accounting import LIVENESS_ANOMALY, Holder, PodCount, PodMemory, account
from podres_exporter.core.model import (
    Allocatable,
    ContainerAlloc,
    KubeletReading,
    MemoryBlock,
    PodAlloc,
)
from tests.core.accounting.support import GiB, cpus16, pod, reading, topo


def test_pod_level_cpus_are_held_by_the_pod() -> None:
    """Pod-level exclusive CPUs are held with an empty container name."""
    p = PodAlloc("ns", "p", (ContainerAlloc("c"),), cpu_ids=frozenset({3}))
    acc = account(reading((p,), Allocatable(frozenset(range(16)))), topo())
    assert [(h.holder.container, h.value) for h in acc.container_cpus] == [("", 1)]


def _pod_scoped() -> PodAlloc:
    """A pod-scoped pod: pod-level CPUs 2-5 (node 0) and 8 (node 1); ``excl`` lists 2-3,
    ``shared`` runs in the pod's own pool and lists nothing."""
    return PodAlloc(
        "ns",
        "p",
        (ContainerAlloc("excl", cpu_ids=frozenset({2, 3})), ContainerAlloc("shared")),
        cpu_ids=frozenset({2, 3, 4, 5, 8}),
    )


def test_pod_level_cpus_listed_by_a_container_are_the_containers_once() -> None:
    """CPUs at both levels are the container's, with no anomaly; the rest are the pod's own."""
    acc = account(reading((_pod_scoped(),), Allocatable(frozenset(range(16)))), topo())
    held = {(h.holder.container, h.numa): h.value for h in acc.container_cpus}
    assert held == {("excl", "0"): 2, ("", "0"): 2, ("", "1"): 1}
    assert acc.anomalies["cpu_listed_by_several_containers"] == 0
    assert acc.node_cpus[("0", "exclusive")] == 4
    assert acc.node_cpus[("1", "exclusive")] == 1
    assert acc.node_cpus[("0", "shared_free")] == 4  # 0, 1, 6, 7: every pod-level CPU left out
    assert acc.node_cpus[("1", "shared_free")] == 7
    owners = {a.cpu: a.holder for a in acc.cpu_assignments if a.pool == "exclusive"}
    assert owners[2] == Holder("ns", "p", "excl")
    assert owners[4] == Holder("ns", "p", "")


def test_pod_shared_pool_cpus_per_numa_node() -> None:
    """The pod's private shared pool: pod-level CPUs no container lists, per NUMA node."""
    acc = account(reading((_pod_scoped(),), Allocatable(frozenset(range(16)))), topo())
    assert acc.pod_shared_cpus == (PodCount("ns", "p", "0", 2), PodCount("ns", "p", "1", 1))


def test_a_pod_whose_containers_take_all_its_cpus_has_an_empty_pool() -> None:
    """Every pod-level CPU claimed by containers: a zero row, and no pod holder."""
    p = PodAlloc("ns", "p", (ContainerAlloc("c", cpu_ids=frozenset({1, 2})),), frozenset({1, 2}))
    acc = account(reading((p,), Allocatable(frozenset(range(16)))), topo())
    assert acc.pod_shared_cpus == (PodCount("ns", "p", "0", 0),)
    assert [h.holder.container for h in acc.container_cpus] == ["c"]


def test_pod_level_cpu_of_another_pod_is_still_an_anomaly() -> None:
    """A pod-level CPU another pod lists is listed by two holders: shared, an anomaly."""
    other = pod("q", ContainerAlloc("c", cpu_ids=frozenset({4})))
    acc = account(reading((_pod_scoped(), other), Allocatable(frozenset(range(16)))), topo())
    assert acc.anomalies["cpu_listed_by_several_containers"] == 1
    assert next(a for a in acc.cpu_assignments if a.cpu == 4).pool == "shared_free"


def test_no_pod_level_fields_no_pod_rows() -> None:
    """A kubelet without pod-level fields: no pool rows, accounting as before."""
    p = pod(
        "a", ContainerAlloc("c", cpu_ids=frozenset({1}), memory=(MemoryBlock("memory", GiB, (0,)),))
    )
    acc = account(reading((p,), Allocatable(frozenset(range(16)))), topo())
    assert acc.pod_shared_cpus == ()
    assert acc.pod_shared_memory == ()
    assert LIVENESS_ANOMALY not in acc.anomalies


def test_pod_level_memory_counts_once_and_the_rest_is_the_pods() -> None:
    """Pod-level memory contains the containers' blocks: allocated once, the rest the pod's."""
    p = PodAlloc(
        "ns",
        "p",
        (ContainerAlloc("excl", memory=(MemoryBlock("memory", 2 * GiB, (0,)),)),),
        memory=(MemoryBlock("memory", 3 * GiB, (0,)), MemoryBlock("hugepages-1Gi", GiB, (1,))),
    )
    alloc = Allocatable(
        frozenset(range(16)),
        memory=(MemoryBlock("memory", 8 * GiB, (0,)), MemoryBlock("hugepages-1Gi", 4 * GiB, (1,))),
    )
    acc = account(reading((p,), alloc), topo())
    assert acc.node_memory[("0", "memory", "allocated")] == 3 * GiB
    assert acc.node_memory[("0", "memory", "free")] == 5 * GiB
    assert acc.node_memory[("1", "hugepages-1Gi", "allocated")] == GiB
    held = {(m.holder.container, m.memory_type): m.size_bytes for m in acc.container_memory}
    assert held == {("excl", "memory"): 2 * GiB, ("", "memory"): GiB, ("", "hugepages-1Gi"): GiB}
    assert acc.pod_shared_memory == (
        PodMemory("ns", "p", "hugepages-1Gi", "1", GiB),
        PodMemory("ns", "p", "memory", "0", GiB),
    )


@st.composite
def pod_scoped_readings(draw: st.DrawFn) -> KubeletReading:
    """Pods whose pod-level sets hold their containers' CPUs and some of their own."""
    free = sorted(draw(cpus16))
    allocatable = frozenset(free)
    pods = []
    for i in range(draw(st.integers(0, 4))):
        take = draw(st.integers(0, len(free)))
        budget, free = free[:take], free[take:]
        split = draw(st.integers(0, len(budget)))
        container = ContainerAlloc("c", cpu_ids=frozenset(budget[:split]))
        pods.append(
            PodAlloc("default", f"p{i}", (container, ContainerAlloc("s")), frozenset(budget))
        )
    return reading(tuple(pods), Allocatable(cpu_ids=allocatable))


@settings(max_examples=200, deadline=None)
@given(pod_scoped_readings())
def test_pod_level_cpus_count_once_and_leave_the_shared_pool(r: KubeletReading) -> None:
    """Each pod-level CPU is exclusive once (container or pod), never shared_free; no anomaly."""
    acc = account(r, topo())
    budget = frozenset().union(*(p.cpu_ids for p in r.pods))
    exclusive = {a.cpu for a in acc.cpu_assignments if a.pool == "exclusive"}
    assert exclusive == budget
    assert acc.anomalies["cpu_listed_by_several_containers"] == 0
    assert sum(h.value for h in acc.container_cpus) == len(budget)
    pool = sum(c.value for c in acc.pod_shared_cpus)
    assert pool == sum(len(p.cpu_ids - p.containers[0].cpu_ids) for p in r.pods)
