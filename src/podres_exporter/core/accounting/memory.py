"""Pinned memory per NUMA placement, type and state, and per holder.

Allocated and free, and allocatable apart from them (allocatable = allocated + free per
type over the node when nothing is overcommitted, and per NUMA node where no block spans
nodes). A block pinned to several NUMA nodes is labelled with all of them (``"0,1"``)
and, for the free computation, split evenly across them.
Pod-level memory works as pod-level CPUs do, per NUMA placement and type: the part no
container claims is held by the pod (holder container ``""``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from podres_exporter.core.model import (
    Holder,
    KubeletReading,
    MemoryBlock,
    NumaNodes,
    PodAlloc,
    numa_label,
)

MEMORY_STATES = ("allocated", "free")


@dataclass(frozen=True, slots=True)
class HeldMemory:
    """Pinned memory of one type held by one holder on one NUMA placement."""

    holder: Holder
    memory_type: str
    numa: str
    size_bytes: int


def pod_memory_left(pod: PodAlloc) -> tuple[MemoryBlock, ...]:
    """The pod-level memory no container of ``pod`` claims, per type and placement."""
    if not pod.memory:
        return ()
    claimed: Counter[tuple[str, NumaNodes]] = Counter()
    for c in pod.containers:
        for b in c.memory:
            claimed[(b.memory_type, b.numa)] += b.size_bytes
    total: Counter[tuple[str, NumaNodes]] = Counter()
    for b in pod.memory:
        total[(b.memory_type, b.numa)] += b.size_bytes
    return tuple(
        MemoryBlock(mtype, max(size - claimed.get((mtype, numa), 0), 0), numa)
        for (mtype, numa), size in total.items()
    )


def _memory_holdings(pod: PodAlloc) -> Iterator[tuple[Holder, tuple[MemoryBlock, ...]]]:
    """Each container's pinned memory; the pod's own unclaimed pod-level memory as ``""``."""
    for c in pod.containers:
        yield Holder(pod.namespace, pod.name, c.name), c.memory
    left = tuple(b for b in pod_memory_left(pod) if b.size_bytes)
    if left:
        yield Holder(pod.namespace, pod.name, ""), left


def _split(block: MemoryBlock) -> Iterator[tuple[str, int]]:
    """A block's bytes per single NUMA node (even split, remainder to the first)."""
    if block.numa is None or len(block.numa) <= 1:
        yield numa_label(block.numa), block.size_bytes
        return
    share, rest = divmod(block.size_bytes, len(block.numa))
    for i, node in enumerate(block.numa):
        yield str(node), share + (rest if i == 0 else 0)


def account_memory(
    reading: KubeletReading, anomalies: Counter[str]
) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, str], int], list[HeldMemory]]:
    """Memory per NUMA placement, type and state; allocatable memory per NUMA placement
    and type; one row per holder, placement and type."""
    counts: dict[tuple[str, str, str], int] = {}
    allocatable: Counter[tuple[str, str]] = Counter()
    if reading.allocatable is not None:
        for b in reading.allocatable.memory:
            allocatable[(numa_label(b.numa), b.memory_type)] += b.size_bytes
    allocated: Counter[tuple[str, str]] = Counter()
    used_per_node: Counter[tuple[str, str]] = Counter()
    held: Counter[tuple[Holder, str, str]] = Counter()
    for pod in reading.pods:
        for holder, blocks in _memory_holdings(pod):
            for b in blocks:
                label = numa_label(b.numa)
                allocated[(label, b.memory_type)] += b.size_bytes
                held[(holder, b.memory_type, label)] += b.size_bytes
                for node, size in _split(b):
                    used_per_node[(node, b.memory_type)] += size
    for (numa, mtype), size in allocatable.items():
        free = size - used_per_node.get((numa, mtype), 0)
        if free < 0:
            anomalies["memory_overcommitted"] += 1
        counts[(numa, mtype, "free")] = max(free, 0)
        counts[(numa, mtype, "allocated")] = 0
    for (numa, mtype), size in allocated.items():
        counts[(numa, mtype, "allocated")] = size
    rows = [HeldMemory(h, t, n, v) for (h, t, n), v in sorted(held.items())]
    return counts, dict(allocatable), rows
