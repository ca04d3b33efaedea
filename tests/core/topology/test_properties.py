"""Generated checks of ``admit`` / ``assign`` / ``count_fits`` invariants over random
nodes and pods (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings

from podres_exporter.core.topology import (
    NodeState,
    Pod,
    Reason,
    TopologyPolicy,
    admit,
    apply,
    assign,
    count_fits,
)
from podres_exporter.core.topology.model import Policies
from tests.core.topology.support import nodes, pods

SETTINGS = settings(max_examples=80, deadline=None)


def _with(node: NodeState, policy: TopologyPolicy) -> NodeState:
    p = node.policies
    return NodeState(
        Policies(
            topology=policy,
            scope=p.scope,
            cpu=p.cpu,
            memory=p.memory,
            full_pcpus_only=p.full_pcpus_only,
        ),
        node.cpus,
        node.free_cpus,
        node.reserved_cpus,
        node.devices,
        node.free_devices,
        node.memory,
    )


@SETTINGS
@given(nodes(), pods())
def test_assign_takes_only_free_units(node: NodeState, pod: Pod) -> None:
    """An admitted pod takes free CPUs and devices only, each once, and the node after
    is the node before less what it took; a refused pod changes nothing."""
    decision, after, shares = assign(node, pod)
    if not decision.admitted:
        assert after is node
        assert decision.reason is not Reason.ADMITTED
        return
    cpus = [c for s in shares for c in s.cpus]
    assert set(cpus) <= node.free_cpus
    assert not set(cpus) & node.reserved_cpus
    assert node.free_cpus - after.free_cpus <= set(cpus)
    for resource, free in node.free_devices.items():
        taken = free - after.free_devices[resource]
        held = {d for s in shares for d in s.devices.get(resource, ())}
        assert taken <= held <= free
    for per in after.memory.values():
        assert all(0 <= m.free <= m.allocatable for m in per.values())


@SETTINGS
@given(nodes(), pods())
def test_restricted_admission_implies_best_effort(node: NodeState, pod: Pod) -> None:
    """Whatever restricted or single-numa-node admits, best-effort admits with the same
    placements (single-numa-node spells "every node" as no affinity); whatever
    single-numa-node admits is on one NUMA node (or anywhere)."""
    best = admit(_with(node, TopologyPolicy.BEST_EFFORT), pod)
    every = node.nodes()
    for policy in (TopologyPolicy.RESTRICTED, TopologyPolicy.SINGLE_NUMA_NODE):
        d = admit(_with(node, policy), pod)
        if d.admitted:
            assert best.admitted
            got = [p.affinity or every for p in d.placements]
            assert got == [p.affinity or every for p in best.placements]
    single = admit(_with(node, TopologyPolicy.SINGLE_NUMA_NODE), pod)
    if single.admitted:
        assert all(p.affinity is None or len(p.affinity) == 1 for p in single.placements)
    refused = [d for d in (best, single) if d.reason is Reason.TOPOLOGY_AFFINITY]
    assert all(d.shortage is not None for d in refused)


@SETTINGS
@given(nodes(), pods())
def test_aligned_cpus_stay_on_their_numa_node(node: NodeState, pod: Pod) -> None:
    """Under single-numa-node each container's exclusive CPUs sit on its NUMA node."""
    node = _with(node, TopologyPolicy.SINGLE_NUMA_NODE)
    decision, _, shares = assign(node, pod)
    if not decision.admitted:
        return
    numa = {c.id: c.numa for c in node.cpus}
    by_name = {p.container: p.affinity for p in decision.placements}
    for share in shares:
        affinity = by_name.get(share.container, by_name.get(None))
        if affinity is not None and share.cpus:
            assert {numa[c] for c in share.cpus} <= set(affinity)


@settings(max_examples=30, deadline=None)
@given(nodes(), pods())
def test_count_fits_is_repeated_apply(node: NodeState, pod: Pod) -> None:
    """count_fits is 0 exactly when refused, never above the limit, and one more than
    on the node after one pod."""
    n = count_fits(node, pod, 5)
    assert (n == 0) == (not admit(node, pod).admitted)
    assert n <= 5
    if n:
        assert count_fits(apply(node, pod), pod, 4) == n - 1
