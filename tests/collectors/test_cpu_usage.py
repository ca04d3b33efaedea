"""The CPU usage collector: busy time of exclusive CPUs, the shared pool's busy ratio."""

from __future__ import annotations

from podres_exporter.collectors import cpu_usage
from podres_exporter.join import Joined
from tests.collectors.support import CPU_BUSY, SHARED_POOL_BUSY_RATIO, exposition, node_view

EXPECTED = """\
# HELP podres_cpu_busy_seconds_total Busy time (all but idle and iowait) of each exclusively held CPU, with its holder.
# TYPE podres_cpu_busy_seconds_total counter
podres_cpu_busy_seconds_total{container="main",cpu="1",namespace="ml",numa_node="0",pod="train"} 12345.5
# HELP podres_shared_pool_busy_ratio Busy share of the shared-pool CPUs of a NUMA node between the last two polls (0-1): contention of every container without exclusive CPUs.
# TYPE podres_shared_pool_busy_ratio gauge
podres_shared_pool_busy_ratio{numa_node="0"} 0.5
podres_shared_pool_busy_ratio{numa_node="1"} 0.25
"""


def test_cpu_usage_collector_exact_text() -> None:
    """The held CPU with its holder; the shared pool's ratio per NUMA node, sorted."""
    joined = Joined(cpu_busy=CPU_BUSY, shared_pool_busy_ratio=SHARED_POOL_BUSY_RATIO)
    assert exposition(cpu_usage.COLLECTOR, node_view(joined=joined)) == EXPECTED
