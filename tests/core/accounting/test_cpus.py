"""The CPU pools per NUMA node, one assignment per CPU, exclusive CPUs per holder."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podres_exporter.core.accounting import Holder, account
from podres_exporter.core.model import Allocatable, ApiVersion, ContainerAlloc, KubeletReading
from tests.core.accounting.support import cpus16, pod, reading, topo


def test_static_policy_pools_per_numa_node() -> None:
    """Reserved = online - allocatable; shared_free = allocatable - exclusive, per node."""
    alloc = Allocatable(cpu_ids=frozenset(range(16)) - {0, 8})
    r = reading(
        (
            pod("a", ContainerAlloc("main", cpu_ids=frozenset({1, 2, 3}))),
            pod("b", ContainerAlloc("main", cpu_ids=frozenset({9}))),
            pod("shared", ContainerAlloc("main")),
        ),
        alloc,
    )
    acc = account(r, topo())
    assert acc.cpu_basis == "allocatable"
    assert acc.allocatable_cpus["0"] == 7
    assert ("0", "allocatable") not in acc.node_cpus
    assert acc.node_cpus[("0", "exclusive")] == 3
    assert acc.node_cpus[("0", "shared_free")] == 4
    assert acc.node_cpus[("0", "reserved")] == 1
    assert acc.node_cpus[("1", "exclusive")] == 1
    assert acc.node_cpus[("1", "shared_free")] == 6
    held = {(h.holder.pod, h.numa): h.value for h in acc.container_cpus}
    assert held == {("a", "0"): 3, ("b", "1"): 1}
    by_cpu = {a.cpu: a for a in acc.cpu_assignments}
    assert by_cpu[0].pool == "reserved" and by_cpu[0].holder is None
    assert by_cpu[2].pool == "exclusive"
    assert by_cpu[2].holder == Holder("default", "a", "main")
    assert by_cpu[4].pool == "shared_free"


def test_policy_none_uses_online_cpus_as_the_shared_pool() -> None:
    """An empty allocatable CPU list (policy none) makes the online CPUs the pool, none reserved."""
    acc = account(reading((pod("a", ContainerAlloc("c")),), Allocatable()), topo())
    assert acc.cpu_basis == "online"
    assert acc.node_cpus[("0", "shared_free")] == 8
    assert acc.allocatable_cpus["1"] == 8
    assert acc.node_cpus[("0", "reserved")] == 0


def test_v1alpha1_reports_no_cpu_pools() -> None:
    """A v1alpha1 kubelet carries no CPU data: no pool rows rather than false zeros."""
    acc = account(reading(api=ApiVersion.V1ALPHA1), topo())
    assert acc.cpu_basis == "unknown"
    assert not acc.node_cpus
    assert not acc.cpu_assignments


def test_cpu_listed_by_two_containers_is_shared_and_flagged() -> None:
    """Old kubelets list the shared cpuset per shared container: not exclusive, an anomaly."""
    shared = frozenset({4, 5, 6, 7})
    r = reading(
        (
            pod("a", ContainerAlloc("c", cpu_ids=shared)),
            pod("b", ContainerAlloc("c", cpu_ids=shared)),
        ),
        Allocatable(cpu_ids=frozenset(range(16))),
    )
    acc = account(r, topo())
    assert acc.node_cpus[("0", "exclusive")] == 0
    assert acc.anomalies["cpu_listed_by_several_containers"] == 4
    assert not acc.container_cpus


def test_cpu_outside_online_set_is_flagged_and_kept() -> None:
    """An exclusive CPU the node does not know is kept, labelled numa 'none' and counted."""
    r = reading(
        (pod("a", ContainerAlloc("c", cpu_ids=frozenset({1, 99}))),),
        Allocatable(frozenset(range(16))),
    )
    acc = account(r, topo())
    assert acc.anomalies["cpu_not_online"] == 1
    assert {(h.numa, h.value) for h in acc.container_cpus} == {("0", 1), ("none", 1)}


@st.composite
def node_readings(draw: st.DrawFn) -> KubeletReading:
    allocatable = draw(cpus16)
    free = sorted(allocatable)
    pods = []
    for i in range(draw(st.integers(0, 6))):
        take = draw(st.integers(0, len(free)))
        mine, free = frozenset(free[:take]), free[take:]
        pods.append(pod(f"p{i}", ContainerAlloc("c", cpu_ids=mine)))
    return reading(tuple(pods), Allocatable(cpu_ids=allocatable))


@settings(max_examples=200, deadline=None)
@given(node_readings())
def test_every_online_cpu_is_in_exactly_one_pool(r: KubeletReading) -> None:
    """The pools (and only they) add up to online; shared_free = allocatable - exclusive."""
    t = topo()
    acc = account(r, t)
    for node in ("0", "1"):
        c = acc.node_cpus
        assert c[(node, "exclusive")] + c[(node, "shared_free")] + c[(node, "reserved")] == 8
        assert sum(n for (numa, _), n in c.items() if numa == node) == 8
        assert c[(node, "shared_free")] == acc.allocatable_cpus[node] - c[(node, "exclusive")]
    pools = [a.pool for a in acc.cpu_assignments]
    assert len(pools) == len(t.online_cpus)
    assert sum(h.value for h in acc.container_cpus) == pools.count("exclusive")
