"""The memory manager's Static policy: hints (memorymanager/policy_static.go
``calculateHints``) and pinning a container's memory along the Topology Manager's hint
(``Allocate``, ``getDefaultHint``, ``extendTopologyManagerHint``, ``findBestHint``,
``updateMachineState``, ``getPodReusableMemory``), v1.28."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from podres_exporter.core.topology import masks
from podres_exporter.core.topology.books import Books
from podres_exporter.core.topology.merge import Hint

__all__ = ["allocate_memory", "memory_hints"]


def _allocatable(books: Books, resource: str, node: int) -> int:
    per = books.node.memory.get(resource, {})
    return per[node].allocatable if node in per else 0


def _free(books: Books, resource: str, node: int) -> int:
    return books.memory_free.get(resource, {}).get(node, 0)


def _cells(books: Books, node: int) -> tuple[int, ...]:
    return books.cells.get(node, (node,))


def memory_hints(books: Books, requests: Mapping[str, int]) -> dict[str, Sequence[Hint]]:
    """``calculateHints``: a hint per NUMA mask whose allocatable memory can hold every
    requested type (these set ``minAffinitySize``), that does not split a multi-NUMA
    group nor join a node already used alone, and whose free memory holds the request;
    preferred at ``minAffinitySize`` (``isHintPreferred``). An empty map when no mask fits
    (the Topology Manager then reads "no preference")."""
    nodes = books.topo.nodes
    min_size = len(nodes)
    found: list[int] = []
    for mask in masks.iterate(nodes):
        bits = masks.bits(mask)
        if any(sum(_allocatable(books, r, n) for n in bits) < q for r, q in requests.items()):
            continue
        min_size = min(min_size, len(bits))
        single = len(bits) == 1
        if single and len(_cells(books, bits[0])) > 1:
            continue
        if not single and any(
            books.assignments.get(n, 0) > 0
            and (len(_cells(books, n)) == 1 or set(_cells(books, n)) != set(bits))
            for n in bits
        ):
            continue
        if any(sum(_free(books, r, n) for n in bits) < q for r, q in requests.items()):
            continue
        found.append(mask)
    if not found:
        return {}
    return {r: [Hint(m, masks.count(m) == min_size) for m in found] for r in requests}


def _best(hints: Sequence[Hint]) -> Hint | None:
    """``findBestHint``: preferred first, then the narrowest."""
    best: Hint | None = None
    for h in hints:
        assert h.mask is not None
        if best is None or (h.preferred and not best.preferred):
            best = h
        elif h.preferred == best.preferred:
            assert best.mask is not None
            if masks.narrower(h.mask, best.mask):
                best = h
    return best


def _satisfies(books: Books, mask: int, requests: Mapping[str, int]) -> bool:
    """``isAffinitySatisfyRequest``."""
    bits = masks.bits(mask)
    return all(sum(_free(books, r, n) for n in bits) >= q for r, q in requests.items())


def allocate_memory(
    books: Books, requests: Mapping[str, int], hint: Hint, *, init: bool
) -> tuple[tuple[int, ...], dict[tuple[str, int], int]] | str:
    """``Allocate`` for one container of a Guaranteed pod: the hint (nil: the default
    hint; too small: extended to the narrowest hint holding it), then each type taken
    node by node in the mask (``updateMachineState``), less what the pod's init
    containers left for reuse on the same mask. Returns the NUMA nodes of the blocks and
    the bytes taken per (type, NUMA node), or the memory manager's error text."""
    mask = hint.mask
    if mask is None:
        calc = memory_hints(books, requests)
        if not calc:
            return (
                "[memorymanager] failed to get the default NUMA affinity, "
                "no NUMA nodes with enough memory is available"
            )
        default = _best(calc.get("memory", next(iter(calc.values()))))
        assert default is not None and default.mask is not None
        if not default.preferred and hint.preferred:
            return "[memorymanager] failed to find the default preferred hint"
        mask, hint = default.mask, default
    if not _satisfies(books, mask, requests):
        calc = memory_hints(books, requests)
        wider = [
            h
            for h in calc.get("memory", next(iter(calc.values()), []))
            if h.mask is not None and h.mask & mask == mask
        ]
        ext = _best(wider)
        if ext is None or ext.mask is None:
            return "[memorymanager] failed to find NUMA nodes to extend the current topology hint"
        if not ext.preferred and hint.preferred:
            return "[memorymanager] failed to find the extended preferred hint"
        mask = ext.mask
    return masks.bits(mask), _take(books, mask, requests, init=init)


def _take(
    books: Books, mask: int, requests: Mapping[str, int], *, init: bool
) -> dict[tuple[str, int], int]:
    """``updateMachineState`` after the pod's reusable memory (``getPodReusableMemory`` /
    ``updatePodReusableMemory``)."""
    bits = masks.bits(mask)
    taken: dict[tuple[str, int], int] = {}
    for r, size in requests.items():
        reusable = books.memory_reuse.get((mask, r), 0)
        need = max(0, size - reusable)
        if init:
            books.memory_reuse[(mask, r)] = max(reusable, size)
        elif reusable:
            books.memory_reuse[(mask, r)] = max(0, reusable - size)
        for n in bits:
            books.assignments[n] = books.assignments.get(n, 0) + 1
            books.cells[n] = bits
            if need == 0:
                continue
            free = _free(books, r, n)
            if free <= 0:
                continue
            got = min(free, need)
            books.memory_free.setdefault(r, {})[n] = free - got
            taken[(r, n)] = got
            need -= got
    return taken
