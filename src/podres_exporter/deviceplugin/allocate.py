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
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from podres_exporter.deviceplugin.config import DiscoverKind, ResourceConfig
from podres_exporter.deviceplugin.inventory import Device, Hardware, ResourceInventory
from podres_exporter.errors import AllocationError

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
    named = [
        i if len(i) <= width else f"{i[:width]}…(+{len(i) - width} chars)" for i in ids[:_NAMED_IDS]
    ]
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


def _greedy(
    start: str | None,
    groups: Mapping[str, list[str]],
    used: Mapping[str, int],
    need: int,
    distance: _Distances,
) -> tuple[list[str], int]:
    """Pick ``need`` ids: each step the hardware used least so far, then closest to the
    hardware already chosen, then the lowest key; returns the ids and their spread."""
    counts = dict(used)
    taken = {hw: 0 for hw in groups}
    chosen_hw = [hw for hw, n in counts.items() if n > 0]
    acc = {hw: sum(distance(hw, c) for c in chosen_hw if c != hw) for hw in groups}
    picked: list[str] = []
    order = sorted(groups)
    for step in range(need):
        if step == 0 and start is not None:
            best = start
        else:
            best = min(
                (hw for hw in order if taken[hw] < len(groups[hw])),
                key=lambda hw: (counts.get(hw, 0), acc[hw], hw),
            )
        picked.append(groups[best][taken[best]])
        taken[best] += 1
        if counts.get(best, 0) == 0:
            for hw in order:
                if hw != best:
                    acc[hw] += distance(hw, best)
            chosen_hw.append(best)
        counts[best] = counts.get(best, 0) + 1
    spread = sum(distance(a, b) for a, b in itertools.combinations(sorted(set(chosen_hw)), 2))
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
    best: tuple[tuple[int, int, list[tuple[str, int, str]]], tuple[str, ...]] | None = None
    for pool in _numa_pools(candidates, infos, forced, need):
        groups: dict[str, list[str]] = {}
        for c in pool:
            groups.setdefault(infos[c].hardware, []).append(c)
        starts: list[str | None] = [None]
        if not must and len(groups) <= _MAX_STARTS:
            starts = list(sorted(groups))
        for start in starts:
            picked, spread = _greedy(start, groups, used, need, distance)
            result = tuple(sorted([*must, *picked], key=order))
            reuse = len(result) - len({infos[i].hardware for i in result})
            score = (reuse, spread, [order(i) for i in result])
            if best is None or score < best[0]:
                best = (score, result)
    assert best is not None
    return best[1]
