"""What one kubelet answer may put into the model: trimming and merging duplicate pods."""

from __future__ import annotations

from podres_exporter.core.limits import (
    CPUS_OVER_LIMIT,
    ENTRIES_OVER_LIMIT,
    AnswerLimits,
    Trim,
    merge_duplicates,
)
from podres_exporter.core.model import ContainerAlloc, PodAlloc


def test_take_keeps_up_to_the_limit_and_counts_the_rest() -> None:
    """A sequence over its limit is cut there; what is cut is counted under its kind."""
    trim = Trim(AnswerLimits(cpus=3, entries=100))
    assert list(trim.take(range(10), 3, CPUS_OVER_LIMIT)) == [0, 1, 2]
    assert trim.dropped == {CPUS_OVER_LIMIT: 7} and trim.left == 97


def test_take_stops_at_the_answers_budget() -> None:
    """Past the answer's budget of entries nothing more is kept, counted as entries."""
    trim = Trim(AnswerLimits(entries=5))
    assert list(trim.take([1, 2, 3], 10, CPUS_OVER_LIMIT)) == [1, 2, 3]
    assert list(trim.take([4, 5, 6], 10, CPUS_OVER_LIMIT)) == [4, 5]
    assert list(trim.take([7], 10, CPUS_OVER_LIMIT)) == []
    assert trim.frozen() == {ENTRIES_OVER_LIMIT: 2}


def test_a_sequence_within_its_limits_is_handed_on_as_it_is() -> None:
    """Nothing is copied or counted when nothing is over a limit."""
    items = [1, 2]
    trim = Trim(AnswerLimits())
    assert trim.take(items, 2, CPUS_OVER_LIMIT) is items and not trim.frozen()


def test_identical_copies_of_a_pod_merge_into_one() -> None:
    """Fifty copies of one pod are one pod, and 49 copies merged."""
    pod = PodAlloc("ns", "p", (ContainerAlloc("c", frozenset({1})),))
    other = PodAlloc("ns", "q")
    pods, copies = merge_duplicates([pod, other, *[pod] * 49])
    assert pods == (pod, other) and copies == 49


def test_a_copy_naming_other_containers_adds_them() -> None:
    """A later copy of a pod adds the containers the first did not list; the first wins."""
    first = PodAlloc("ns", "p", (ContainerAlloc("a", frozenset({1})),))
    later = PodAlloc("ns", "p", (ContainerAlloc("a", frozenset({2})), ContainerAlloc("b")))
    pods, copies = merge_duplicates([first, later])
    assert copies == 1
    assert pods == (
        PodAlloc("ns", "p", (ContainerAlloc("a", frozenset({1})), ContainerAlloc("b"))),
    )


def test_pods_of_one_name_in_two_namespaces_are_two_pods() -> None:
    """The namespace is part of a pod's identity."""
    pods, copies = merge_duplicates([PodAlloc("a", "p"), PodAlloc("b", "p")])
    assert len(pods) == 2 and copies == 0
