"""The GPU collector: NVML GPUs and MIG instances with their holders."""

from __future__ import annotations

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors import gpu
from podres_exporter.collectors.base import RenderContext
from podres_exporter.core.join import Joined
from podres_exporter.core.telemetry import CLOCK_EVENT_REASONS, Telemetry
from podres_exporter.core.view import NodeView
from tests.collectors.support import GPU_INVENTORY, GPU_ROWS, GPU_USAGE, exposition, node_view

EXPECTED = """\
# HELP podres_nvml_available 1 when NVML (the NVIDIA driver) answered, 0 when there is none: no GPU data then.
# TYPE podres_nvml_available gauge
podres_nvml_available 1.0
# HELP podres_gpu_info One series per GPU and MIG instance: identity and placement.
# TYPE podres_gpu_info gauge
podres_gpu_info{driver_version="550.54.15",gpu="0",mig_mode="disabled",model="NVIDIA H100 80GB HBM3",numa_node="0",parent_uuid="",pci_bus_id="0000:17:00.0",uuid="GPU-a1"} 1.0
podres_gpu_info{driver_version="550.54.15",gpu="1",mig_mode="enabled",model="NVIDIA H100 80GB HBM3",numa_node="1",parent_uuid="",pci_bus_id="0000:9a:00.0",uuid="GPU-b2"} 1.0
podres_gpu_info{compute_instance="0",driver_version="550.54.15",gpu="1",gpu_instance="9",mig_mode="",model="NVIDIA H100 80GB HBM3 MIG 1g.10gb",numa_node="1",parent_uuid="GPU-b2",pci_bus_id="0000:9a:00.0",uuid="MIG-c3"} 1.0
podres_gpu_info{driver_version="550.54.15",gpu="2",mig_mode="",model="NVIDIA H100 80GB HBM3",numa_node="none",parent_uuid="",pci_bus_id="0000:ca:00.0",uuid="GPU-d4"} 1.0
# HELP podres_gpu_healthy 1 when the device answered NVML in the latest read, 0 when it failed (lost, timed out).
# TYPE podres_gpu_healthy gauge
podres_gpu_healthy{gpu="0",uuid="GPU-a1"} 1.0
podres_gpu_healthy{gpu="1",uuid="GPU-b2"} 1.0
podres_gpu_healthy{compute_instance="0",gpu="1",gpu_instance="9",uuid="MIG-c3"} 1.0
podres_gpu_healthy{gpu="2",uuid="GPU-d4"} 0.0
# HELP podres_gpu_shared 1 when several containers hold the device (time-slicing or MPS replicas): its series then carry no holder and podres_container_device_info lists the holders.
# TYPE podres_gpu_shared gauge
podres_gpu_shared{gpu="0",uuid="GPU-a1"} 0.0
podres_gpu_shared{gpu="1",uuid="GPU-b2"} 0.0
podres_gpu_shared{compute_instance="0",gpu="1",gpu_instance="9",uuid="MIG-c3"} 1.0
podres_gpu_shared{gpu="2",uuid="GPU-d4"} 0.0
# HELP podres_gpu_utilization_ratio Share of time a kernel ran on the GPU (0-1).
# TYPE podres_gpu_utilization_ratio gauge
podres_gpu_utilization_ratio{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 0.5
# HELP podres_gpu_memory_utilization_ratio Share of time device memory was read or written (0-1).
# TYPE podres_gpu_memory_utilization_ratio gauge
podres_gpu_memory_utilization_ratio{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 0.25
# HELP podres_gpu_memory_used_bytes Device memory in use.
# TYPE podres_gpu_memory_used_bytes gauge
podres_gpu_memory_used_bytes{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 1e+09
podres_gpu_memory_used_bytes{compute_instance="0",container="",gpu="1",gpu_instance="9",namespace="",pod="",uuid="MIG-c3"} 5e+08
# HELP podres_gpu_memory_total_bytes Device memory in all.
# TYPE podres_gpu_memory_total_bytes gauge
podres_gpu_memory_total_bytes{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 8e+10
podres_gpu_memory_total_bytes{compute_instance="0",container="",gpu="1",gpu_instance="9",namespace="",pod="",uuid="MIG-c3"} 1e+10
# HELP podres_gpu_power_watts Power draw.
# TYPE podres_gpu_power_watts gauge
podres_gpu_power_watts{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 350.5
podres_gpu_power_watts{container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 90.0
# HELP podres_gpu_power_limit_watts Power limit.
# TYPE podres_gpu_power_limit_watts gauge
podres_gpu_power_limit_watts{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 700.0
podres_gpu_power_limit_watts{container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 700.0
# HELP podres_gpu_temperature_celsius GPU temperature.
# TYPE podres_gpu_temperature_celsius gauge
podres_gpu_temperature_celsius{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 65.0
podres_gpu_temperature_celsius{container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 40.0
# HELP podres_gpu_sm_clock_hertz SM clock.
# TYPE podres_gpu_sm_clock_hertz gauge
podres_gpu_sm_clock_hertz{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 1.98e+09
podres_gpu_sm_clock_hertz{container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 3.45e+08
# HELP podres_gpu_memory_clock_hertz Memory clock.
# TYPE podres_gpu_memory_clock_hertz gauge
podres_gpu_memory_clock_hertz{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 2.619e+09
podres_gpu_memory_clock_hertz{container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 2.619e+09
# HELP podres_gpu_pcie_transmit_bytes_per_second PCIe throughput from the GPU.
# TYPE podres_gpu_pcie_transmit_bytes_per_second gauge
podres_gpu_pcie_transmit_bytes_per_second{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 1.5e+09
podres_gpu_pcie_transmit_bytes_per_second{container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 0.0
# HELP podres_gpu_pcie_receive_bytes_per_second PCIe throughput to the GPU.
# TYPE podres_gpu_pcie_receive_bytes_per_second gauge
podres_gpu_pcie_receive_bytes_per_second{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 250000.0
podres_gpu_pcie_receive_bytes_per_second{container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 0.0
# HELP podres_gpu_remapping_pending 1 when a row remapping waits for a GPU reset.
# TYPE podres_gpu_remapping_pending gauge
podres_gpu_remapping_pending{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 0.0
podres_gpu_remapping_pending{container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 0.0
# HELP podres_gpu_remapping_failed 1 when a row remapping failed.
# TYPE podres_gpu_remapping_failed gauge
podres_gpu_remapping_failed{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 0.0
podres_gpu_remapping_failed{container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 0.0
# HELP podres_gpu_energy_joules_total Energy used since the driver loaded.
# TYPE podres_gpu_energy_joules_total counter
podres_gpu_energy_joules_total{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 123456.5
podres_gpu_energy_joules_total{container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 5000.0
# HELP podres_gpu_ecc_errors_total ECC errors over the GPU's lifetime (aggregate), by type.
# TYPE podres_gpu_ecc_errors_total counter
podres_gpu_ecc_errors_total{container="main",gpu="0",namespace="ml",pod="train",type="corrected",uuid="GPU-a1"} 3.0
podres_gpu_ecc_errors_total{container="",gpu="1",namespace="",pod="",type="corrected",uuid="GPU-b2"} 0.0
podres_gpu_ecc_errors_total{container="main",gpu="0",namespace="ml",pod="train",type="uncorrected",uuid="GPU-a1"} 0.0
podres_gpu_ecc_errors_total{container="",gpu="1",namespace="",pod="",type="uncorrected",uuid="GPU-b2"} 0.0
# HELP podres_gpu_remapped_rows_total Memory rows remapped, by the kind of error that caused it.
# TYPE podres_gpu_remapped_rows_total counter
podres_gpu_remapped_rows_total{cause="correctable",container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 1.0
podres_gpu_remapped_rows_total{cause="correctable",container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 0.0
podres_gpu_remapped_rows_total{cause="uncorrectable",container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 0.0
podres_gpu_remapped_rows_total{cause="uncorrectable",container="",gpu="1",namespace="",pod="",uuid="GPU-b2"} 0.0
# HELP podres_gpu_clock_event_reason 1 for each clock event (throttle) reason active now, 0 for the others.
# TYPE podres_gpu_clock_event_reason gauge
podres_gpu_clock_event_reason{container="main",gpu="0",namespace="ml",pod="train",reason="gpu_idle",uuid="GPU-a1"} 0.0
podres_gpu_clock_event_reason{container="main",gpu="0",namespace="ml",pod="train",reason="applications_clocks_setting",uuid="GPU-a1"} 0.0
podres_gpu_clock_event_reason{container="main",gpu="0",namespace="ml",pod="train",reason="sw_power_cap",uuid="GPU-a1"} 1.0
podres_gpu_clock_event_reason{container="main",gpu="0",namespace="ml",pod="train",reason="hw_slowdown",uuid="GPU-a1"} 0.0
podres_gpu_clock_event_reason{container="main",gpu="0",namespace="ml",pod="train",reason="sync_boost",uuid="GPU-a1"} 0.0
podres_gpu_clock_event_reason{container="main",gpu="0",namespace="ml",pod="train",reason="sw_thermal",uuid="GPU-a1"} 0.0
podres_gpu_clock_event_reason{container="main",gpu="0",namespace="ml",pod="train",reason="hw_thermal",uuid="GPU-a1"} 0.0
podres_gpu_clock_event_reason{container="main",gpu="0",namespace="ml",pod="train",reason="hw_power_brake",uuid="GPU-a1"} 0.0
podres_gpu_clock_event_reason{container="main",gpu="0",namespace="ml",pod="train",reason="display_clocks_setting",uuid="GPU-a1"} 0.0
podres_gpu_clock_event_reason{container="",gpu="1",namespace="",pod="",reason="gpu_idle",uuid="GPU-b2"} 0.0
podres_gpu_clock_event_reason{container="",gpu="1",namespace="",pod="",reason="applications_clocks_setting",uuid="GPU-b2"} 0.0
podres_gpu_clock_event_reason{container="",gpu="1",namespace="",pod="",reason="sw_power_cap",uuid="GPU-b2"} 0.0
podres_gpu_clock_event_reason{container="",gpu="1",namespace="",pod="",reason="hw_slowdown",uuid="GPU-b2"} 0.0
podres_gpu_clock_event_reason{container="",gpu="1",namespace="",pod="",reason="sync_boost",uuid="GPU-b2"} 0.0
podres_gpu_clock_event_reason{container="",gpu="1",namespace="",pod="",reason="sw_thermal",uuid="GPU-b2"} 0.0
podres_gpu_clock_event_reason{container="",gpu="1",namespace="",pod="",reason="hw_thermal",uuid="GPU-b2"} 0.0
podres_gpu_clock_event_reason{container="",gpu="1",namespace="",pod="",reason="hw_power_brake",uuid="GPU-b2"} 0.0
podres_gpu_clock_event_reason{container="",gpu="1",namespace="",pod="",reason="display_clocks_setting",uuid="GPU-b2"} 0.0
# HELP podres_gpu_xid_errors_total XID errors seen since the exporter started, by XID code.
# TYPE podres_gpu_xid_errors_total counter
podres_gpu_xid_errors_total{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1",xid="13"} 2.0
podres_gpu_xid_errors_total{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1",xid="79"} 1.0
# HELP podres_gpu_holder_processes Processes on the GPU per holder; the series with empty holder labels counts processes that belong to no container holding the GPU.
# TYPE podres_gpu_holder_processes gauge
podres_gpu_holder_processes{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 2.0
podres_gpu_holder_processes{container="",gpu="0",namespace="",pod="",uuid="GPU-a1"} 1.0
podres_gpu_holder_processes{compute_instance="0",container="app",gpu="1",gpu_instance="9",namespace="web",pod="serve",uuid="MIG-c3"} 1.0
# HELP podres_gpu_holder_sm_utilization_ratio Per-holder share of SM time from the driver's per-process samples (0-1).
# TYPE podres_gpu_holder_sm_utilization_ratio gauge
podres_gpu_holder_sm_utilization_ratio{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 0.5
# HELP podres_gpu_holder_memory_used_bytes Per-holder device memory of its processes.
# TYPE podres_gpu_holder_memory_used_bytes gauge
podres_gpu_holder_memory_used_bytes{container="main",gpu="0",namespace="ml",pod="train",uuid="GPU-a1"} 1e+09
podres_gpu_holder_memory_used_bytes{compute_instance="0",container="app",gpu="1",gpu_instance="9",namespace="web",pod="serve",uuid="MIG-c3"} 5e+08
"""


