"""The --pod-labels allow-list, kube-state-metrics' label names, and the bounds."""

from __future__ import annotations

import pytest

from podres_exporter.core.podlabels import (
    MAX_LABELS_PER_POD,
    MAX_VALUE_CHARS,
    NOTHING,
    Allowlist,
    choose,
    label_name,
    parse_allowlist,
)


def test_exact_keys_and_wildcards() -> None:
    """An exact key matches itself only; '*' stands for any run of characters."""
    allow = Allowlist.of(("team", "app.kubernetes.io/*", "*-tier"))
    assert allow.allows("team")
    assert not allow.allows("teams")
    assert allow.allows("app.kubernetes.io/name")
    assert not allow.allows("xapp.kubernetes.io/name")
    assert allow.allows("front-tier")
    assert not allow.allows("app.kubernetes.ioXname")  # '.' is no wildcard
    assert Allowlist.of(("*",)).allows("anything/at.all")


def test_off_by_default() -> None:
    """No pattern: nothing allowed, and nothing chosen."""
    assert NOTHING.empty and Allowlist.of(()).empty
    assert choose({"team": "a"}, NOTHING).labels == ()


def test_parse_allowlist_takes_commas_and_arrays_and_rejects_odd_characters() -> None:
    """Empty is none; spaces are trimmed; duplicates kept once; a quote is refused."""
    assert parse_allowlist("") == ()
    assert parse_allowlist(" team , app.kubernetes.io/*,team") == ("team", "app.kubernetes.io/*")
    assert parse_allowlist(["a", "b,c"]) == ("a", "b", "c")
    with pytest.raises(ValueError, match="no label key"):
        parse_allowlist('team"}')


def test_label_names_follow_kube_state_metrics() -> None:
    """label_ and the key, every character outside [a-zA-Z0-9_] as '_'."""
    assert label_name("app.kubernetes.io/name") == "label_app_kubernetes_io_name"
    assert label_name("Team_1") == "label_Team_1"


def test_colliding_keys_get_conflict_suffixes_in_key_order() -> None:
    """a.b, a/b and a_b all give label_a_b: each gets _conflictN in sorted key order."""
    chosen = choose({"a_b": "3", "a.b": "1", "a/b": "2", "c": "4"}, Allowlist.of(("*",)))
    assert chosen.labels == (
        ("label_a_b_conflict1", "1"),
        ("label_a_b_conflict2", "2"),
        ("label_a_b_conflict3", "3"),
        ("label_c", "4"),
    )


def test_a_hostile_pods_labels_are_bounded() -> None:
    """10,000 labels: 64 served, the rest counted; a huge value is cut; a key longer than
    Kubernetes allows is left out and counted; odd bytes pass as text for the exposition
    to escape."""
    labels = {f"k{i:05d}": "v" for i in range(10_000)}
    chosen = choose(labels, Allowlist.of(("*",)))
    assert len(chosen.labels) == MAX_LABELS_PER_POD
    assert chosen.dropped == 10_000 - MAX_LABELS_PER_POD
    assert chosen.labels[0] == ("label_k00000", "v")
    big = choose({"a": "x" * 100_000, "k" * 400: "v", "q": 'a"\n\\b'}, Allowlist.of(("*",)))
    assert big.dropped == 1
    values = dict(big.labels)
    assert values["label_a"].startswith("x" * MAX_VALUE_CHARS)
    assert len(values["label_a"]) < MAX_VALUE_CHARS + 20
    assert values["label_q"] == 'a"\n\\b'
