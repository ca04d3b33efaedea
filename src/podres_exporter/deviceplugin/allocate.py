"""Allocate and GetPreferredAllocation, as pure functions of a resource's inventory.

:func:`allocate` checks the ids a container was given and says what the container
gets, as plain data (the servicer turns it into the wire message):

* ``nvml``: ``NVIDIA_VISIBLE_DEVICES`` = the GPU / MIG UUIDs, comma-separated,
  replicas resolved to their device, each named once;
* ``pci``: ``PCIDEVICE_<RESOURCE>`` = the PCI addresses (the SR-IOV device plugin's
  variable: ``intel.com/sriov_vf`` -> ``PCIDEVICE_INTEL_COM_SRIOV_VF``); a function
  bound to ``vfio-pci`` also brings ``/dev/vfio/<iommu group>`` and ``/dev/vfio/vfio``;
* ``netdev``: ``PODRES_NETDEVICES`` = the interface names;
* ``dev``: the device node itself, read-write, at the same path in the container;
* with ``cdi``: the CDI device names ``vendor.com/class=<id>``;
* the resource's ``env`` table last, overriding any of the above.

:func:`preferred_allocation` chooses ``size`` ids from the available ones: the
must-include ids always; then the fewest NUMA nodes that can hold the rest; within
them (trying each such set of nodes), distinct hardware before a second replica of
the same one, and for GPUs the closest set by NVML's pairwise topology (NVLink
first); ties go to the lowest ids.

The greedy search behind it tries each hardware device as the first pick (up to
:data:`_MAX_STARTS` per set of NUMA nodes) and keeps the best result. Each search
steps over classes of interchangeable hardware (functions or device nodes on the same
NUMA nodes; GPUs at the same distances from every other: :func:`_twin_classes`)
rather than over every device, and the GPU twin classes are computed once per
inventory: 64 VFs of two PFs are two classes, not 64 candidates a step. The choices
are those of the search over every device (a test keeps that search as a reference).
"""

from __future__ import annotations

import heapq
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from podres_exporter.core.errors import AllocationError
from podres_exporter.core.printable import cut
from podres_exporter.deviceplugin.config import DiscoverKind, ResourceConfig
from podres_exporter.deviceplugin.inventory import Device, Hardware, ResourceInventory

__all__ = [
    "NETDEVICES_ENV",
    "NVIDIA_ENV",
    "AllocationError",
    "ContainerAllocation",
    "DeviceNode",
    "allocate",
    "check_ids",
    "id_summary",
    "pci_env_name",
    "preferred_allocation",
]

