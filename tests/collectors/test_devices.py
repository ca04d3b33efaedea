"""The devices collector: counts per resource, NUMA node and state; who holds what."""

from __future__ import annotations

from podres_exporter.collectors import devices
from podres_exporter.core.join import Joined
from tests.collectors.support import READING, RESOLUTIONS, exposition, node_view

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
# HELP podres_node_device_info One series per device id the kubelet reports: free (allocatable, held by nobody), allocated, or allocated_unhealthy (held, no longer allocatable); with the GPU identity of a GPU or MIG device.
# TYPE podres_node_device_info gauge
podres_node_device_info{device_id="GPU-a1",numa_node="0",resource="nvidia.com/gpu",state="allocated"} 1.0
podres_node_device_info{device_id="GPU-b2",numa_node="1",resource="nvidia.com/gpu",state="free"} 1.0
podres_node_device_info{device_id="GPU-c3",numa_node="1",resource="nvidia.com/gpu",state="allocated_unhealthy"} 1.0
# HELP podres_container_device_info One series per device held by a container, with the GPU identity of a GPU or MIG device.
# TYPE podres_container_device_info gauge
podres_container_device_info{container="main",device_id="GPU-a1",namespace="ml",numa_node="0",pod="train",resource="nvidia.com/gpu"} 1.0
podres_container_device_info{container="app",device_id="GPU-c3",namespace="web",numa_node="1",pod="serve",resource="nvidia.com/gpu"} 1.0
"""


def test_devices_collector_exact_text() -> None:
    """A held, a free and a held-but-unhealthy GPU: every state of each node, then each id."""
    assert exposition(devices.COLLECTOR, node_view(READING)) == EXPECTED


def test_gpu_ids_carry_the_gpu_identity_on_both_info_families() -> None:
    """Once resolved, a GPU id carries uuid and gpu index: one selector finds its holders."""
    view = node_view(READING, joined=Joined(resolutions=RESOLUTIONS))
    text = exposition(devices.COLLECTOR, view)
    a1 = 'gpu="0",namespace="ml",numa_node="0",pod="train"'
    assert (
        'podres_container_device_info{container="main",device_id="GPU-a1",'
        f'{a1},resource="nvidia.com/gpu",uuid="GPU-a1"}} 1.0'
    ) in text
    assert (
        'podres_node_device_info{device_id="GPU-a1",gpu="0",'
        'numa_node="0",resource="nvidia.com/gpu",state="allocated",'
        'uuid="GPU-a1"} 1.0'
    ) in text
    # unmatched, the id alone says its UUID; an id no resolution names has none
    assert 'device_id="GPU-c3",numa_node="1"' in text
    assert 'state="allocated_unhealthy",uuid="GPU-c3"' in text
    # an empty identity label is left out, as Prometheus reads it
    assert 'device_id="GPU-b2",numa_node="1",resource="nvidia.com/gpu",state="free"} 1.0' in text
    assert '=""' not in text
    assert "device=" not in text and "physical_id" not in text
