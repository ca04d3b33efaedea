"""``from_reading``: the node state rebuilt from a pod-resources reading."""

from __future__ import annotations

from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    ContainerAlloc,
    DeviceRef,
    KubeletReading,
    MemoryBlock,
    NodeTopology,
    PodAlloc,
    Support,
)
from podres_exporter.core.topology import (
    DeviceInfo,
    NodeFacts,
    Policies,
    TopologyPolicy,
    admit,
    from_reading,
)
from tests.core.topology.support import GPU, GiB, guaranteed, pod

TOPO = NodeTopology(frozenset(range(8)), {c: c // 4 for c in range(8)})


def _reading() -> KubeletReading:
    held = ContainerAlloc(
        "c",
        cpu_ids=frozenset({1, 2}),
        devices=(DeviceRef(GPU, "g0", (0,)),),
        memory=(MemoryBlock("memory", 3 * GiB, (0, 1)),),
    )
    alloc = Allocatable(
        cpu_ids=frozenset(range(1, 8)),
        devices=(DeviceRef(GPU, "g1", (0,)), DeviceRef(GPU, "g2", (1,))),
        memory=(MemoryBlock("memory", 2 * GiB, (0,)), MemoryBlock("memory", 2 * GiB, (1,))),
    )
    return KubeletReading(
        ApiVersion.V1, (PodAlloc("ns", "p", (held,)),), alloc, Support.SERVED, 0.0
    )


def test_free_units_are_allocatable_less_held() -> None:
    """Free CPUs, devices and memory are the allocatable ones less what pods hold; the
    reserved CPUs are the online ones that are not allocatable; a held device counts as
    registered; a block over two NUMA nodes fills them in order and forms a group."""
    state = from_reading(_reading(), TOPO, Policies())
    assert state.reserved_cpus == frozenset({0})
    assert state.free_cpus == frozenset({3, 4, 5, 6, 7})
    assert state.free_devices[GPU] == frozenset({"g1", "g2"})
    assert {d.id for d in state.devices[GPU]} == {"g0", "g1", "g2"}
    assert {n: m.free for n, m in state.memory["memory"].items()} == {0: 0, 1: GiB}
    assert state.memory_cells == {0: (0, 1), 1: (0, 1)}
    assert state.memory_assignments == {0: 1, 1: 1}


def test_facts_add_what_the_api_does_not_say() -> None:
    """NodeFacts: an unhealthy free device is invisible to the pod-resources API. With
    GPUs g1 (NUMA 0) and g2 (NUMA 1) alone, a 2-GPU pod needs both nodes and that is
    preferred; knowing the unhealthy g3 on NUMA 1, one node could hold two GPUs on an
    empty node, so the split is not preferred and restricted refuses."""
    alloc = Allocatable(
        cpu_ids=frozenset(range(1, 8)),
        devices=(DeviceRef(GPU, "g1", (0,)), DeviceRef(GPU, "g2", (1,))),
    )
    reading = KubeletReading(ApiVersion.V1, (), alloc, Support.SERVED, 0.0)
    policies = Policies(topology=TopologyPolicy.RESTRICTED)
    shape = pod(guaranteed(cpu=1, gpu=2))
    assert admit(from_reading(reading, TOPO, policies), shape).admitted
    every = {
        GPU: [
            DeviceInfo("g1", frozenset({0})),
            DeviceInfo("g2", frozenset({1})),
            DeviceInfo("g3", frozenset({1}), healthy=False),
        ]
    }
    state = from_reading(reading, TOPO, policies, NodeFacts(registered_devices=every))
    assert state.free_devices[GPU] == frozenset({"g1", "g2"})
    assert not admit(state, shape).admitted
