"""The recording rules (deploy/prometheus/podres-recording.yaml): each has a unit test
(tests/rules/recording/*.test.yaml, run by test_rules.py with promtool) that checks its result
and fails when the rule is broken, their names say the labels they keep, and docs/rules.md
lists every one."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.rules.test_rules import RECORDING_FILE, RECORDING_TESTS, run_unit_tests_against

REPO = Path(__file__).resolve().parents[2]
RULE_FILE = RECORDING_FILE
UNIT_TESTS = RECORDING_TESTS
DOCS = REPO / "docs" / "rules.md"

# The words of a rule's level and the label each stands for.
LEVEL_LABELS = {
    "cluster": "cluster",
    "node": "node",
    "numa": "numa_node",
    "namespace": "namespace",
    "resource": "resource",
    "memory_type": "memory_type",
    "shape": "shape",
}
_OUTER_BY = re.compile(r"^\s*(?:sum|max|min|avg|count)\s+by\s*\(([^)]*)\)")


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def recording_rules() -> list[dict[str, Any]]:
    return [rule for group in _load(RULE_FILE)["groups"] for rule in group["rules"]]


def record_names() -> list[str]:
    return sorted({rule["record"] for rule in recording_rules()})


def level_labels(record: str) -> set[str]:
    """The labels the level of ``record`` names, ``cluster`` always among them."""
    level = record.split(":", maxsplit=1)[0]
    found = {"cluster"}
    rest = level
    while rest:
        word = next(
            (w for w in sorted(LEVEL_LABELS, key=len, reverse=True) if rest.startswith(w)), None
        )
        assert word, f"{record}: unknown level word in {rest!r}"
        found.add(LEVEL_LABELS[word])
        rest = rest[len(word) :].lstrip("_")
    return found


def run_unit_tests(promtool: str, tmp_path: Path, groups: list[dict[str, Any]]) -> str:
    """Run every recording unit test against a copy of the rules with ``groups``; the output."""
    result = run_unit_tests_against(promtool, tmp_path, groups, UNIT_TESTS)
    return "" if result.returncode == 0 else result.stdout + result.stderr


def test_every_recording_rule_is_unit_tested() -> None:
    """Each recording rule's result is checked by a test that expects samples of it."""
    checked: set[str] = set()
    for path in UNIT_TESTS:
        for group in _load(path)["tests"]:
            for case in group.get("promql_expr_test", []):
                if case["exp_samples"]:
                    checked |= set(re.findall(r"[a-z_]+:podres_\w+:\w+", case["expr"]))
    assert set(record_names()) <= checked, sorted(set(record_names()) - checked)


@pytest.mark.prometheus
@pytest.mark.parametrize("record", record_names())
def test_unit_tests_catch_a_broken_recording_rule(
    promtool: str, tmp_path: Path, record: str
) -> None:
    """With one rule's expression made empty, the unit tests fail on it: each is really tested."""
    groups = copy.deepcopy(_load(RULE_FILE)["groups"])
    for group in groups:
        for rule in group["rules"]:
            if rule["record"] == record:
                rule["expr"] = "vector(0) > 1"
    assert record in run_unit_tests(promtool, tmp_path, groups)


@pytest.mark.prometheus
def test_unit_tests_pass_against_a_copy_of_the_recording_rules(
    promtool: str, tmp_path: Path
) -> None:
    """The runs above fail for the broken rule alone: the same copy, unchanged, passes."""
    assert run_unit_tests(promtool, tmp_path, copy.deepcopy(_load(RULE_FILE)["groups"])) == ""


@pytest.mark.parametrize("rule", recording_rules(), ids=lambda r: r["record"])
def test_recording_rule_names_say_what_they_keep(rule: dict[str, Any]) -> None:
    """`level:podres_metric:operation`, and the level lists the labels the result keeps."""
    record = rule["record"]
    assert re.fullmatch(r"[a-z_]+:podres_[a-z0-9_]+:[a-z0-9_]+", record), record
    by = _OUTER_BY.match(rule["expr"])
    assert by, f"{record}: the result is not one aggregation by (...): {rule['expr']}"
    kept = {label.strip() for label in by.group(1).split(",")}
    assert kept == level_labels(record), record
    operation, aggregation = record.split(":")[2], rule["expr"].split()[0]
    if operation == "count" and " bool " in rule["expr"]:
        aggregation = "count"  # a sum of 0/1 comparisons: a count that is 0 rather than absent
    assert operation.startswith(aggregation), record


def test_level_reader_is_not_vacuous() -> None:
    """The level reader splits compound words and refuses unknown ones."""
    assert level_labels("node_numa_memory_type:x:sum") == {
        "cluster",
        "node",
        "numa_node",
        "memory_type",
    }
    with pytest.raises(AssertionError):
        level_labels("pod:x:sum")


def test_docs_list_every_recording_rule() -> None:
    """docs/rules.md's "Recording rules" section names every rule, and no rule that is not."""
    section = DOCS.read_text(encoding="utf-8").split("## Recording rules", 1)[1]
    documented = set(re.findall(r"^\| `([a-z_]+:podres_\w+:\w+)`", section, flags=re.MULTILINE))
    assert documented == set(record_names())
