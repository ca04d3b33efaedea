"""The devices collector: counts per resource, NUMA node and state; who holds what."""

from __future__ import annotations

from podres_exporter.collectors import devices
from tests.collectors.support import READING, exposition, node_view

EXPECTED = """\
# HELP podres_node_devices Devices per resource, NUMA node and state: free (allocatable, held by nobody), allocated (held, allocatable), allocated_unhealthy (held, no longer allocatable); the states add up to every device the kubelet knows.
# TYPE podres_node_devices gauge
podres_node_devices{numa_node="0",resource="nvidia.com/gpu",state="allocated"} 1.0
podres_node_devices{numa_node="0",resource="nvidia.com/gpu",state="allocated_unhealthy"} 0.0
podres_node_devices{numa_node="0",resource="nvidia.com/gpu",state="free"} 0.0
podres_node_devices{numa_node="1",resource="nvidia.com/gpu",state="allocated"} 0.0
podres_node_devices{numa_node="1",resource="nvidia.com/gpu",state="allocated_unhealthy"} 1.0
podres_node_devices{numa_node="1",resource="nvidia.com/gpu",state="free"} 1.0
# HELP podres_node_allocatable_devices Healthy devices the kubelet can hand out, per resource and NUMA node (free + allocated).
# TYPE podres_node_allocatable_devices gauge
podres_node_allocatable_devices{numa_node="0",resource="nvidia.com/gpu"} 1.0
podres_node_allocatable_devices{numa_node="1",resource="nvidia.com/gpu"} 1.0
# HELP podres_node_device_info One series per device id the kubelet reports: free (allocatable, held by nobody), allocated, or allocated_unhealthy (held, no longer allocatable).
# TYPE podres_node_device_info gauge
podres_node_device_info{device_id="GPU-a1",numa_node="0",resource="nvidia.com/gpu",state="allocated"} 1.0
podres_node_device_info{device_id="GPU-b2",numa_node="1",resource="nvidia.com/gpu",state="free"} 1.0
podres_node_device_info{device_id="GPU-c3",numa_node="1",resource="nvidia.com/gpu",state="allocated_unhealthy"} 1.0
# HELP podres_container_device_info One series per device held by a container.
# TYPE podres_container_device_info gauge
podres_container_device_info{container="main",device_id="GPU-a1",namespace="ml",numa_node="0",pod="train",resource="nvidia.com/gpu"} 1.0
podres_container_device_info{container="app",device_id="GPU-c3",namespace="web",numa_node="1",pod="serve",resource="nvidia.com/gpu"} 1.0
"""


def test_devices_collector_exact_text() -> None:
    """A held, a free and a held-but-unhealthy GPU: every state of each node, then each id."""
    assert exposition(devices.COLLECTOR, node_view(READING)) == EXPECTED
