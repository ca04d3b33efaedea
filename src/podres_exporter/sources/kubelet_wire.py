"""The kubelet's pod-resources messages as our frozen model, within the answer's limits.

Each repeated field is read through a :class:`~podres_exporter.core.limits.Trim`: sliced
at its limit before anything of ours is made from it, so an answer's cost follows the
limits, not what it lists. :class:`PodCache` keeps the converted pods of one answer for
the next. Only :mod:`podres_exporter.sources.kubelet` calls these; tests call them on
messages they build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from podres_exporter.core.limits import (
    CONTAINERS_OVER_LIMIT,
    CPUS_OVER_LIMIT,
    DEVICES_OVER_LIMIT,
    UNLIMITED,
    Trim,
)
from podres_exporter.core.model import (
    Allocatable,
    ClaimDevice,
    ContainerAlloc,
    DeviceRef,
    DynamicResource,
    MemoryBlock,
    NumaNodes,
    PodAlloc,
    device_key_order,
)

# ---------------------------------------------------------------- wire -> model


def _numa(msg: Any) -> NumaNodes:
    """Placement of a message with a ``topology`` field; None when it has none.

    An unset ``topology`` reads as an empty one. Nearly every placement is one node: it
    skips the set and the sort (a large node's answers hold tens of thousands).
    """
    nodes = msg.topology.nodes
    if len(nodes) == 1:
        return (int(nodes[0].ID),)
    if not nodes:
        return None
    return tuple(sorted({int(n.ID) for n in nodes}))


def _merge_numa(a: NumaNodes, b: NumaNodes) -> NumaNodes:
    if a is None:
        return b
    if b is None:
        return a
    return tuple(sorted(set(a) | set(b)))


def devices_from_wire(
    entries: Sequence[Any], trim: Trim | None = None, most: int | None = None
) -> tuple[DeviceRef, ...]:
    """Aggregate ContainerDevices entries into one DeviceRef per (resource, id).

    Modern kubelets send one entry per device and NUMA node (a device on two
    nodes appears twice); older ones group ids per resource. Either way the ids
    are de-duplicated and their NUMA nodes merged. Sorted for stable output.
    At most ``most`` ids (default: the trim's devices per container) are read; an
    entry left out whole counts as one id dropped.
    """
    trim = trim or Trim(UNLIMITED)
    allow = trim.limits.devices if most is None else most
    if len(entries) > allow:
        trim.dropped[DEVICES_OVER_LIMIT] += len(entries) - allow
        entries = entries[:allow]
    merged: dict[tuple[str, str], NumaNodes] = {}
    placed: bool | None = None  # whether the entries have a topology (v1alpha1's have none)
    for entry in entries:
        if placed is None:
            placed = hasattr(entry, "topology")
        numa = _numa(entry) if placed else None
        ids = trim.take(entry.device_ids, allow, DEVICES_OVER_LIMIT)
        allow -= len(ids)
        for device_id in ids:
            key = (entry.resource_name, device_id)
            merged[key] = _merge_numa(merged[key], numa) if key in merged else numa
    return tuple([DeviceRef(r, d, merged[(r, d)]) for r, d in device_key_order(merged)])


def memory_from_wire(blocks: Sequence[Any], trim: Trim | None = None) -> tuple[MemoryBlock, ...]:
    """ContainerMemory messages as MemoryBlocks, sorted by type and placement."""
    trim = trim or Trim(UNLIMITED)
    kept = trim.take(blocks, trim.limits.devices, DEVICES_OVER_LIMIT)
    out = [MemoryBlock(b.memory_type, int(b.size), _numa(b)) for b in kept]
    return tuple(sorted(out, key=lambda m: (m.memory_type, m.numa or (), m.size_bytes)))


def _cpus(ids: Sequence[int], trim: Trim) -> frozenset[int]:
    return frozenset(int(x) for x in trim.take(ids, trim.limits.cpus, CPUS_OVER_LIMIT))


def _dynamic_from_wire(items: Sequence[Any], trim: Trim) -> tuple[DynamicResource, ...]:
    most = trim.limits.devices
    return tuple(
        DynamicResource(
            claim_namespace=d.claim_namespace,
            claim_name=d.claim_name,
            devices=tuple(
                ClaimDevice(
                    driver=c.driver_name,
                    pool=c.pool_name,
                    device=c.device_name,
                    cdi_devices=tuple(
                        x.name for x in trim.take(c.cdi_devices, most, DEVICES_OVER_LIMIT)
                    ),
                    share_id=c.share_id if c.HasField("share_id") else None,
                )
                for c in trim.take(d.claim_resources, most, DEVICES_OVER_LIMIT)
            ),
        )
        for d in trim.take(items, most, DEVICES_OVER_LIMIT)
    )


def _containers(p: Any, trim: Trim) -> Sequence[Any]:
    return trim.take(p.containers, trim.limits.containers, CONTAINERS_OVER_LIMIT)


def pod_from_v1(p: Any, trim: Trim | None = None) -> PodAlloc:
    """A v1 PodResources message as a PodAlloc, within ``trim``'s limits."""
    trim = trim or Trim(UNLIMITED)
    return PodAlloc(
        namespace=p.namespace,
        name=p.name,
        containers=tuple(
            ContainerAlloc(
                name=c.name,
                cpu_ids=_cpus(c.cpu_ids, trim),
                devices=devices_from_wire(c.devices, trim),
                memory=memory_from_wire(c.memory, trim),
                dynamic_resources=_dynamic_from_wire(c.dynamic_resources, trim),
            )
            for c in _containers(p, trim)
        ),
        cpu_ids=_cpus(p.cpu_ids, trim),
        memory=memory_from_wire(p.memory, trim),
    )


def pod_from_v1alpha1(p: Any, trim: Trim | None = None) -> PodAlloc:
    """A v1alpha1 PodResources message (devices only) as a PodAlloc."""
    trim = trim or Trim(UNLIMITED)
    return PodAlloc(
        namespace=p.namespace,
        name=p.name,
        containers=tuple(
            ContainerAlloc(name=c.name, devices=devices_from_wire(c.devices, trim))
            for c in _containers(p, trim)
        ),
    )


def allocatable_from_wire(resp: Any, trim: Trim | None = None) -> Allocatable:
    """An AllocatableResourcesResponse as our Allocatable; its devices are bounded by
    the answer's budget of entries alone (a node's devices are many containers')."""
    trim = trim or Trim(UNLIMITED)
    return Allocatable(
        cpu_ids=_cpus(resp.cpu_ids, trim),
        devices=devices_from_wire(resp.devices, trim, most=trim.limits.entries),
        memory=memory_from_wire(resp.memory, trim),
    )


# ---------------------------------------------------------------- conversion cache


class PodCache:
    """Converted pods kept from one List answer to the next, keyed by each pod message's
    serialised bytes: an unchanged pod costs a serialisation and a dict lookup instead of
    a conversion (most pods of a node do not change between polls). The model objects are
    frozen, so one is safely shared by successive readings. A pod trimmed by the limits is
    not kept (it is converted again, within them, at each answer).

    Only the pods of the latest answer are kept: a pod that left the node leaves the cache
    at the next answer, so memory follows the node's size, never its churn. Not
    thread-safe: its client's owner calls it.
    """

    def __init__(self) -> None:
        self._entries: dict[bytes, tuple[PodAlloc, int]] = {}
        self._convert: Callable[[Any, Trim], PodAlloc] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def convert(
        self,
        messages: Iterable[Any],
        convert: Callable[[Any, Trim], PodAlloc],
        trim: Trim | None = None,
    ) -> tuple[PodAlloc, ...]:
        """``convert`` of each message, reusing the last answer's objects for the same bytes
        (each charged to ``trim`` as its entries).

        Another ``convert`` (the API version changed) starts from an empty cache.
        """
        trim = trim or Trim(UNLIMITED)
        previous = self._entries if convert is self._convert else {}
        current: dict[bytes, tuple[PodAlloc, int]] = {}
        out: list[PodAlloc] = []
        for message in messages:
            key = message.SerializeToString()
            hit = current.get(key) or previous.get(key)
            if hit is not None and hit[1] <= trim.left:
                trim.charge(hit[1], {})
            else:
                left, dropped = trim.left, trim.dropped.total()
                hit = (convert(message, trim), left - trim.left)
                if trim.dropped.total() != dropped:
                    out.append(hit[0])
                    continue
            current[key] = hit
            out.append(hit[0])
        self._entries = current
        self._convert = convert
        return tuple(out)
