"""The device rows of ``podres top``: each device id, free or held, with its health and use."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from podres_exporter.core.model import Holder
from podres_exporter.top.rows.samples import (
    DRA_INFO,
    Index,
    by_uuid,
    claim_of,
    dra_device,
    holder_of,
    natural_key,
)


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One device id the kubelet reports, free or held.

    ``state``: ``free``, ``allocated`` or ``allocated_unhealthy`` (from
    ``podres_node_device_info``); ``healthy`` is false for a held device the kubelet no
    longer lists as allocatable, or a GPU that stopped answering (``podres_gpu_healthy``).

    ``dra``: a device of a DRA claim (``podres_container_dynamic_resource_info``): its
    resource is the driver, its id ``pool/device``, ``claims`` the claims using it; only
    held ones are known, as ``allocated``, or ``shared`` when several claims use it. The
    kubelet reports no health or NUMA node for them: ``healthy`` is None.
    """

    node: str
    resource: str
    device_id: str
    numa_node: str
    state: str
    healthy: bool | None
    holders: tuple[Holder, ...] = ()
    physical_id: str | None = None
    util: float | None = None
    mem_used: float | None = None
    mem_total: float | None = None
    dra: bool = False
    claims: tuple[str, ...] = ()


def device_rows(node: str, idx: Index) -> tuple[DeviceRow, ...]:
    """The rows of every device id of ``node``, by resource then id in natural order."""
    state: dict[tuple[str, str], tuple[str, str]] = {}
    for s in idx.get("podres_node_device_info"):
        labels = s.labels
        key = (labels.get("resource", ""), labels.get("device_id", ""))
        state[key] = (labels.get("numa_node", "none"), labels.get("state", ""))
    holders: dict[tuple[str, str], list[Holder]] = {}
    for s in idx.get("podres_container_device_info"):
        labels = s.labels
        key = (labels.get("resource", ""), labels.get("device_id", ""))
        h = holder_of(labels)
        if h is not None:
            held = holders.get(key)
            if held is None:
                holders[key] = [h]
            elif h not in held:
                held.append(h)
        if key not in state:  # without GetAllocatableResources only held devices are known
            state[key] = (labels.get("numa_node", "none"), "allocated")
    # The physical device an id names: a GPU's UUID, a PCI address, a DRM card.
    physical = {
        (s.labels.get("resource", ""), s.labels.get("device_id", "")): (
            s.labels.get("uuid") or s.labels.get("address") or s.labels.get("card") or ""
        )
        for s in idx.get("podres_device_resolution_info")
    }
    gpu_util = by_uuid(idx.get("podres_gpu_utilization_ratio"))
    gpu_used = by_uuid(idx.get("podres_gpu_memory_used_bytes"))
    gpu_total = by_uuid(idx.get("podres_gpu_memory_total_bytes"))
    gpu_healthy = by_uuid(idx.get("podres_gpu_healthy"))
    drm_busy: dict[str, float] = {}
    for s in idx.get("podres_drm_busy_ratio"):
        for label in ("address", "card"):
            if s.labels.get(label):
                drm_busy[s.labels[label]] = s.value
    # By resource, then id in natural order: the ids of each resource sorted on their own
    # (a large node has 50,000).
    ids: dict[str, list[str]] = defaultdict(list)
    for resource, device_id in state:
        ids[resource].append(device_id)
    rows = []
    for key in (
        (resource, device_id)
        for resource in sorted(ids)
        for device_id in sorted(ids[resource], key=natural_key)
    ):
        resource, device_id = key
        numa, st = state[key]
        physical_id = physical.get(key)
        phys = physical_id or device_id
        held = holders.get(key)
        rows.append(
            DeviceRow(
                node,
                resource,
                device_id,
                numa,
                st,
                st != "allocated_unhealthy" and gpu_healthy.get(phys, 1.0) >= 1,
                (tuple(sorted(held)) if len(held) > 1 else (held[0],)) if held else (),
                physical_id,
                gpu_util.get(phys, drm_busy.get(phys)),
                gpu_used.get(phys),
                gpu_total.get(phys),
            )
        )
    return tuple(rows) + _dra_rows(node, idx)


def _dra_rows(node: str, idx: Index) -> tuple[DeviceRow, ...]:
    """The rows of the DRA devices containers of ``node`` use, by driver then id."""
    holders: dict[tuple[str, str], set[Holder]] = defaultdict(set)
    claims: dict[tuple[str, str], set[str]] = defaultdict(set)
    for s in idx.get(DRA_INFO):
        key = dra_device(s.labels)
        h = holder_of(s.labels)
        if key is None or h is None:
            continue
        holders[key].add(h)
        claims[key].add(claim_of(s.labels))
    return tuple(
        DeviceRow(
            node,
            key[0],
            key[1],
            "none",
            "shared" if len(claims[key]) > 1 else "allocated",
            None,
            tuple(sorted(holders[key])),
            dra=True,
            claims=tuple(sorted(claims[key])),
        )
        for key in sorted(holders, key=lambda k: (k[0], natural_key(k[1])))
    )
