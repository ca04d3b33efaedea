"""The device manager: topology hints per resource (devicemanager/topology_hints.go
``GetTopologyHints`` / ``generateDeviceTopologyHints``) and which devices a container
gets (devicemanager/manager.go ``devicesToAllocate`` / ``filterByAffinity``), v1.28."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from podres_exporter.core.topology import masks
from podres_exporter.core.topology.books import Books
from podres_exporter.core.topology.merge import Hint

__all__ = ["allocate_devices", "device_hints"]


def _has_topology(books: Books, resource: str) -> bool:
    """topology_hints.go ``deviceHasTopologyAlignment``: any registered device (any
    health) names a NUMA node."""
    return any(d.numa for d in books.devices.get(resource, {}).values())


def _numa(books: Books, resource: str, device: str) -> frozenset[int]:
    info = books.devices.get(resource, {}).get(device)
    return info.numa if info is not None else frozenset()


def device_hints(books: Books, requests: Mapping[str, int]) -> dict[str, Sequence[Hint] | None]:
    """topology_hints.go ``GetTopologyHints`` for one container (or, under pod scope, the
    pod's per-resource requests): nil for a resource without topology, an empty list
    when free + reusable devices are fewer than requested, else a hint per NUMA mask
    holding enough of them, preferred at the narrowest size that the resource's devices
    of any health could fill (``minAffinitySize``)."""
    out: dict[str, Sequence[Hint] | None] = {}
    nodes = books.topo.nodes
    for resource, requested in requests.items():
        if not _has_topology(books, resource):
            out[resource] = None
            continue
        available = books.free_devices.get(resource, set())
        reusable = books.device_reuse.get(resource, set())
        if len(available | reusable) < requested:
            out[resource] = []
            continue
        every = books.devices.get(resource, {})
        min_size = len(nodes)
        found: list[int] = []
        for mask in masks.iterate(nodes):
            in_mask = sum(1 for d in every.values() if mask & masks.mask_of(d.numa))
            if in_mask >= requested and masks.count(mask) < min_size:
                min_size = masks.count(mask)
            matching = 0
            skip = False
            for d in reusable:
                numa = _numa(books, resource, d)
                if not numa:
                    continue
                if not mask & masks.mask_of(numa):
                    skip = True
                    break
                matching += 1
            if skip:
                continue
            matching += sum(1 for d in available if mask & masks.mask_of(_numa(books, resource, d)))
            if matching >= requested:
                found.append(mask)
        out[resource] = [Hint(m, masks.count(m) == min_size) for m in found]
    return out


def _device_key(books: Books, resource: str, device: str) -> tuple[tuple[int, ...], str]:
    return (tuple(sorted(_numa(books, resource, device))), device)


def allocate_devices(
    books: Books, resource: str, required: int, mask: int | None
) -> list[str] | str:
    """manager.go ``devicesToAllocate``: the pod's reusable (init-container) devices
    first, then the free healthy ones aligned with the hint, then the rest. Returns the
    chosen ids, or the device manager's error text. Which aligned devices are taken is
    the plugin's choice upstream (``GetPreferredAllocation``); here the lowest NUMA
    node, then the lowest id."""
    chosen: list[str] = []
    needed = required
    for d in sorted(books.device_reuse.get(resource, set())):
        if needed <= 0:
            break
        chosen.append(d)
        needed -= 1
    if needed <= 0:
        return chosen
    available = books.free_devices.get(resource, set())
    if len(available) < needed:
        return (
            f"requested number of devices unavailable for {resource}. "
            f"Requested: {needed}, Available: {len(available)}"
        )
    if mask is None or not _has_topology(books, resource):
        aligned: list[str] = []
        rest = sorted(available, key=lambda d: _device_key(books, resource, d))
    else:
        aligned = sorted(
            (d for d in available if mask & masks.mask_of(_numa(books, resource, d))),
            key=lambda d: _device_key(books, resource, d),
        )
        rest = sorted(
            (d for d in available if d not in aligned),
            key=lambda d: (not _numa(books, resource, d), _device_key(books, resource, d)),
        )
    chosen.extend((aligned + rest)[:needed])
    return chosen
