"""The CPU collector: pools per NUMA node, exclusive CPUs, one series per CPU."""

from __future__ import annotations

from types import MappingProxyType

from podres_exporter.collectors.cpu import CpuCollector
from podres_exporter.model import (
    Allocatable,
    ApiVersion,
    ContainerAlloc,
    KubeletReading,
    NodeTopology,
    PodAlloc,
    Snapshot,
    Support,
)
from podres_exporter.view import NodeView
from tests.collectors.support import READING, exposition, node_view


def view() -> NodeView:
    topo = NodeTopology(frozenset(range(4)), MappingProxyType({0: 0, 1: 0, 2: 1, 3: 1}))
    reading = KubeletReading(
        ApiVersion.V1,
        (PodAlloc("ml", "train", (ContainerAlloc("main", cpu_ids=frozenset({1})),)),),
        Allocatable(cpu_ids=frozenset({1, 2, 3})),
        Support.SERVED,
        taken_at=1.0,
    )
    return NodeView.of(Snapshot(1, 1.0, topo, reading, True))


EXPECTED_CPU = """\
# HELP podres_node_cpus CPUs per NUMA node and pool: allocatable, exclusive (held by one container), shared_free (allocatable minus all exclusive), reserved (online, not allocatable).
# TYPE podres_node_cpus gauge
podres_node_cpus{numa_node="0",pool="allocatable"} 1.0
podres_node_cpus{numa_node="0",pool="exclusive"} 1.0
podres_node_cpus{numa_node="0",pool="reserved"} 1.0
podres_node_cpus{numa_node="0",pool="shared_free"} 0.0
podres_node_cpus{numa_node="1",pool="allocatable"} 2.0
podres_node_cpus{numa_node="1",pool="exclusive"} 0.0
podres_node_cpus{numa_node="1",pool="reserved"} 0.0
podres_node_cpus{numa_node="1",pool="shared_free"} 2.0
# HELP podres_cpu_shared_pool_basis 1 for the basis of the shared pool: 'allocatable' (the kubelet reports allocatable CPUs) or 'online' (it reports none: CPU manager policy none, or no GetAllocatableResources; the node's online CPUs are the pool).
# TYPE podres_cpu_shared_pool_basis gauge
podres_cpu_shared_pool_basis{basis="allocatable"} 1.0
podres_cpu_shared_pool_basis{basis="online"} 0.0
# HELP podres_container_exclusive_cpus CPUs held exclusively by a container, per NUMA node.
# TYPE podres_container_exclusive_cpus gauge
podres_container_exclusive_cpus{container="main",namespace="ml",numa_node="0",pod="train"} 1.0
# HELP podres_cpu_assignment_info One series per CPU: its NUMA node, pool and, when exclusive, its holder.
# TYPE podres_cpu_assignment_info gauge
podres_cpu_assignment_info{container="",cpu="0",namespace="",numa_node="0",pod="",pool="reserved"} 1.0
podres_cpu_assignment_info{container="main",cpu="1",namespace="ml",numa_node="0",pod="train",pool="exclusive"} 1.0
podres_cpu_assignment_info{container="",cpu="2",namespace="",numa_node="1",pod="",pool="shared_free"} 1.0
podres_cpu_assignment_info{container="",cpu="3",namespace="",numa_node="1",pod="",pool="shared_free"} 1.0
"""


def test_cpu_collector_exact_text() -> None:
    """The CPU collector renders exactly the expected exposition for a small node."""
    assert exposition(CpuCollector(), view()) == EXPECTED_CPU


def test_cpu_collector_says_nothing_without_cpu_data() -> None:
    """v1alpha1 carries no CPUs: no CPU family at all, rather than zeros."""
    v1alpha1 = KubeletReading(ApiVersion.V1ALPHA1, READING.pods, None, Support.UNIMPLEMENTED, 1.0)
    assert exposition(CpuCollector(), node_view(v1alpha1)) == ""
