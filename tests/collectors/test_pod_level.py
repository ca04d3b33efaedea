"""Pod-level resources in the cpu and memory collectors: the pod's private shared pool."""

from __future__ import annotations

from podres_exporter.collectors import cpu, memory
from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    ContainerAlloc,
    KubeletReading,
    MemoryBlock,
    PodAlloc,
    Support,
)
from tests.collectors.support import exposition, node_view

GiB = 2**30

# A pod-scoped pod on the support's node (CPUs 0-1 on NUMA 0, 2-3 on NUMA 1): pod-level
# CPUs 1-3, CPU 1 its "db" container's; pod-level memory 3Gi, 2Gi pinned to "db".
SCOPED = KubeletReading(
    ApiVersion.V1,
    (
        PodAlloc(
            "data",
            "pg-0",
            (
                ContainerAlloc(
                    "db", cpu_ids=frozenset({1}), memory=(MemoryBlock("memory", 2 * GiB, (0,)),)
                ),
                ContainerAlloc("exporter"),
            ),
            cpu_ids=frozenset({1, 2, 3}),
            memory=(MemoryBlock("memory", 3 * GiB, (0,)),),
        ),
    ),
    Allocatable(cpu_ids=frozenset({1, 2, 3}), memory=(MemoryBlock("memory", 8 * GiB, (0,)),)),
    Support.SERVED,
    taken_at=1.0,
)

POOL_CPUS = """\
# HELP podres_pod_shared_pool_cpus CPUs of a pod's private shared pool (pod-level CPUs no container of the pod holds exclusively), per NUMA node of the pod-level set; only pods with one.
# TYPE podres_pod_shared_pool_cpus gauge
podres_pod_shared_pool_cpus{namespace="data",numa_node="0",pod="pg-0"} 0.0
podres_pod_shared_pool_cpus{namespace="data",numa_node="1",pod="pg-0"} 2.0
"""

POOL_MEMORY = """\
# HELP podres_pod_shared_pool_memory_bytes Pod-level memory no container of the pod claims (the pod's private shared pool), per NUMA placement and type; only pods with pod-level memory.
# TYPE podres_pod_shared_pool_memory_bytes gauge
podres_pod_shared_pool_memory_bytes{memory_type="memory",namespace="data",numa_node="0",pod="pg-0"} 1.073741824e+09
"""


def test_cpu_collector_pod_pool_and_holders() -> None:
    """The pool per NUMA node; CPU 1 is db's, 2-3 the pod's own; nothing is shared_free."""
    text = exposition(cpu.COLLECTOR, node_view(SCOPED))
    assert POOL_CPUS in text
    assert (
        'podres_container_exclusive_cpus{container="",namespace="data",numa_node="1",pod="pg-0"} 2.0'
        in text
    )
    assert (
        'podres_container_exclusive_cpus{container="db",namespace="data",numa_node="0",pod="pg-0"} 1.0'
        in text
    )
    assert 'podres_node_cpus{numa_node="1",pool="shared_free"} 0.0' in text


def test_memory_collector_pod_pool_counted_once() -> None:
    """3Gi allocated (not 5Gi): db's 2Gi, the pod's remaining 1Gi."""
    text = exposition(memory.COLLECTOR, node_view(SCOPED))
    assert POOL_MEMORY in text
    assert (
        'podres_node_memory_bytes{memory_type="memory",numa_node="0",state="allocated"} '
        "3.221225472e+09" in text
    )


def test_no_pod_level_fields_no_pool_families() -> None:
    """Without pod-level fields the pool families are absent (not empty), as before."""
    plain = KubeletReading(
        ApiVersion.V1,
        (PodAlloc("ml", "t", (ContainerAlloc("c", cpu_ids=frozenset({1})),)),),
        Allocatable(cpu_ids=frozenset({1, 2, 3})),
        Support.SERVED,
        taken_at=1.0,
    )
    assert "podres_pod_shared_pool" not in exposition(cpu.COLLECTOR, node_view(plain))
    assert "podres_pod_shared_pool" not in exposition(memory.COLLECTOR, node_view(plain))
