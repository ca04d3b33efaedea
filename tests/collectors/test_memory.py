"""The memory collector: memory-manager memory per NUMA node and per container."""

from __future__ import annotations

from podres_exporter.collectors import memory
from tests.collectors.support import READING, exposition, node_view

EXPECTED = """\
# HELP podres_node_memory_bytes Memory-manager memory per NUMA node, type (memory, hugepages-2Mi, ...) and state: allocated (pinned to containers), free (allocatable minus allocated).
# TYPE podres_node_memory_bytes gauge
podres_node_memory_bytes{memory_type="memory",numa_node="0",state="allocated"} 1.073741824e+09
podres_node_memory_bytes{memory_type="memory",numa_node="0",state="free"} 3.221225472e+09
podres_node_memory_bytes{memory_type="hugepages-1Gi",numa_node="1",state="allocated"} 0.0
podres_node_memory_bytes{memory_type="hugepages-1Gi",numa_node="1",state="free"} 2.147483648e+09
podres_node_memory_bytes{memory_type="memory",numa_node="1",state="allocated"} 0.0
podres_node_memory_bytes{memory_type="memory",numa_node="1",state="free"} 4.294967296e+09
# HELP podres_node_allocatable_memory_bytes Memory-manager memory the kubelet can pin, per NUMA node and type.
# TYPE podres_node_allocatable_memory_bytes gauge
podres_node_allocatable_memory_bytes{memory_type="memory",numa_node="0"} 4.294967296e+09
podres_node_allocatable_memory_bytes{memory_type="hugepages-1Gi",numa_node="1"} 2.147483648e+09
podres_node_allocatable_memory_bytes{memory_type="memory",numa_node="1"} 4.294967296e+09
# HELP podres_container_memory_bytes Memory pinned to a container by the memory manager, per NUMA node and type.
# TYPE podres_container_memory_bytes gauge
podres_container_memory_bytes{container="main",memory_type="memory",namespace="ml",numa_node="0",pod="train"} 1.073741824e+09
"""


def test_memory_collector_exact_text() -> None:
    """1 GiB pinned on node 0 of 4 GiB; node 1 untouched, its hugepages included."""
    assert exposition(memory.COLLECTOR, node_view(READING)) == EXPECTED
