"""NUMA masks as integers, with the order the Topology Manager gives them
(topologymanager/bitmask/bitmask.go and numa_info.go, v1.28)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping

__all__ = ["bits", "closest", "count", "iterate", "mask_of", "narrower", "narrowest"]


def mask_of(nodes: Iterable[int]) -> int:
    """The mask with the given NUMA node bits set."""
    m = 0
    for n in nodes:
        m |= 1 << n
    return m


def bits(mask: int) -> tuple[int, ...]:
    """The NUMA node ids set in ``mask``, ascending (bitmask.go ``GetBits``)."""
    return tuple(i for i in range(mask.bit_length()) if mask >> i & 1)


def count(mask: int) -> int:
    """How many NUMA nodes ``mask`` holds (bitmask.go ``Count``)."""
    return mask.bit_count()


def iterate(nodes: Iterable[int]) -> Iterator[int]:
    """Every non-empty mask over ``nodes``: by size, then in combination order
    (bitmask.go ``IterateBitMasks``)."""
    ordered = sorted(nodes)
    for size in range(1, len(ordered) + 1):
        for combo in itertools.combinations(ordered, size):
            yield mask_of(combo)


def narrower(a: int, b: int) -> bool:
    """``a`` is narrower than ``b``: fewer bits, or as many and a smaller integer
    (bitmask.go ``IsNarrowerThan`` / ``IsLessThan``)."""
    if count(a) == count(b):
        return a < b
    return count(a) < count(b)


def narrowest(a: int, b: int) -> int:
    """numa_info.go ``Narrowest``."""
    return a if narrower(a, b) else b


def _average_distance(mask: int, distances: Mapping[int, Mapping[int, int]]) -> float:
    """numa_info.go ``CalculateAverageFor``: the mean over every ordered pair, self included."""
    nodes = bits(mask)
    if not nodes:
        return 0.0
    total = sum(distances.get(a, {}).get(b, 0) for a in nodes for b in nodes)
    return total / (len(nodes) * len(nodes))


def closest(a: int, b: int, distances: Mapping[int, Mapping[int, int]]) -> int:
    """numa_info.go ``Closest``: the narrower when sizes differ, else the shorter average
    distance, else the smaller integer."""
    if count(a) != count(b):
        return narrowest(a, b)
    da, db = _average_distance(a, distances), _average_distance(b, distances)
    if da == db:
        return a if a < b else b
    return a if da < db else b
