"""Metric samples -> top's rows: headers, containers, devices, busy shares, node grouping."""

from __future__ import annotations

import pytest

from podres_exporter.core.model import Holder
from podres_exporter.top.rows import (
    BUSY_COUNTER,
    BUSY_RATIO,
    CPU_SOURCE_STAMP,
    ContainerRow,
    NodeData,
    Sample,
    TopData,
    advance_baseline,
    build,
    cpu_times_advanced,
    natural_key,
    needs_second_reading,
)
from tests.top.samples import (
    DEVICES,
    GPU_A,
    GPU_S,
    GPUS,
    MIG_1,
    MIG_2,
    NODE,
    TRAINER,
    VLLM_A,
    VLLM_B,
    cpu,
    reading,
    s,
)


def one_node(data: TopData) -> NodeData:
    assert len(data.nodes) == 1
    return data.nodes[0]


def row(data: TopData, pod: str, container: str) -> ContainerRow:
    found = [
        r for n in data.nodes for r in n.containers if (r.pod, r.container) == (pod, container)
    ]
    assert len(found) == 1, found
    return found[0]


def test_header_counts_free_cpus_devices_and_memory_per_numa_node() -> None:
    """The header: free shared CPUs per NUMA node, devices per resource, free memory, kubelet."""
    h = one_node(build(reading(*NODE))).header
    assert h.node == "node-a" and h.kubelet_up is True and h.age_s == 3.5
    assert (h.pods, h.containers) == (3, 4)
    assert [
        (c.numa_node, c.shared_free, c.allocatable, c.exclusive, c.reserved) for c in h.cpus
    ] == [
        ("0", 3, 7, 4, 1),
        ("1", 7, 8, 1, 0),
    ]
    (gpu,) = h.devices
    assert (gpu.resource, gpu.allocatable, gpu.allocated, gpu.unallocated) == (
        "nvidia.com/gpu", 3, 2, 1,
    )  # fmt: skip
    assert gpu.allocated_unhealthy == 1
    # A block pinned across nodes has no free/allocatable series: not a header entry.
    assert [(m.numa_node, m.memory_type, m.free, m.allocatable) for m in h.memory] == [
        ("0", "memory", 48 * 2**30, 64 * 2**30),
        ("0", "hugepages-1Gi", 2 * 2**30, 8 * 2**30),
    ]


def test_header_without_allocatable_devices_and_kubelet_down() -> None:
    """Only held devices known (no GetAllocatableResources) and a kubelet that is down."""
    h = one_node(
        build(
            reading(
                s("podres_kubelet_up", 0),
                s(
                    "podres_node_devices",
                    2,
                    resource="x.io/dev",
                    numa_node="none",
                    state="allocated",
                ),
            )
        )
    ).header
    assert h.kubelet_up is False and h.age_s is None and h.pods is None
    assert (h.devices[0].allocatable, h.devices[0].unallocated, h.devices[0].allocated) == (
        None, None, 2,
    )  # fmt: skip


def test_container_row_cpus_numa_alignment_devices_and_memory() -> None:
    """A container's exclusive CPUs as ranges, its NUMA nodes, alignment, devices, memory."""
    data = build(
        reading(
            *NODE,
            s("podres_container_device_info", 1, resource="nvidia.com/gpu", device_id=GPU_A,
              numa_node="0", **TRAINER),
            s("podres_container_memory_bytes", 2**30, numa_node="0", memory_type="memory",
              **TRAINER),
            s("podres_container_memory_bytes", 2**30, numa_node="0", memory_type="hugepages-1Gi",
              **TRAINER),
            s("podres_container_numa_aligned", 0, **TRAINER),
        )
    )  # fmt: skip
    r = row(data, "train-0", "trainer")
    assert r.cpulist == "4-7,12" and r.cpus == (4, 5, 6, 7, 12)
    assert r.numa_nodes == ("0", "1") and r.aligned is False
    assert r.device_counts() == (("nvidia.com/gpu", 1),)
    assert dict(r.memory) == {"memory": 2**30, "hugepages-1Gi": 2**30}
    assert r.busy is None, "one reading: no busy share"


def busy(
    value: float, c: int, stamp: float | None, holder: dict[str, str] = TRAINER
) -> list[Sample]:
    out = [s(BUSY_COUNTER, value, cpu=str(c), numa_node="0", **holder)]
    if stamp is not None:
        out.append(s(CPU_SOURCE_STAMP, stamp, source="cpu"))
    return out


