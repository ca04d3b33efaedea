"""The preferred allocation against the algorithm it replaced (kept here as the
reference): the same choices for the same input, on random inventories of every kind."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from hypothesis import given, settings
from hypothesis import strategies as st

from podres_exporter.deviceplugin.allocate import preferred_allocation
from podres_exporter.deviceplugin.config import DiscoverKind
from podres_exporter.deviceplugin.inventory import Device, Hardware, ResourceInventory, device_id

_SAME_NUMA: Final = 40
_OTHER: Final = 50
_SAME_GPU: Final = 0
_MAX_NUMA_SEARCH: Final = 12
_MAX_STARTS: Final = 32


def _unique(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


# ----------------------------------------------------------- the reference (verbatim)


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


def reference_preferred_allocation(
    inventory: ResourceInventory,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
) -> tuple[str, ...]:
    """The preferred allocation as it was computed before the search over classes."""
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


# --------------------------------------------------------------------- comparison


@st.composite
def inventories(draw: st.DrawFn) -> ResourceInventory:
    """GPUs (some MIG devices sharing a board, a random partial topology), PCI functions
    or device nodes; 0-3 NUMA nodes, replicas, some hardware unhealthy."""
    kind = draw(st.sampled_from([DiscoverKind.NVML, DiscoverKind.PCI, DiscoverKind.DEV]))
    count = draw(st.integers(1, 12))
    replicas = draw(st.sampled_from([1, 1, 2, 3]))
    hardware: list[Hardware] = []
    boards = [f"GPU-{b:04d}" for b in range(draw(st.integers(1, count)))]
    for i in range(count):
        numa = draw(st.sampled_from([(), (0,), (0,), (1,), (1,), (2,), (0, 1)]))
        healthy = draw(st.booleans()) or draw(st.booleans())
        if kind is DiscoverKind.NVML:
            board = draw(st.sampled_from(boards))
            key = f"MIG-{i:04d}" if draw(st.booleans()) else f"GPU-x{i:04d}"
            topo_key = board if key.startswith("MIG") else key
            hardware.append(
                Hardware(key, kind, healthy, None, numa, gpu_uuid=key, topology_key=topo_key)
            )
        elif kind is DiscoverKind.PCI:
            key = f"0000:{0x17 + i // 8:02x}:02.{i % 8}"
            hardware.append(Hardware(key, kind, healthy, None, numa, pci_address=key))
        else:
            hardware.append(Hardware(f"node{i:02d}", kind, healthy, None, numa))
    topo: dict[tuple[str, str], int] = {}
    keys = sorted({h.topology_key for h in hardware if h.topology_key})
    levels = st.sampled_from([-12, -4, 10, 20, 30, 40, 40, 50, None])
    for a, b in itertools.combinations(keys, 2):
        level = draw(levels)
        if level is not None:
            topo[(a, b)] = topo[(b, a)] = level
    devices = [
        Device(device_id(h.key, r), h.key, r, h.healthy, h.numa_nodes)
        for h in hardware
        for r in (range(replicas) if replicas > 1 else [None])
    ]
    return ResourceInventory.of("example.com/r", devices, {h.key: h for h in hardware}, topo)


@st.composite
def requests(draw: st.DrawFn) -> tuple[ResourceInventory, list[str], list[str], int]:
    inv = draw(inventories())
    ids = [d.id for d in inv.devices]
    available = draw(st.lists(st.sampled_from([*ids, "unknown-a", "unknown-b"]), unique=True))
    must = draw(st.lists(st.sampled_from(available), unique=True, max_size=3)) if available else []
    return inv, available, must, draw(st.integers(0, len(available) + 1))


@settings(max_examples=400, deadline=None)
@given(requests())
def test_the_search_over_classes_chooses_as_the_reference_does(
    case: tuple[ResourceInventory, list[str], list[str], int],
) -> None:
    """Grouping interchangeable hardware changes no choice: the same ids as the old
    search, with and without must-include, for every kind."""
    inv, available, must, size = case
    want = reference_preferred_allocation(inv, available, must, size)
    assert preferred_allocation(inv, available, must, size) == want
    assert preferred_allocation(inv, available, must, size) == want  # memoised: the same


def test_sixty_four_interchangeable_functions_choose_as_the_reference_does() -> None:
    """64 VFs on two NUMA nodes (one class each): the lowest ids (of node 0), as before."""
    hardware = [
        Hardware(f"0000:{bus:02x}:02.{i}", DiscoverKind.PCI, numa_nodes=(numa,))
        for bus, numa in ((0x17, 0), (0xAF, 1))
        for i in range(32)
    ]
    devices = [Device(h.key, h.key, None, True, h.numa_nodes) for h in hardware]
    inv = ResourceInventory.of("intel.com/vf", devices, {h.key: h for h in hardware})
    ids = [d.id for d in devices]
    for must in ([], [ids[40]], [ids[3], ids[50]]):
        got = preferred_allocation(inv, ids, must, 8)
        assert got == reference_preferred_allocation(inv, ids, must, 8)
    assert preferred_allocation(inv, ids, [], 8) == tuple(sorted(ids)[:8])


def test_second_replicas_go_to_the_closest_hardware_as_before() -> None:
    """Past one id per hardware, the next replica comes from the hardware closest to the
    others (its own distance not counted), as the reference chooses."""
    hardware = [
        Hardware("0000:17:02.0", DiscoverKind.PCI, numa_nodes=(0,)),
        Hardware("0000:17:02.1", DiscoverKind.PCI, numa_nodes=(0,)),
        Hardware("0000:17:02.2", DiscoverKind.PCI, numa_nodes=()),
    ]
    devices = [
        Device(device_id(h.key, r), h.key, r, True, h.numa_nodes)
        for h in hardware
        for r in range(2)
    ]
    inv = ResourceInventory.of("intel.com/vf", devices, {h.key: h for h in hardware})
    ids = [d.id for d in devices]
    for size in (4, 5):
        want = reference_preferred_allocation(inv, ids, [], size)
        assert preferred_allocation(inv, ids, [], size) == want
    assert "0000:17:02.2::1" not in preferred_allocation(inv, ids, [], 5)
