"""The placement collector: NUMA alignment, idle held devices, device-id resolution."""

from __future__ import annotations

from podres_exporter.collectors import placement
from podres_exporter.core.join import Joined
from tests.collectors.support import IDLE, NUMA_ALIGNED, RESOLUTIONS, exposition, node_view

EXPECTED = """\
# HELP podres_container_numa_aligned 1 when the container's exclusive CPUs, devices and pinned memory sit on the same NUMA node(s), 0 when they straddle.
# TYPE podres_container_numa_aligned gauge
podres_container_numa_aligned{container="main",namespace="ml",pod="train"} 1.0
podres_container_numa_aligned{container="app",namespace="web",pod="serve"} 0.0
# HELP podres_held_device_idle_seconds How long a device held by one container has shown no utilisation (GPU, amdgpu); counted from when the exporter first saw it idle.
# TYPE podres_held_device_idle_seconds gauge
podres_held_device_idle_seconds{container="main",device_id="GPU-a1",gpu="0",namespace="ml",pod="train",resource="nvidia.com/gpu",uuid="GPU-a1"} 60.0
podres_held_device_idle_seconds{address="0000:c3:00.0",card="card1",container="app",device_id="0000:c3:00.0",namespace="web",pod="serve",resource="amd.com/gpu"} 0.0
# HELP podres_device_resolution_info One series per kubelet device id: how it was read (id_kind), the identity of the physical device it names, and whether telemetry was found for it.
# TYPE podres_device_resolution_info gauge
podres_device_resolution_info{device_id="GPU-a1",gpu="0",id_kind="gpu",matched="true",resource="nvidia.com/gpu",uuid="GPU-a1"} 1.0
podres_device_resolution_info{device_id="GPU-c3",id_kind="gpu",matched="false",resource="nvidia.com/gpu",uuid="GPU-c3"} 1.0
podres_device_resolution_info{address="0000:c3:00.0",card="card1",device_id="0000:c3:00.0",id_kind="pci",matched="true",resource="amd.com/gpu"} 1.0
podres_device_resolution_info{device_id="widget-0",id_kind="unknown",matched="false",resource="example.com/widget"} 1.0
# HELP podres_device_ids_unmatched Device ids of a resource that matched no telemetry device (exported as allocation only): an unknown id shape, or hardware no source reads.
# TYPE podres_device_ids_unmatched gauge
podres_device_ids_unmatched{resource="amd.com/gpu"} 0.0
podres_device_ids_unmatched{resource="example.com/widget"} 1.0
podres_device_ids_unmatched{resource="nvidia.com/gpu"} 1.0
"""


def test_placement_collector_exact_text() -> None:
    """Idle time counted to the snapshot (never below 0); unmatched ids per resource, 0 kept."""
    joined = Joined(numa_aligned=NUMA_ALIGNED, idle=IDLE, resolutions=RESOLUTIONS)
    assert exposition(placement.COLLECTOR, node_view(joined=joined)) == EXPECTED
