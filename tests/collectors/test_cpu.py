"""The CPU collector: pools per NUMA node, exclusive CPUs, one series per CPU."""

from __future__ import annotations

from podres_exporter.collectors import cpu
from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    ContainerAlloc,
    KubeletReading,
    PodAlloc,
    Support,
)
from tests.collectors.support import READING, exposition, node_view

# TRAIN's one exclusive CPU of three allocatable on the support's node (CPUs 0-3).
SMALL = KubeletReading(
    ApiVersion.V1,
    (PodAlloc("ml", "train", (ContainerAlloc("main", cpu_ids=frozenset({1})),)),),
    Allocatable(cpu_ids=frozenset({1, 2, 3})),
    Support.SERVED,
    taken_at=1.0,
)


EXPECTED_CPU = """\
# HELP podres_node_cpus CPUs per NUMA node and pool: exclusive (held by one container), shared_free (allocatable minus all exclusive), reserved (online, not allocatable); the pools add up to the online CPUs.
# TYPE podres_node_cpus gauge
podres_node_cpus{numa_node="0",pool="exclusive"} 1.0
podres_node_cpus{numa_node="0",pool="reserved"} 1.0
podres_node_cpus{numa_node="0",pool="shared_free"} 0.0
podres_node_cpus{numa_node="1",pool="exclusive"} 0.0
podres_node_cpus{numa_node="1",pool="reserved"} 0.0
podres_node_cpus{numa_node="1",pool="shared_free"} 2.0
# HELP podres_node_allocatable_cpus CPUs the kubelet may hand out, per NUMA node (the online CPUs when it reports none).
# TYPE podres_node_allocatable_cpus gauge
podres_node_allocatable_cpus{numa_node="0"} 1.0
podres_node_allocatable_cpus{numa_node="1"} 2.0
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
    assert exposition(cpu.COLLECTOR, node_view(SMALL)) == EXPECTED_CPU


def test_cpu_collector_says_nothing_without_cpu_data() -> None:
    """v1alpha1 carries no CPUs: no CPU family at all, rather than zeros."""
    v1alpha1 = KubeletReading(ApiVersion.V1ALPHA1, READING.pods, None, Support.UNIMPLEMENTED, 1.0)
    assert exposition(cpu.COLLECTOR, node_view(v1alpha1)) == ""
