"""Device rows: state, health, holders and utilisation."""

from __future__ import annotations

from podres_exporter.core.model import Holder
from podres_exporter.top.rows import build
from tests.top.rows.support import one_node
from tests.top.samples import DEVICES, GPU_A, GPU_S, GPUS, MIG_1, MIG_2, reading


def test_device_rows_state_health_holder_and_utilisation() -> None:
    """Device rows: free or held, health from the state and the GPU, utilisation by physical id."""
    devices = {
        (d.resource, d.device_id): d for d in one_node(build(reading(*GPUS, *DEVICES))).devices
    }
    whole = devices[("nvidia.com/gpu", GPU_A)]
    assert whole.holders == (Holder("ml", "train-0", "trainer"),) and whole.healthy
    assert (whole.util, whole.mem_used, whole.numa_node) == (0.4, 30 * 2**30, "0")
    replica = devices[("nvidia.com/gpu.shared", f"{GPU_S}::2")]
    assert replica.state == "free" and not replica.holders
    assert replica.physical_id == GPU_S and replica.util == 0.12
    unhealthy = devices[("nvidia.com/mig-1g.10gb", MIG_1)]
    assert not unhealthy.healthy and unhealthy.holders and unhealthy.util is None
    lost = devices[("nvidia.com/mig-1g.10gb", MIG_2)]
    assert lost.state == "free" and not lost.healthy, "podres_gpu_healthy 0"
    held_only = devices[("example.com/fpga", "fpga0")]
    assert held_only.state == "allocated" and held_only.holders == (
        Holder("inf", "vllm-b", "vllm"),
    )
    order = [d.device_id for d in one_node(build(reading(*DEVICES))).devices]
    assert order.index("nic2") < order.index("nic10"), "natural order"