NVIDIA_ENV: Final = "NVIDIA_VISIBLE_DEVICES"
NETDEVICES_ENV: Final = "PODRES_NETDEVICES"
VFIO_CONTAINER: Final = "vfio/vfio"
# Distances used where NVML gives no topology (NVML's levels, lower is closer): the
# same NUMA node is NVML_TOPOLOGY_NODE, anything else NVML_TOPOLOGY_SYSTEM.
_SAME_NUMA: Final = 40
_OTHER: Final = 50
_SAME_GPU: Final = 0  # MIG devices of one board: NVML_TOPOLOGY_INTERNAL
# Above this many NUMA nodes the node-set search is skipped; above this many
# distinct devices the greedy pick starts from the lowest id only.
_MAX_NUMA_SEARCH: Final = 12
_MAX_STARTS: Final = 32
# Ids named in an error or a log line: the first few, each cut to a length (a request's ids
# come from the kubelet, or anyone who can reach the socket, and may be megabytes).
_NAMED_IDS: Final = 4
_ID_CHARS: Final = 64


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A device node for the container (``DeviceSpec``); paths on the host and inside."""

    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    """What one container gets for its devices (``ContainerAllocateResponse``):
    environment, device nodes and CDI names; never mounts or annotations."""

    envs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    devices: tuple[DeviceNode, ...] = ()
    cdi_devices: tuple[str, ...] = ()


def pci_env_name(resource: str) -> str:
    """``intel.com/sriov_vf`` -> ``PCIDEVICE_INTEL_COM_SRIOV_VF``."""
    return "PCIDEVICE_" + re.sub(r"[^A-Za-z0-9]", "_", resource).upper()


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def id_summary(ids: Sequence[str], *, width: int = _ID_CHARS) -> str:
    """The first few ``ids``, each cut to ``width`` characters, and how many more: short
    enough for an error message or a log line whatever the request held.

    ``a, b, c, d and 9996 more``; an id cut shows ``…(+N chars)``.
    """
    named = [cut(i, width) for i in ids[:_NAMED_IDS]]
    more = len(ids) - len(named)
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def check_ids(inventory: ResourceInventory, ids: Sequence[str]) -> tuple[Device, ...]:
    """The advertised devices ``ids`` name; AllocationError naming the unknown ids, else
    the unhealthy ones (the first few: :func:`id_summary`)."""
    unknown = [i for i in _unique(ids) if i not in inventory.by_id]
    if unknown:
        raise AllocationError(
            f"unknown device ids for {inventory.resource}: {id_summary(unknown)}",
            reason="unknown",
        )
    devices = tuple(inventory.by_id[i] for i in _unique(ids))
    unhealthy = [d for d in devices if not d.healthy]
    if unhealthy:
        reasons = []
        for d in unhealthy:
            hw = inventory.hardware.get(d.hardware)
            why = hw.reason if hw is not None and hw.reason else "unhealthy"
            reasons.append(f"{d.id} ({why})")
        raise AllocationError(
            f"unhealthy devices of {inventory.resource}: {id_summary(reasons, width=256)}",
            reason="unhealthy",
        )
    return devices


def allocate(
    resource: ResourceConfig, inventory: ResourceInventory, ids: Sequence[str]
) -> ContainerAllocation:
    """What a container given ``ids`` of ``resource`` gets; AllocationError for bad ids."""
    devices = check_ids(inventory, ids)
    hardware: list[Hardware] = [inventory.hardware[k] for k in _unique(d.hardware for d in devices)]
    envs: dict[str, str] = {}
    nodes: list[DeviceNode] = []
    kind = resource.discover.kind
    if hardware:
        if kind is DiscoverKind.NVML:
            envs[NVIDIA_ENV] = ",".join(h.gpu_uuid or h.key for h in hardware)
        elif kind is DiscoverKind.PCI:
            envs[pci_env_name(resource.name)] = ",".join(h.pci_address or h.key for h in hardware)
            vfio = [h for h in hardware if h.driver == "vfio-pci" and h.iommu_group]
            nodes.extend(_dev_node(f"vfio/{h.iommu_group}") for h in vfio)
            if vfio:
                nodes.append(_dev_node(VFIO_CONTAINER))
        elif kind is DiscoverKind.NETDEV:
            envs[NETDEVICES_ENV] = ",".join(h.interface or h.key for h in hardware)
        else:
            nodes.extend(_dev_node(h.dev_path or h.key) for h in hardware)
    envs.update(resource.env)
    cdi = tuple(f"{resource.cdi}={h.key}" for h in hardware) if resource.cdi else ()
    return ContainerAllocation(
        envs=MappingProxyType(envs),
        devices=tuple(dict.fromkeys(nodes)),
        cdi_devices=cdi,
    )


def _dev_node(relative: str) -> DeviceNode:
    """The node ``/dev/<relative>`` at the same path in the container. The host path is
    the host's ``/dev`` whatever ``--path.dev`` the plugin reads it under."""
    path = f"/dev/{relative}"
    return DeviceNode(container_path=path, host_path=path, permissions="rw")


# ------------------------------------------------------------- preferred allocation


@dataclass(frozen=True, slots=True)
class _Info:
    hardware: str
    replica: int
    numa: frozenset[int]
    topology_key: str | None


def _info(inventory: ResourceInventory, device_id: str) -> _Info:
    device = inventory.by_id.get(device_id)
    if device is None:  # not ours (any more): placed last, on no NUMA node
        return _Info(device_id, -1, frozenset(), None)
    hw = inventory.hardware.get(device.hardware)
    return _Info(
        device.hardware,
        -1 if device.replica is None else device.replica,
        frozenset(device.numa_nodes),
        None if hw is None else hw.topology_key,
    )


class _Distances:
    """Distance between two hardware devices: NVML topology, else NUMA placement."""

    def __init__(self, inventory: ResourceInventory, infos: Mapping[str, _Info]) -> None:
        self._topology = inventory.topology
        self._by_hw: dict[str, _Info] = {}
        for info in infos.values():
            self._by_hw.setdefault(info.hardware, info)
        self._cache: dict[tuple[str, str], int] = {}

    def __call__(self, a: str, b: str) -> int:
        key = (a, b) if a <= b else (b, a)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._compute(a, b)
        return cached

    def _compute(self, a: str, b: str) -> int:
        ia, ib = self._by_hw[a], self._by_hw[b]
        if ia.topology_key is not None and ib.topology_key is not None:
            if ia.topology_key == ib.topology_key:
                return _SAME_GPU
            level = self._topology.get((ia.topology_key, ib.topology_key))
            if level is not None:
                return level
        if ia.numa and ib.numa and ia.numa & ib.numa:
            return _SAME_NUMA
        return _OTHER


