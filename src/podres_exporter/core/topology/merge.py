"""Merging the hint providers' hints under a Topology Manager policy
(topologymanager/policy.go, policy_best_effort.go, policy_restricted.go,
policy_single_numa_node.go, v1.28)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from podres_exporter.core.topology import masks
from podres_exporter.core.topology.model import TopologyPolicy

__all__ = ["Hint", "ProviderHints", "filter_providers", "merge"]


@dataclass(frozen=True, slots=True)
class Hint:
    """A TopologyHint: ``mask`` ``None`` is "any NUMA node" (no preference)."""

    mask: int | None
    preferred: bool


#: One provider's answer: ``None`` (a nil map: no preference at all) or, per resource,
#: ``None`` (no preference for that resource) or the list of hints (empty: impossible).
ProviderHints = Mapping[str, Sequence[Hint] | None] | None


def filter_providers(providers: Sequence[ProviderHints]) -> list[list[Hint]]:
    """policy.go ``filterProvidersHints``: a provider with no hints is one preferred
    any-NUMA hint; a resource with nil hints likewise; a resource with an empty list is
    one non-preferred any-NUMA hint. Resources in name order (Go iterates a map)."""
    out: list[list[Hint]] = []
    for hints in providers:
        if not hints:
            out.append([Hint(None, True)])
            continue
        for resource in sorted(hints):
            rh = hints[resource]
            if rh is None:
                out.append([Hint(None, True)])
            elif not rh:
                out.append([Hint(None, False)])
            else:
                out.append(list(rh))
    return out


def _permutations(lists: Sequence[Sequence[Hint]]) -> Iterator[tuple[Hint, ...]]:
    """policy.go ``iterateAllProviderTopologyHints``: the cross product, first list outermost."""
    if not lists:
        yield ()
        return
    for h in lists[0]:
        for rest in _permutations(lists[1:]):
            yield (h, *rest)


def _merge_permutation(default: int, permutation: Sequence[Hint]) -> Hint:
    """policy.go ``mergePermutation``: AND of the masks (nil = every node); preferred only
    when every hint is preferred and every non-nil mask is the same."""
    preferred = True
    merged = default
    first: int | None = None
    for h in permutation:
        if h.mask is not None:
            merged &= h.mask
            if first is None:
                first = h.mask
            elif h.mask != first:
                preferred = False
        if not h.preferred:
            preferred = False
    return Hint(merged, preferred)


def _max_of_min_counts(lists: Sequence[Sequence[Hint]]) -> int:
    """policy.go ``maxOfMinAffinityCounts`` (with ``narrowestHint``)."""
    best = 0
    for hints in lists:
        narrow: int | None = None
        for h in hints:
            if h.mask is None:
                continue
            if narrow is None or masks.narrower(h.mask, narrow):
                narrow = h.mask
        if narrow is not None:
            best = max(best, masks.count(narrow))
    return best


@dataclass(frozen=True, slots=True)
class _Merger:
    """policy.go ``HintMerger``."""

    best_non_preferred: int
    prefer_closest: bool
    distances: Mapping[int, Mapping[int, int]]

    def fitter(self, current: Hint, candidate: Hint) -> Hint:
        """``NewHintMerger``'s ``compareNumaAffinityMasks``."""
        assert current.mask is not None and candidate.mask is not None
        if candidate.mask == current.mask:
            return current
        if self.prefer_closest:
            best = masks.closest(current.mask, candidate.mask, self.distances)
        else:
            best = masks.narrowest(current.mask, candidate.mask)
        return current if best == current.mask else candidate

    def compare(self, current: Hint | None, candidate: Hint) -> Hint | None:  # noqa: PLR0911
        """``HintMerger.compare``, case for case (its comments number them)."""
        assert candidate.mask is not None
        if masks.count(candidate.mask) == 0:
            return current
        if current is None:
            return candidate
        assert current.mask is not None
        if not current.preferred and candidate.preferred:
            return candidate
        if current.preferred and not candidate.preferred:
            return current
        if current.preferred and candidate.preferred:
            return self.fitter(current, candidate)
        best, cur, cand = (
            self.best_non_preferred,
            masks.count(current.mask),
            masks.count(candidate.mask),
        )
        if cur > best:  # case 1
            return self.fitter(current, candidate)
        if cur == best:  # case 2
            return current if cand != best else self.fitter(current, candidate)
        if cand > best:  # case 3a
            return current
        if cand == best:  # case 3b
            return candidate
        if cand > cur:  # case 3ca
            return candidate
        if cand < cur:  # case 3cb
            return current
        return self.fitter(current, candidate)  # case 3cc


def _merge_hints(
    nodes: Sequence[int],
    lists: Sequence[Sequence[Hint]],
    *,
    prefer_closest: bool,
    distances: Mapping[int, Mapping[int, int]],
) -> Hint:
    """policy.go ``HintMerger.Merge``: the best merged permutation, else {all, false}."""
    default = masks.mask_of(nodes)
    merger = _Merger(_max_of_min_counts(lists), prefer_closest, distances)
    best: Hint | None = None
    for permutation in _permutations(lists):
        best = merger.compare(best, _merge_permutation(default, permutation))
    return best if best is not None else Hint(default, False)


def _single_numa(lists: Sequence[Sequence[Hint]]) -> list[list[Hint]]:
    """policy_single_numa_node.go ``filterSingleNumaHints``: keep preferred hints that are
    nil or one NUMA node wide."""
    return [
        [h for h in hints if h.preferred and (h.mask is None or masks.count(h.mask) == 1)]
        for hints in lists
    ]


def merge(
    policy: TopologyPolicy,
    nodes: Sequence[int],
    providers: Sequence[ProviderHints],
    *,
    prefer_closest: bool = False,
    distances: Mapping[int, Mapping[int, int]] | None = None,
) -> tuple[Hint, bool]:
    """The policy's ``Merge``: the best hint and whether the pod may be admitted.

    none (policy_none.go): {nil, preferred}, admit. best-effort (policy_best_effort.go):
    merge, admit always. restricted (policy_restricted.go): merge, admit only a preferred
    hint. single-numa-node (policy_single_numa_node.go): single-NUMA hints only, a merged
    mask of every node becomes nil, admit only a preferred hint. prefer-closest-numa-nodes
    (policy_options.go) is ignored under single-numa-node, as ``NewHintMerger`` does.
    """
    if policy is TopologyPolicy.NONE:
        return Hint(None, True), True
    lists = filter_providers(providers)
    closest = prefer_closest and policy is not TopologyPolicy.SINGLE_NUMA_NODE
    if policy is TopologyPolicy.SINGLE_NUMA_NODE:
        lists = _single_numa(lists)
    best = _merge_hints(nodes, lists, prefer_closest=closest, distances=distances or {})
    if policy is TopologyPolicy.SINGLE_NUMA_NODE and best.mask == masks.mask_of(nodes):
        best = Hint(None, best.preferred)
    if policy is TopologyPolicy.BEST_EFFORT:
        return best, True
    return best, best.preferred
