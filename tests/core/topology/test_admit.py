"""``admit`` / ``apply`` / ``count_fits``: the scopes, the policies and the managers'
allocation errors, on hand-worked nodes (rules from scope_container.go, scope_pod.go,
scope_none.go, cpumanager policy_static.go, devicemanager manager.go, v1.28)."""

from __future__ import annotations

import pytest

from podres_exporter.core.topology import (
    Container,
    CpuPolicy,
    MemoryPolicy,
    Reason,
    Scope,
    TopologyPolicy,
    admit,
    apply,
    assign,
    count_fits,
)
from tests.core.topology.support import GPU, GiB, guaranteed, node, pod

GPUS = {"g0": frozenset({0}), "g1": frozenset({0}), "g2": frozenset({1}), "g3": frozenset({1})}


def test_single_numa_node_places_cpu_and_gpu_together() -> None:
    """CPUs free on both nodes, GPUs only on node 1: the container lands on node 1."""
    n = node(gpus=GPUS, used_gpus=["g0", "g1"])
    d, after, shares = assign(n, pod(guaranteed(cpu=2, gpu=2)))
    assert d.admitted
    assert d.placements[0].affinity == (1,)
    assert set(shares[0].cpus) <= {4, 5, 6, 7}
    assert set(shares[0].devices[GPU]) == {"g2", "g3"}
    assert after.free_devices[GPU] == frozenset()


def test_fragmented_gpus_rejected_with_topology_affinity_error() -> None:
    """One GPU free per node, a 2-GPU pod: restricted and single-numa-node refuse with
    TopologyAffinityError naming the GPUs short on both nodes; best-effort admits across
    both nodes."""
    for policy in (TopologyPolicy.RESTRICTED, TopologyPolicy.SINGLE_NUMA_NODE):
        d = admit(node(policy=policy, gpus=GPUS, used_gpus=["g0", "g2"]), pod(guaranteed(gpu=2)))
        assert not d.admitted
        assert d.reason is Reason.TOPOLOGY_AFFINITY
        assert d.message == "Resources cannot be allocated with Topology locality"
        assert d.shortage is not None
        assert (d.shortage.resource, d.shortage.numa_nodes) == (GPU, (0, 1))
        assert (d.shortage.requested, d.shortage.available) == (2, 1)
        assert d.shortage.policy is policy
    d = admit(
        node(policy=TopologyPolicy.BEST_EFFORT, gpus=GPUS, used_gpus=["g0", "g2"]),
        pod(guaranteed(gpu=2)),
    )
    assert d.admitted
    assert d.placements[0] == d.placements[0].__class__("c", False, (0, 1), False)


def test_not_enough_devices_at_all_is_unexpected_under_best_effort() -> None:
    """More GPUs than free: best-effort admits the hint, the device manager's Allocate
    fails: UnexpectedAdmissionError with its message; restricted refuses earlier."""
    n = node(policy=TopologyPolicy.BEST_EFFORT, gpus=GPUS)
    d = admit(n, pod(guaranteed(gpu=5)))
    assert d.reason is Reason.UNEXPECTED
    assert "requested number of devices unavailable for nvidia.com/gpu" in d.message
    assert admit(node(gpus=GPUS), pod(guaranteed(gpu=5))).reason is Reason.TOPOLOGY_AFFINITY


def test_policy_none_admits_without_affinity_but_not_beyond_capacity() -> None:
    """scope_none.go: no hints; Allocate still fails when CPUs run out."""
    n = node(policy=TopologyPolicy.NONE)
    d = admit(n, pod(guaranteed(cpu=6)))
    assert d.admitted
    assert d.placements == ()
    d = admit(n, pod(guaranteed(cpu=9)))
    assert d.reason is Reason.UNEXPECTED
    assert "not enough cpus available" in d.message


def test_container_scope_vs_pod_scope() -> None:
    """Two 3-CPU containers on 2x4 CPUs: container scope puts one on each node; pod scope
    needs 6 on one node and single-numa-node refuses."""
    p = pod(guaranteed("a", cpu=3), guaranteed("b", cpu=3))
    d = admit(node(), p)
    assert d.admitted
    assert [x.affinity for x in d.placements] == [(0,), (1,)]
    d = admit(node(scope=Scope.POD), p)
    assert not d.admitted
    assert d.reason is Reason.TOPOLOGY_AFFINITY
    assert d.shortage is not None and d.shortage.resource == "cpu"


def test_pod_scope_single_affinity_for_the_pod() -> None:
    """Pod scope: one placement for the whole pod (container None)."""
    d = admit(node(scope=Scope.POD), pod(guaranteed("a", cpu=2), guaranteed("b", cpu=2)))
    assert d.admitted
    assert [(x.container, x.affinity) for x in d.placements] == [(None, (0,))]


def test_init_container_cpus_are_reused() -> None:
    """updateCPUsToReuse: an app container takes the init container's CPUs again, so
    4 + 4 CPUs fit where only 4 are free."""
    n = node(used=[4, 5, 6, 7])
    p = pod(guaranteed("app", cpu=4), init=[guaranteed("init", cpu=4)])
    d, after, shares = assign(n, p)
    assert d.admitted
    assert shares[0].cpus == shares[1].cpus == (0, 1, 2, 3)
    assert after.free_cpus == frozenset()