def _numa_pools(
    candidates: Sequence[str], infos: Mapping[str, _Info], forced: frozenset[int], need: int
) -> list[list[str]]:
    """For every smallest set of NUMA nodes (always including ``forced``) that can give
    ``need`` devices, its candidates; devices with no NUMA node fit anywhere."""
    nodes = sorted(set().union(*(infos[c].numa for c in candidates)) - forced)
    if len(nodes) + len(forced) > _MAX_NUMA_SEARCH:
        return [list(candidates)]
    for extra in range(len(nodes) + 1):
        pools = []
        for chosen in itertools.combinations(nodes, extra):
            allowed = forced | frozenset(chosen)
            pool = [c for c in candidates if infos[c].numa <= allowed]
            if len(pool) >= need:
                pools.append(pool)
        if pools:
            return pools
    return [list(candidates)]


_TWINS_MEMO: Final = "allocate.twins"


def _twin_classes(inventory: ResourceInventory) -> Mapping[str, int]:
    """Hardware with a GPU topology key -> its twin class: hardware of one class is at
    the same distance from every other hardware (and from each other), so the greedy
    search may treat them as one pool. Computed once per inventory (its ``memo``).

    Hardware without a topology key needs no entry: its distances depend on its NUMA
    nodes alone, so hardware on the same nodes are twins (:func:`_class_key`).
    """
    cached = inventory.memo.get(_TWINS_MEMO)
    if cached is not None:
        return cached  # type: ignore[return-value]  # only this function writes it
    infos: dict[str, _Info] = {}
    for d in inventory.devices:
        if d.hardware not in infos:
            infos[d.hardware] = _info(inventory, d.id)
    keyed = sorted(hw for hw, i in infos.items() if i.topology_key is not None)
    distance = _Distances(inventory, {hw: infos[hw] for hw in keyed})
    classes: dict[str, int] = {}
    reps: list[tuple[str, int | None]] = []  # representative, distance within (None: alone)
    for hw in keyed:
        for index, (rep, within) in enumerate(reps):
            if infos[rep].numa != infos[hw].numa:
                continue
            between = distance(hw, rep)
            if within is not None and between != within:
                continue
            if all(distance(hw, z) == distance(rep, z) for z in keyed if z not in (hw, rep)):
                classes[hw] = index
                reps[index] = (rep, between)
                break
        else:
            classes[hw] = len(reps)
            reps.append((hw, None))
    inventory.memo[_TWINS_MEMO] = classes
    return classes


def _class_key(hw: str, info: _Info, twins: Mapping[str, int]) -> tuple[int, object]:
    """Interchangeable hardware shares a key: the same twin class (GPUs), else the same
    NUMA nodes (functions, device nodes: their distances depend on nothing else)."""
    if info.topology_key is not None and hw in twins:
        return (0, twins[hw])
    if info.topology_key is not None:  # not in the inventory's twins: a class alone
        return (1, hw)
    return (2, tuple(sorted(info.numa)))


@dataclass(slots=True)
class _Search:
    """One pool's greedy search state, over classes of interchangeable hardware.

    The greedy pick of the search (each step the hardware used least so far, then the
    closest to the hardware already chosen, then the lowest key) is the same whichever
    member of a class is asked: members differ only by key and use. So each step
    compares one candidate per class: its member used least, then lowest key.
    """

    groups: Mapping[str, list[str]]
    class_of: Mapping[str, int]
    between: list[list[int]]  # class x class distance (within a class: two members)
    heaps: list[list[tuple[int, str]]]  # per class: (use, key) of members with ids left
    acc: list[int]  # per class: distance sum to the chosen hardware (not counting itself)
    counts: dict[str, int]
    spread: int  # pairwise distance sum of the chosen hardware


