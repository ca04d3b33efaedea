"""Devices per resource, NUMA placement and state; one row per held device and per id.

States partition every device id the kubelet knows, each id once: free (allocatable
and held by nobody), allocated (held and still allocatable) and allocated_unhealthy
(held but no longer allocatable: the device went unhealthy, or its plugin's stream
dropped, while in use). Allocatable (healthy, as reported) is counted apart:
allocatable = free + allocated. Without an allocatable reading only ``allocated`` is
known (every held device), and only it is reported.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from podres_exporter.core.accounting.holders import holdings, settle
from podres_exporter.core.model import (
    DeviceRef,
    Holder,
    KubeletReading,
    NumaNodes,
    PodAlloc,
    PodLiveness,
    device_key_order,
    numa_label,
)

DEVICE_STATES = ("free", "allocated", "allocated_unhealthy")


@dataclass(frozen=True, slots=True)
class HeldDevice:
    """One device held by one holder."""

    holder: Holder
    resource: str
    device_id: str
    numa: str


@dataclass(frozen=True, slots=True)
class DeviceState:
    """One device id the kubelet reports, with its state.

    ``free``: allocatable and held by nobody; ``allocated``: held (and allocatable,
    or allocatable unknown); ``allocated_unhealthy``: held, no longer allocatable.
    """

    resource: str
    device_id: str
    numa: str
    state: str


def account_devices(
    reading: KubeletReading,
    anomalies: Counter[str],
    liveness: PodLiveness | None = None,
    pod_states: dict[tuple[str, str], str] | None = None,
) -> tuple[
    dict[tuple[str, str, str], int], dict[tuple[str, str], int], list[HeldDevice], list[DeviceState]
]:
    """Device counts per resource, NUMA placement and state; allocatable devices per
    resource and NUMA placement (empty without an allocatable reading); one row per held
    device; one state per device id.

    Written for a large node read from scratch (``podres top --once`` over 50,000
    devices): each device's placement is worked out once, and the sorts compare plain
    strings or small groups rather than every (holder, resource, id) tuple.
    """
    allocatable: dict[tuple[str, str], NumaNodes] = {}
    if reading.allocatable is not None:
        for d in reading.allocatable.devices:
            allocatable[(d.resource, d.device_id)] = d.numa
    first, several = _device_holders(reading.pods, anomalies, liveness, pod_states)
    anomalies["device_held_by_several_containers"] += sum(
        1 for hs in several.values() if len(hs) > 1
    )
    listed = allocatable.keys() | first.keys()
    anomalies["empty_device_id"] += sum(1 for _, dev in listed if not dev)
    anomalies["empty_name"] += sum(1 for res, _ in listed if not res)

    # Each device's NUMA label, once: the allocatable placement, else its first holder's.
    labels: dict[NumaNodes, str] = {}

    def label(nodes: NumaNodes) -> str:
        text = labels.get(nodes)
        if text is None:
            text = labels[nodes] = numa_label(nodes)
        return text

    placement = {key: label(numa) for key, numa in allocatable.items() if numa is not None}
    for key, (_, d) in first.items():
        if key not in placement:
            hs = several.get(key)
            placement[key] = label((d if hs is None else next(iter(hs.values()))).numa)
    for key in allocatable:
        placement.setdefault(key, "none")

    counts: dict[tuple[str, str, str], int] = {}

    def bump(key: tuple[str, str], state: str) -> None:
        k = (key[0], placement[key], state)
        counts[k] = counts.get(k, 0) + 1

    known = reading.allocatable is not None
    for key in first:
        bump(key, "allocated_unhealthy" if known and key not in allocatable else "allocated")
    per_node: dict[tuple[str, str], int] = {}
    for key in allocatable:
        where = (key[0], placement[key])
        per_node[where] = per_node.get(where, 0) + 1
        if key not in first:
            bump(key, "free")
    # Every state of every (resource, placement) seen, zeros included, so that a
    # resource whose devices are all taken shows free 0, not nothing.
    states = DEVICE_STATES if known else ("allocated",)
    for resource, numa in {(r, n) for r, n, _ in counts}:
        for state in states:
            counts.setdefault((resource, numa, state), 0)
        if known:
            per_node.setdefault((resource, numa), 0)

    # One row per (device, holder), in (holder, resource, id) order: grouped by holder,
    # each holder's few devices sorted on their own.
    by_holder: dict[Holder, list[tuple[str, str]]] = defaultdict(list)
    for key, (holder, _) in first.items():
        for h in several.get(key, (holder,)):
            by_holder[h].append(key)
    rows = [
        HeldDevice(holder, res, dev, placement[(res, dev)])
        for holder in sorted(by_holder)
        for res, dev in sorted(by_holder[holder])
    ]
    per_id = [
        DeviceState(
            res,
            dev,
            placement[(res, dev)],
            "free"
            if (res, dev) not in first
            else (
                "allocated_unhealthy" if known and (res, dev) not in allocatable else "allocated"
            ),
        )
        for res, dev in device_key_order(placement)
    ]
    return counts, per_node, rows, per_id


def _device_holders(
    pods: Iterable[PodAlloc],
    anomalies: Counter[str],
    liveness: PodLiveness | None,
    pod_states: dict[tuple[str, str], str] | None,
) -> tuple[
    dict[tuple[str, str], tuple[Holder, DeviceRef]], dict[tuple[str, str], dict[Holder, DeviceRef]]
]:
    """The first holder of each device (with the placement it was listed with), and
    the holders that count of each device several list (each once; see ``settle``)."""
    first: dict[tuple[str, str], tuple[Holder, DeviceRef]] = {}
    several: dict[tuple[str, str], dict[Holder, DeviceRef]] = {}
    for pod in pods:
        for holder, c in holdings(pod):
            for d in c.devices:
                key = (d.resource, d.device_id)
                held = first.get(key)
                if held is None:
                    first[key] = (holder, d)
                elif held[0] != holder:
                    several.setdefault(key, {held[0]: held[1]}).setdefault(holder, d)
    if liveness is not None:
        seen_states = {} if pod_states is None else pod_states
        for key, hs in several.items():
            kept = settle(hs, liveness, seen_states, anomalies)
            several[key] = {h: hs[h] for h in kept}
    return first, several
