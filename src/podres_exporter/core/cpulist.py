"""The kernel's CPU list format (``0-3,8,10-11``): parse and format. Pure."""

from __future__ import annotations

from collections.abc import Iterable


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse ``"0-3,8,10-11"`` (as in ``/sys/devices/system/cpu/online``).

    An empty string is the empty set. Raises ValueError naming the bad part.
    """
    cpus: set[int] = set()
    for raw in text.strip().split(","):
        part = raw.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise ValueError(f"bad CPU list part {part!r} in {text.strip()!r}") from None
        if first < 0 or last < first:
            raise ValueError(f"bad CPU range {part!r} in {text.strip()!r}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPU ids as compact ranges: ``{0,1,2,3,8}`` -> ``"0-3,8"``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