def _search(
    groups: Mapping[str, list[str]],
    used: Mapping[str, int],
    by_hw: Mapping[str, _Info],
    twins: Mapping[str, int],
    distance: _Distances,
) -> _Search:
    """The starting state of a pool's search: ``used`` hardware already chosen."""
    keys: dict[tuple[int, object], int] = {}
    class_of: dict[str, int] = {}
    members: list[list[str]] = []
    for hw in sorted(groups):
        index = keys.setdefault(_class_key(hw, by_hw[hw], twins), len(keys))
        if index == len(members):
            members.append([])
        members[index].append(hw)
        class_of[hw] = index
    reps = [m[0] for m in members]
    between = [
        [distance(a, b) if a != b else (distance(m[0], m[1]) if len(m) > 1 else 0) for b in reps]
        for a, m in zip(reps, members, strict=True)
    ]
    chosen = sorted(hw for hw, n in used.items() if n > 0)
    acc = [sum(distance(rep, c) for c in chosen if c not in groups) for rep in reps]
    for c in chosen:
        if c in groups:
            for k, row in enumerate(between):
                acc[k] += row[class_of[c]]
    spread = sum(distance(a, b) for a, b in itertools.combinations(chosen, 2))
    heaps = [sorted((used.get(hw, 0), hw) for hw in m) for m in members]
    return _Search(groups, class_of, between, heaps, acc, dict(used), spread)


def _greedy(start: str | None, base: _Search, need: int) -> tuple[list[str], int]:
    """Pick ``need`` ids from ``base`` (unchanged), ``start`` first; the ids and the
    spread of the chosen hardware (pairwise distance sum)."""
    heaps = [list(h) for h in base.heaps]
    acc = list(base.acc)
    counts = dict(base.counts)
    spread = base.spread
    taken: dict[str, int] = {}
    between, groups, class_of = base.between, base.groups, base.class_of
    picked: list[str] = []
    for step in range(need):
        if step == 0 and start is not None:
            best = class_of[start]
            heap = heaps[best]
            use = counts.get(start, 0)
            heap.remove((use, start))
            heapq.heapify(heap)
            hw = start
        else:
            best, top = -1, (0, 0, "")
            for k, heap in enumerate(heaps):
                if heap:
                    use, hw = heap[0]
                    key = (use, acc[k] - between[k][k] if use else acc[k], hw)
                    if best < 0 or key < top:
                        best, top = k, key
            use, hw = heapq.heappop(heaps[best])
        n = taken.get(hw, 0)
        picked.append(groups[hw][n])
        taken[hw] = n + 1
        if n + 1 < len(groups[hw]):
            heapq.heappush(heaps[best], (use + 1, hw))
        counts[hw] = use + 1
        if use == 0:
            spread += acc[best]
            for k, row in enumerate(between):
                acc[k] += row[best]
    return picked, spread


def preferred_allocation(
    inventory: ResourceInventory,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
) -> tuple[str, ...]:
    """The ids to give a container asking for ``size`` devices (see the module doc).

    The answer holds every must-include id and otherwise only available ones, and
    has ``size`` ids (fewer when fewer are available; never fewer than the
    must-include ones). It does not depend on the order of the inputs.
    """
    must = _unique(must_include)
    pool = sorted(set(available) | set(must))
    infos = {i: _info(inventory, i) for i in pool}

    def order(device_id: str) -> tuple[str, int, str]:
        info = infos[device_id]
        return (info.hardware, info.replica, device_id)

    want = max(len(must), min(max(size, 0), len(pool)))
    need = want - len(must)
    must_set = set(must)
    candidates = sorted((i for i in pool if i not in must_set), key=order)
    if need <= 0:
        return tuple(sorted(must, key=order))
    if need >= len(candidates):
        return tuple(sorted([*must, *candidates], key=order))
    forced = frozenset().union(*(infos[m].numa for m in must))
    used: dict[str, int] = {}
    for m in must:
        used[infos[m].hardware] = used.get(infos[m].hardware, 0) + 1
    distance = _Distances(inventory, infos)
    by_hw: dict[str, _Info] = {}
    for info in infos.values():
        by_hw.setdefault(info.hardware, info)
    twins = _twin_classes(inventory)
    keys = {i: order(i) for i in pool}
    best: tuple[tuple[int, int, list[tuple[str, int, str]]], tuple[str, ...]] | None = None
    for pool in _numa_pools(candidates, infos, forced, need):
        groups: dict[str, list[str]] = {}
        for c in pool:
            groups.setdefault(infos[c].hardware, []).append(c)
        starts: list[str | None] = [None]
        if not must and len(groups) <= _MAX_STARTS:
            starts = list(sorted(groups))
        search = _search(groups, used, by_hw, twins, distance)
        for start in starts:
            picked, spread = _greedy(start, search, need)
            reuse = want - len({infos[i].hardware for i in [*must, *picked]})
            if best is not None and (reuse, spread) > best[0][:2]:
                continue  # worse before the ids are compared: not worth sorting
            ordered = sorted(keys[i] for i in [*must, *picked])
            score = (reuse, spread, ordered)
            if best is None or score < best[0]:
                best = (score, tuple(k[2] for k in ordered))
    assert best is not None
    return best[1]