def gpu_view(*, gpus: bool = True) -> NodeView:
    return node_view(
        telemetry=Telemetry(gpus=GPU_INVENTORY if gpus else None),
        joined=Joined(gpus=GPU_ROWS, gpu_usage=GPU_USAGE),
    )


def test_gpu_collector_exact_text() -> None:
    """A held GPU, a MIG parent, a shared MIG instance and a lost GPU.

    Shared devices and free ones carry empty holder labels; a field NVML did not give
    has no sample; reasons only for devices that report them.
    """
    assert exposition(gpu.COLLECTOR, gpu_view()) == EXPECTED


def test_clock_event_reasons_follow_the_model() -> None:
    """The reason label takes every short name of the model, in its order, per GPU."""
    families: list[Metric] = list(gpu.COLLECTOR.collect(RenderContext(gpu_view(), "1.2.3")))
    (reasons,) = [f for f in families if f.name == "podres_gpu_clock_event_reason"]
    per_gpu = [s.labels["reason"] for s in reasons.samples if s.labels["uuid"] == "GPU-b2"]
    assert per_gpu == list(CLOCK_EVENT_REASONS)


def test_gpu_collector_says_nothing_before_the_gpu_source_read() -> None:
    assert exposition(gpu.COLLECTOR, gpu_view(gpus=False)) == ""
