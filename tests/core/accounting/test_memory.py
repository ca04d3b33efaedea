"""Pinned memory per NUMA placement and type: allocatable, allocated, free."""

from __future__ import annotations

from podres_exporter.core.accounting import account
from podres_exporter.core.model import Allocatable, ContainerAlloc, MemoryBlock
from tests.core.accounting.support import GiB, pod, reading, topo


def test_memory_free_per_numa_node_and_type() -> None:
    """Free = allocatable - pinned, per node and type; blocks over two nodes split evenly."""
    alloc = Allocatable(
        memory=(
            MemoryBlock("memory", 64 * GiB, (0,)),
            MemoryBlock("memory", 64 * GiB, (1,)),
            MemoryBlock("hugepages-1Gi", 8 * GiB, (0,)),
        )
    )
    r = reading(
        (
            pod(
                "a",
                ContainerAlloc(
                    "c",
                    memory=(
                        MemoryBlock("memory", 4 * GiB, (0,)),
                        MemoryBlock("hugepages-1Gi", 2 * GiB, (0,)),
                    ),
                ),
            ),
            pod("b", ContainerAlloc("c", memory=(MemoryBlock("memory", 10 * GiB, (0, 1)),))),
        ),
        alloc,
    )
    acc = account(r, topo())
    nm = acc.node_memory
    assert nm[("0", "memory", "free")] == 64 * GiB - 4 * GiB - 5 * GiB
    assert nm[("1", "memory", "free")] == 64 * GiB - 5 * GiB
    assert nm[("0", "hugepages-1Gi", "free")] == 6 * GiB
    assert nm[("0,1", "memory", "allocated")] == 10 * GiB
    assert nm[("1", "memory", "allocated")] == 0
    assert acc.anomalies["memory_overcommitted"] == 0
