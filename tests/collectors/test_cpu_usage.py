"""The CPU usage collector: busy time of exclusive CPUs, the shared pool's busy ratio."""

from __future__ import annotations

from podres_exporter.collectors import cpu_usage
from podres_exporter.core.join import CpuBusy, Joined
from tests.collectors.support import SHARED_POOL_BUSY_RATIO, TRAIN, exposition, node_view

# CPU 2 has been read once only: no busy share yet.
CPU_BUSY = (CpuBusy(1, "0", TRAIN, 12345.5, 0.75), CpuBusy(2, "0", TRAIN, 10.0))

EXPECTED = """\
# HELP podres_cpu_busy_seconds_total Busy time (all but idle and iowait) of each exclusively held CPU, with its holder.
# TYPE podres_cpu_busy_seconds_total counter
podres_cpu_busy_seconds_total{container="main",cpu="1",namespace="ml",numa_node="0",pod="train"} 12345.5
podres_cpu_busy_seconds_total{container="main",cpu="2",namespace="ml",numa_node="0",pod="train"} 10.0
# HELP podres_cpu_busy_ratio Busy share (0-1) of each exclusively held CPU between the last two reads of the CPU times, with its holder.
# TYPE podres_cpu_busy_ratio gauge
podres_cpu_busy_ratio{container="main",cpu="1",namespace="ml",numa_node="0",pod="train"} 0.75
# HELP podres_shared_pool_busy_ratio Busy share of the shared-pool CPUs of a NUMA node between the last two polls (0-1): contention of every container without exclusive CPUs.
# TYPE podres_shared_pool_busy_ratio gauge
podres_shared_pool_busy_ratio{numa_node="0"} 0.5
podres_shared_pool_busy_ratio{numa_node="1"} 0.25
"""


def test_cpu_usage_collector_exact_text() -> None:
    """The held CPUs with their holder, busy time and (once read twice) busy share; the
    shared pool's ratio per NUMA node, sorted."""
    joined = Joined(cpu_busy=CPU_BUSY, shared_pool_busy_ratio=SHARED_POOL_BUSY_RATIO)
    assert exposition(cpu_usage.COLLECTOR, node_view(joined=joined)) == EXPECTED
