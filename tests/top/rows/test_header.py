"""A node's header: free CPUs, devices and memory per NUMA node, and the kubelet's state."""

from __future__ import annotations

from podres_exporter.top.rows import build
from tests.top.rows.support import one_node
from tests.top.samples import NODE, reading, s


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