def test_pod_scope_counts_max_of_init_and_sum_of_apps() -> None:
    """podGuaranteedCPUs: max(largest init, sum of apps) = 4 fits one node."""
    p = pod(guaranteed("a", cpu=2), guaranteed("b", cpu=2), init=[guaranteed("i", cpu=3)])
    assert admit(node(scope=Scope.POD), p).admitted


def test_burstable_and_fractional_cpus_have_no_cpu_preference() -> None:
    """guaranteedCPUs: fractional CPUs or a non-Guaranteed pod get no exclusive CPUs and
    no CPU hint, so they are admitted whatever the CPUs."""
    n = node(used=range(8))
    half = Container("c", {"cpu": 1500, "memory": GiB}, {"cpu": 1500, "memory": GiB})
    assert admit(n, pod(half)).admitted
    burst = Container("c", {"cpu": 2000, "memory": GiB}, {"cpu": 4000, "memory": GiB})
    assert admit(n, pod(burst)).admitted


def test_full_pcpus_only_smt_alignment_error() -> None:
    """full-pcpus-only: an odd request on SMT-2 is SMTAlignmentError; so is asking more
    than the free CPUs outside the reserved CPUs' cores."""
    n = node(threads=2, reserved=[0], full_pcpus_only=True)
    d = admit(n, pod(guaranteed(cpu=3)))
    assert d.reason is Reason.SMT_ALIGNMENT
    assert d.message == "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
    n = node(
        threads=2,
        reserved=[0],
        used=range(8, 16),
        full_pcpus_only=True,
        policy=TopologyPolicy.NONE,
    )
    d = admit(n, pod(guaranteed(cpu=8)))
    assert d.reason is Reason.SMT_ALIGNMENT
    assert "available physical CPUs = 6" in d.message
    assert admit(n, pod(guaranteed(cpu=6))).admitted


def test_memory_static_pins_and_refuses() -> None:
    """Static memory manager: memory becomes a hinted resource for Guaranteed pods."""
    n = node(memory=MemoryPolicy.STATIC, mem_per_numa=4 * GiB, mem_free={0: GiB})
    d, after, shares = assign(n, pod(guaranteed(cpu=1, mem=2 * GiB)))
    assert d.placements[0].affinity == (1,)
    assert shares[0].memory == {("memory", 1): 2 * GiB}
    assert after.memory["memory"][1].free == 2 * GiB
    assert after.memory_assignments == {1: 1}
    d = admit(n, pod(guaranteed(cpu=1, mem=5 * GiB)))
    assert d.reason is Reason.TOPOLOGY_AFFINITY
    assert d.shortage is not None and d.shortage.resource == "memory"


def test_cpu_policy_none_takes_no_cpus() -> None:
    """CPU manager none: no exclusive CPUs, no CPU hint."""
    n = node(cpu=CpuPolicy.NONE)
    d, after, shares = assign(n, pod(guaranteed(cpu=8)))
    assert d.admitted
    assert shares[0].cpus == ()
    assert after.free_cpus == n.free_cpus


def test_count_fits_and_apply() -> None:
    """count_fits applies the shape repeatedly: 2-CPU + 1-GPU pods on 2x4 CPUs and 4
    GPUs: four fit; the limit caps; a refused pod leaves the node unchanged."""
    n = node(gpus=GPUS)
    shape = pod(guaranteed(cpu=2, gpu=1))
    assert count_fits(n, shape, 10) == 4
    assert count_fits(n, shape, 3) == 3
    big = pod(guaranteed(cpu=5))
    assert apply(n, big) is n
    assert count_fits(n, big, 10) == 0


@pytest.mark.parametrize("policy", list(TopologyPolicy))
def test_devices_without_topology_never_block(policy: TopologyPolicy) -> None:
    """Devices without topology give no preference under every policy."""
    n = node(policy=policy, gpus={"g0": frozenset(), "g1": frozenset()})
    assert admit(n, pod(guaranteed(cpu=2, gpu=2))).admitted


def test_container_scope_init_container_refused_first() -> None:
    """Containers are admitted in order, init containers first: the refusal names the
    init container."""
    p = pod(guaranteed("app", cpu=1), init=[guaranteed("init", cpu=5)])
    d = admit(node(), p)
    assert (d.reason, d.container) == (Reason.TOPOLOGY_AFFINITY, "init")


def test_policy_none_memory_takes_a_non_preferred_default_hint() -> None:
    """Topology policy none hands the memory manager the zero hint (nil, not preferred):
    a pod whose memory only fits across both nodes' free memory is admitted there, not
    refused for want of a preferred default hint (memorymanager Allocate)."""
    n = node(
        policy=TopologyPolicy.NONE,
        memory=MemoryPolicy.STATIC,
        mem_per_numa=4 * GiB,
        mem_free={0: GiB, 1: GiB},
    )
    d, _, shares = assign(n, pod(guaranteed(cpu=1, mem=3 * GiB // 2)))
    assert d.admitted, d.message
    assert shares[0].memory_numa == (0, 1)