@pytest.mark.parametrize(
    ("before", "after", "at", "expected"),
    [
        # The rise over the time between the two CPU-time reads (the stamps), not between ours.
        ((10.0, 1000.0), (10.5, 1002.0), (0.0, 0.1), 0.25),
        # No stamps: over the time between the two readings.
        ((10.0, None), (10.5, None), (0.0, 2.0), 0.25),
        # The exporter did not read CPU times again: nothing known.
        ((10.0, 1000.0), (10.0, 1000.0), (0.0, 1.0), None),
        # A counter that went back (another holder, a restart): nothing known.
        ((10.0, 1000.0), (2.0, 1001.0), (0.0, 1.0), None),
        # Never above 100%.
        ((10.0, 1000.0), (13.0, 1001.0), (0.0, 1.0), 1.0),
    ],
)
def test_busy_share_from_two_readings(
    before: tuple[float, float | None],
    after: tuple[float, float | None],
    at: tuple[float, float],
    expected: float | None,
) -> None:
    """BUSY is the rise of podres_cpu_busy_seconds_total over the time between CPU-time reads."""
    first = reading(cpu(4, "0", "exclusive", TRAINER), *busy(before[0], 4, before[1]), at=at[0])
    second = reading(cpu(4, "0", "exclusive", TRAINER), *busy(after[0], 4, after[1]), at=at[1])
    assert row(build(second, first), "train-0", "trainer").busy == expected


def test_busy_share_is_the_mean_of_the_containers_cpus_or_a_source_rate() -> None:
    """Several CPUs average; a rate the source computed (Prometheus rate()) is used as is."""
    cpus = [cpu(4, "0", "exclusive", TRAINER), cpu(5, "0", "exclusive", TRAINER)]
    first = reading(*cpus, *busy(0, 4, 1.0), *busy(0, 5, None), at=0)
    second = reading(*cpus, *busy(1.0, 4, 3.0), *busy(0.0, 5, None), at=2)
    assert row(build(second, first), "train-0", "trainer").busy == 0.25
    rated = reading(
        *cpus, s(BUSY_RATIO, 0.5, cpu="4", **TRAINER), s(BUSY_RATIO, 0.7, cpu="5", **TRAINER)
    )
    assert row(build(rated), "train-0", "trainer").busy == pytest.approx(0.6)
    assert not needs_second_reading(rated) and needs_second_reading(second)


def test_baseline_moves_only_when_cpu_times_were_read_again() -> None:
    """An exporter that has not polled serves the same counters: the older baseline stays."""
    r1 = reading(*busy(1, 4, 10.0), at=1)
    r2 = reading(*busy(2, 4, 20.0), at=2)
    r3 = reading(*busy(2, 4, 20.0), at=3)  # same poll of the exporter as r2
    assert cpu_times_advanced(r1, r2) and not cpu_times_advanced(r2, r3)
    assert advance_baseline(None, None, r1) is None
    assert advance_baseline(None, r1, r2) is r1
    assert advance_baseline(r1, r2, r3) is r1
    no_stamps = reading(s("podres_pods", 1), at=4)
    assert advance_baseline(r1, r3, no_stamps) is r3


@pytest.mark.parametrize(
    ("holder", "util", "used", "total", "shared"),
    [
        # Whole GPU (its own series, not the holder share) plus a MIG instance (memory only).
        (TRAINER, 0.4, 35 * 2**30, 90 * 2**30, False),
        # Shares of a shared GPU: SM share and memory of its processes, the GPU's total.
        (VLLM_A, 0.07, 18 * 2**30, 80 * 2**30, True),
        (VLLM_B, None, 14 * 2**30, 80 * 2**30, True),
    ],
)
def test_gpu_columns_whole_shared_and_mig(
    holder: dict[str, str], util: float | None, used: float, total: float, shared: bool
) -> None:
    """GPU% and GPU MEM: holder-labelled series, or the holder's share of a shared GPU."""
    r = row(build(reading(*GPUS, *DEVICES)), holder["pod"], holder["container"])
    assert (r.gpu_util, r.gpu_mem_used, r.gpu_mem_total, r.gpu_shared) == (
        util, used, total, shared,
    )  # fmt: skip


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


def test_samples_group_by_node_label_then_instance() -> None:
    """Prometheus samples: one node per node label, else per instance; none of either: origin."""
    data = build(
        reading(
            s("podres_kubelet_up", 1, instance="10.0.0.1:9842", job="podres"),
            s("podres_kubelet_up", 0, instance="10.0.0.2:9842", job="podres", node="gpu-b"),
            cpu(3, "0", "exclusive", {**TRAINER, "instance": "10.0.0.1:9842"}),
            cpu(3, "0", "exclusive", {**VLLM_A, "instance": "10.0.0.2:9842", "node": "gpu-b"}),
            s("podres_pods", 1),
            origin="prom:9090",
        )
    )
    assert [n.header.node for n in data.nodes] == ["10.0.0.1:9842", "gpu-b", "prom:9090"]
    a, b, _ = data.nodes
    assert a.header.kubelet_up is True and b.header.kubelet_up is False
    assert [(r.node, r.pod) for r in a.containers] == [("10.0.0.1:9842", "train-0")]
    assert [(r.node, r.pod) for r in b.containers] == [("gpu-b", "vllm-a")]


def test_natural_key_orders_numbered_names() -> None:
    """kvm2 sorts before kvm10; other ids sort as text."""
    ids = ["kvm10", "kvm2", "GPU-b", "GPU-a", "0000:af:02.1", "0000:af:02.0"]
    assert sorted(ids, key=natural_key) == [
        "0000:af:02.0", "0000:af:02.1", "GPU-a", "GPU-b", "kvm2", "kvm10",
    ]  # fmt: skip
