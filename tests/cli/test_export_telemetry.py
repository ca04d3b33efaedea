"""Telemetry through the whole exporter: holders, shared devices once, failures contained."""

from __future__ import annotations

import threading
from collections.abc import Callable

from podres_exporter.cli.export import Exporter
from podres_exporter.core.telemetry import GpuInventory
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim import SimKubelet, parse_scenario
from podres_sim.host import AmdGpu, IbPort, InfinibandHca, IntelGpu, write_device_tree
from podres_sim.nvml import FakeNvml
from tests.support import (
    Samples,
    exporter_settings,
    http_get,
    sample,
    scrape,
    select,
    wait_until,
)

MakeSim = Callable[..., SimKubelet]
MakeExporter = Callable[..., Exporter]


def _one(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the one series of ``name`` carrying ``labels`` (None when none)."""
    found = select(samples, name, **labels)
    assert len(found) <= 1, found
    return next(iter(found.values()), None)


def ready(exp: Exporter) -> Samples:
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    return wait_until(lambda: (s := scrape(exp.url)) and select(s, "podres_source_up") and s)


def lbl(key: frozenset[tuple[str, str]]) -> dict[str, str]:
    return dict(key)


def test_gpu_series_carry_holders_and_shared_gpus_once(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """Each GPU has exactly one series per metric; whole GPUs carry their pod, shared ones none."""
    sim = make_sim("demo")
    s = ready(make_exporter(sim))
    uuids = {lbl(k)["uuid"] for k in select(s, "podres_gpu_info")}
    assert len(uuids) >= 10  # whole GPUs, the time-sliced GPU, a MIG parent and its instances
    memory = select(s, "podres_gpu_memory_used_bytes")
    per_uuid = [lbl(k)["uuid"] for k in memory]
    assert sorted(per_uuid) == sorted(set(per_uuid)), "a device is never copied per holder"
    shared = [lbl(k)["uuid"] for k, v in select(s, "podres_gpu_shared").items() if v == 1]
    assert len(shared) == 1
    (shared_row,) = [lbl(k) for k in memory if lbl(k)["uuid"] == shared[0]]
    assert (shared_row["namespace"], shared_row["pod"], shared_row["container"]) == ("", "", "")
    holders = {
        lbl(k)["pod"] for k in select(s, "podres_gpu_holder_sm_utilization_ratio", uuid=shared[0])
    }
    assert len(holders) >= 2, "per-holder usage splits the shared GPU by pod"
    whole = {lbl(k)["pod"] for k in select(s, "podres_gpu_utilization_ratio") if lbl(k)["pod"]}
    assert any(p.startswith("llm-pretrain-") for p in whole)
    migs = [
        lbl(k)
        for k in select(s, "podres_gpu_memory_used_bytes")
        if lbl(k)["uuid"].startswith("MIG-")
    ]
    assert migs and any(m["pod"] for m in migs)


def test_lost_gpu_is_unhealthy_while_the_others_flow(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """A GPU that stops answering is healthy 0; the others keep their values; it recovers."""
    sim = make_sim("demo")
    exp = make_exporter(sim)
    s = ready(exp)
    whole = sorted(lbl(k)["uuid"] for k in select(s, "podres_gpu_info", mig_mode="disabled"))
    lost, other = whole[0], whole[1]
    sim.host.nvml.break_gpu(lost)  # type: ignore[attr-defined]
    s = wait_until(
        lambda: (x := scrape(exp.url)) and _one(x, "podres_gpu_healthy", uuid=lost) == 0 and x
    )
    assert _one(s, "podres_gpu_healthy", uuid=other) == 1
    assert select(s, "podres_gpu_power_watts", uuid=other)
    assert not select(s, "podres_gpu_power_watts", uuid=lost)
    assert sample(s, "podres_collector_success", collector="gpu") == 1
    sim.host.nvml.heal_gpu(lost)  # type: ignore[attr-defined]
    wait_until(lambda: _one(scrape(exp.url), "podres_gpu_healthy", uuid=lost) == 1)


def test_xid_errors_are_counted_per_code(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """An XID event on a GPU shows as podres_gpu_xid_errors_total with its code."""
    sim = make_sim("demo")
    exp = make_exporter(sim)
    s = ready(exp)
    uuid = sorted(lbl(k)["uuid"] for k in select(s, "podres_gpu_info", mig_mode="disabled"))[0]
    sim.host.nvml.emit_xid(uuid, 79)  # type: ignore[attr-defined]
    sim.host.nvml.emit_xid(uuid, 79)  # type: ignore[attr-defined]
    wait_until(
        lambda: (
            sum(
                select(scrape(exp.url), "podres_gpu_xid_errors_total", uuid=uuid, xid="79").values()
            )
            == 2
        )
    )


def test_no_nvidia_driver_is_no_data_then_recovers(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """No driver: nvml_available 0, no GPU series, no failure; a driver loaded later is found."""
    sim = make_sim("minimal")
    fake = FakeNvml(driver_missing=True)
    fake.add_gpu("GPU-11111111-1111-1111-1111-111111111111")
    exp = Exporter(
        exporter_settings(sim),
        gpu_backend=NvmlBackend(fake, init_retry_s=0.1),
    )
    exp.start()
    try:
        s = ready(exp)
        assert sample(s, "podres_nvml_available") == 0
        assert not select(s, "podres_gpu_info")
        assert sample(s, "podres_collector_success", collector="gpu") == 1
        assert sample(s, "podres_source_up", source="gpu") == 1
        fake.load_driver()
        wait_until(lambda: sample(scrape(exp.url), "podres_nvml_available") == 1)
        assert select(scrape(exp.url), "podres_gpu_info")
    finally:
        exp.stop("test")


def test_cpu_busy_and_shared_pool_ratio(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """Exclusive CPUs count busy seconds with their holder; the shared pool gets a busy ratio."""
    sim = make_sim("demo")
    exp = make_exporter(sim)
    ready(exp)
    sim.host.refresh(seconds=10.0)  # type: ignore[attr-defined]

    def busy() -> float:
        return sum(
            select(scrape(exp.url), "podres_cpu_busy_seconds_total", pod="llm-pretrain-0").values()
        )

    wait_until(lambda: busy() > 0)
    s = wait_until(
        lambda: (x := scrape(exp.url)) and select(x, "podres_shared_pool_busy_ratio") and x
    )
    ratios = select(s, "podres_shared_pool_busy_ratio")
    assert {lbl(k)["numa_node"] for k in ratios} == {"0", "1"}
    assert all(0 <= v <= 1 for v in ratios.values())


HCA, AMD, INTEL = "0000:3b:00.0", "0000:c1:00.0", "0000:d0:00.0"
RDMA_SCENARIO = f"""
name = "rdma-and-gpus"
[node]
numa_nodes = 1
cpus_per_numa_node = 8
reserved_cpus = "0"
[[node.devices]]
resource = "rdma/hca"
ids = ["{HCA}"]
numa = 0
[[node.devices]]
resource = "amd.com/gpu"
ids = ["{AMD}"]
numa = 0
[[node.devices]]
resource = "gpu.intel.com/i915"
ids = ["card1-0"]
numa = 0
[[pods]]
namespace = "hpc"
name = "mpi"
[[pods.containers]]
name = "rank"
cpu = 2
memory = "1Gi"
devices = {{ "rdma/hca" = 1, "amd.com/gpu" = 1, "gpu.intel.com/i915" = 1 }}
"""


def test_infiniband_and_drm_devices_with_holders(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """An HCA, an AMD GPU (PCI address) and an Intel GPU (card1-0) are exported with a holder."""
    sim = make_sim(parse_scenario(RDMA_SCENARIO))
    write_device_tree(
        sim.host.sysfs,  # type: ignore[attr-defined]
        [
            InfinibandHca(
                HCA, ports=(IbPort(counters={"port_rcv_data": 1000, "symbol_error": 3}),)
            ),
            AmdGpu(AMD, card="card0", busy_percent=0, vram_used_bytes=2**30),
            IntelGpu(INTEL, card="card1", act_freq_mhz=1300),
        ],
    )
    s = ready(make_exporter(sim))
    who = {"namespace": "hpc", "pod": "mpi", "container": "rank"}
    assert sample(s, "podres_infiniband_port_active", hca="mlx5_0", port="1", **who) == 1
    assert (
        sample(s, "podres_infiniband_port_receive_bytes_total", hca="mlx5_0", port="1", **who)
        == 4000
    )
    assert (
        sample(
            s,
            "podres_infiniband_port_counter_total",
            hca="mlx5_0",
            port="1",
            counter="symbol_error",
            **who,
        )
        == 3
    )
    assert (
        sample(s, "podres_drm_vram_used_bytes", card="card0", address=AMD, driver="amdgpu", **who)
        == 2**30
    )
    assert (
        sample(s, "podres_drm_frequency_hertz", card="card1", address=INTEL, driver="i915", **who)
        == 1.3e9
    )
    (idle,) = select(s, "podres_held_device_idle_seconds", card="card0", address=AMD, **who)
    assert dict(idle)["device_id"] and "device" not in dict(idle)
    assert sample(s, "podres_device_ids_unmatched", resource="rdma/hca") == 0


class HangingBackend:
    """A GPU backend whose reads hang after the first, like a wedged driver call."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.reads = 0

    def read(self) -> GpuInventory:
        self.reads += 1
        if self.reads > 1:
            self.release.wait(30)
        return GpuInventory(available=False)

    def close(self) -> None:
        self.release.set()


def test_hung_source_does_not_stall_kubelet_data(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """A GPU read that hangs marks its source stale; kubelet data and other sources keep moving."""
    sim = make_sim("minimal")
    backend = HangingBackend()
    exp = Exporter(
        exporter_settings(sim, source_timeout_s=0.2),
        gpu_backend=backend,
    )
    exp.start()
    try:
        ready(exp)
        wait_until(lambda: sample(scrape(exp.url), "podres_source_stale", source="gpu") == 1)
        pods = sample(scrape(exp.url), "podres_pods")
        sim.remove("default", "shared")
        wait_until(lambda: sample(scrape(exp.url), "podres_pods") == pods - 1)  # type: ignore[operator]
        s = scrape(exp.url)
        assert sample(s, "podres_source_up", source="sysfs") == 1
        assert sample(s, "podres_source_stale", source="gpu") == 1
        assert backend.reads == 2, "the hung read is not launched again"
    finally:
        backend.release.set()
        exp.stop("test")
