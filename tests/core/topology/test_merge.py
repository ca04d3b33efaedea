"""The Topology Manager's hint merge and policies, against hand-worked cases from
topologymanager/policy_test.go and the policy files (v1.28)."""

from __future__ import annotations

import pytest

from podres_exporter.core.topology import TopologyPolicy
from podres_exporter.core.topology.masks import closest, iterate, narrower
from podres_exporter.core.topology.merge import Hint, merge

N01, N0, N1 = 0b11, 0b01, 0b10
NODES = (0, 1)


def test_masks_iterate_by_size_then_combination() -> None:
    """bitmask.IterateBitMasks: singles first, then pairs, in combination order."""
    assert list(iterate([0, 1, 2])) == [0b001, 0b010, 0b100, 0b011, 0b101, 0b110, 0b111]


def test_narrower_counts_then_integer_order() -> None:
    """IsNarrowerThan: fewer bits, else the smaller integer."""
    assert narrower(0b100, 0b011)
    assert narrower(0b011, 0b101)
    assert not narrower(0b110, 0b101)


def test_closest_prefers_shorter_average_distance() -> None:
    """numa_info.go Closest: same width, the shorter mean distance wins."""
    d = {0: {0: 10, 1: 21, 2: 11}, 1: {0: 21, 1: 10, 2: 21}, 2: {0: 11, 1: 21, 2: 10}}
    assert closest(0b011, 0b101, d) == 0b101
    assert closest(0b001, 0b110, d) == 0b001


@pytest.mark.parametrize("policy", list(TopologyPolicy)[1:])
def test_no_provider_hints_is_any_numa_preferred(policy: TopologyPolicy) -> None:
    """A provider with no hints at all means no preference: admitted everywhere."""
    hint, ok = merge(policy, NODES, [None, {"cpu": None}])
    assert ok
    assert hint.preferred
    want = None if policy is TopologyPolicy.SINGLE_NUMA_NODE else N01
    assert hint.mask == want


def test_none_policy_admits_with_no_affinity() -> None:
    """policy_none.go: {nil, preferred}, always admitted."""
    assert merge(TopologyPolicy.NONE, NODES, [{"cpu": []}]) == (Hint(None, True), True)


def test_narrowest_preferred_hint_wins() -> None:
    """Two preferred single-NUMA hints: the lower NUMA node wins."""
    hints = {"cpu": [Hint(N0, True), Hint(N1, True), Hint(N01, False)]}
    assert merge(TopologyPolicy.RESTRICTED, NODES, [hints]) == (Hint(N0, True), True)


def test_providers_intersect() -> None:
    """Cross product and AND: CPUs on either node, GPUs only on node 1 → node 1."""
    cpu = {"cpu": [Hint(N0, True), Hint(N1, True), Hint(N01, False)]}
    gpu = {"gpu": [Hint(N1, True), Hint(N01, False)]}
    assert merge(TopologyPolicy.SINGLE_NUMA_NODE, NODES, [cpu, gpu]) == (Hint(N1, True), True)


def test_different_preferred_masks_merge_to_non_preferred() -> None:
    """policy.go mergePermutation: preferred only when every mask is the same — a
    two-node CPU hint and a one-node GPU hint give a non-preferred node 0."""
    cpu = {"cpu": [Hint(N01, True)]}
    gpu = {"gpu": [Hint(N0, True), Hint(N1, True)]}
    assert merge(TopologyPolicy.BEST_EFFORT, NODES, [cpu, gpu]) == (Hint(N0, False), True)
    assert merge(TopologyPolicy.RESTRICTED, NODES, [cpu, gpu]) == (Hint(N0, False), False)


def test_impossible_resource_is_non_preferred_any() -> None:
    """An empty hint list (not enough units anywhere) merges to {all nodes, false}."""
    hint, ok = merge(TopologyPolicy.BEST_EFFORT, NODES, [{"gpu": []}])
    assert (hint, ok) == (Hint(N01, False), True)
    assert merge(TopologyPolicy.RESTRICTED, NODES, [{"gpu": []}])[1] is False


def test_single_numa_node_drops_wide_hints() -> None:
    """filterSingleNumaHints: a resource whose only hint spans two nodes is refused (the
    merged every-node mask becomes nil, as policy_single_numa_node.go Merge does)."""
    hint, ok = merge(TopologyPolicy.SINGLE_NUMA_NODE, NODES, [{"cpu": [Hint(N01, True)]}])
    assert not ok
    assert hint == Hint(None, False)


def test_non_preferred_creeps_to_best_count() -> None:
    """HintMerger.compare case 3b: among non-preferred hints the one whose width equals
    the widest provider's narrowest hint wins."""
    a = {"a": [Hint(0b0001, False), Hint(0b0011, False)]}
    b = {"b": [Hint(0b0011, False), Hint(0b0111, False)]}
    hint, _ = merge(TopologyPolicy.BEST_EFFORT, (0, 1, 2, 3), [a, b])
    assert hint == Hint(0b0011, False)


def test_prefer_closest_numa_nodes() -> None:
    """policy_options.go prefer-closest-numa-nodes: among equally wide preferred masks,
    the closest pair wins (not under single-numa-node)."""
    d = {
        0: {0: 10, 1: 32, 2: 11, 3: 32},
        1: {0: 32, 1: 10, 2: 32, 3: 11},
        2: {0: 11, 1: 32, 2: 10, 3: 32},
        3: {0: 32, 1: 11, 2: 32, 3: 10},
    }
    hints = {"cpu": [Hint(0b0011, True), Hint(0b0101, True)]}
    nodes = (0, 1, 2, 3)
    plain = merge(TopologyPolicy.RESTRICTED, nodes, [hints], distances=d)
    near = merge(TopologyPolicy.RESTRICTED, nodes, [hints], prefer_closest=True, distances=d)
    assert plain[0].mask == 0b0011
    assert near[0].mask == 0b0101
