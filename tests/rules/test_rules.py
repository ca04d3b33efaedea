"""The alert rules (deploy/prometheus/podres-alerts.yaml): promtool accepts them, every alert
has unit tests (tests/rules/*.test.yaml) that show it firing and not firing and that catch a
broken rule, they follow the conventions routing and runbooks rely on, and the committed rule
files and the Prometheus Operator's copy are what tools/rules.py makes of its templates."""

from __future__ import annotations

import copy
import functools
import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from podres_exporter.deviceplugin.inventory import APPLICATION_XIDS

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RULE_FILE = REPO / "deploy" / "prometheus" / "podres-alerts.yaml"
COMPONENT = REPO / "deploy" / "components" / "prometheus-rules"
RUNBOOKS = REPO / "docs" / "runbooks.md"
UNIT_TESTS = sorted(HERE.glob("*.test.yaml"))
RECORDING_FILE = REPO / "deploy" / "prometheus" / "podres-recording.yaml"
RECORDING_TESTS = sorted((HERE / "recording").glob("*.test.yaml"))

SEVERITIES = {"critical", "warning", "info"}
ANNOTATIONS = {"summary", "description", "runbook_url"}
# absent() keeps no label of what it looks for: it cannot name a node. A shape that no node
# admits is the fleet's: it names the cluster and the shape.
WITHOUT_NODE = {"PodresExporterAbsent", "PodresShapeFragmented"}
RUNBOOK_SECTIONS = ("Meaning", "Impact", "Diagnosis", "Mitigation")
# Matching within one target needs no node: a target is one node's agent. This is how
# `* on (cluster, job, instance) group_left (node) podres_node_info` gives a series its node.
PER_TARGET = {"cluster", "job", "instance"}
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_AGGREGATION = re.compile(
    r"\b(sum|min|max|avg|group|count|stddev|stdvar|topk|bottomk|quantile|count_values)\s*"
    r"(by|without)?\s*\(([^)]*)\)?"
)
_MATCHING = re.compile(r"\b(on|ignoring|by|without)\s*\(([^)]*)\)")

Rule = dict[str, Any]


# ---------------------------------------------------------------------------------- helpers


@functools.cache
def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def rule_groups() -> list[dict[str, Any]]:
    """The rule file's groups (a fresh copy: callers may change it)."""
    groups: list[dict[str, Any]] = copy.deepcopy(_load(RULE_FILE)["groups"])
    return groups


def alert_rules() -> list[Rule]:
    return [
        rule for group in _load(RULE_FILE)["groups"] for rule in group["rules"] if "alert" in rule
    ]


def alert_names() -> list[str]:
    return [rule["alert"] for rule in alert_rules()]


def the_alert(name: str) -> Rule:
    (rule,) = (rule for rule in alert_rules() if rule["alert"] == name)
    return rule


def seconds(duration: str) -> int:
    """A ``for:`` duration in seconds (the forms used here: ``1h``, ``15m``, ``0m``)."""
    match = _DURATION.match(duration)
    assert match and duration, f"unexpected duration {duration!r}"
    h, m, s = (int(g or 0) for g in match.groups())
    return h * 3600 + m * 60 + s


def unit_test_cases() -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every ``alert_rule_test`` entry of every unit test file."""
    for path in UNIT_TESTS:
        for group in _load(path)["tests"]:
            for case in group.get("alert_rule_test", []):
                yield path, case


def github_anchors(markdown: str) -> list[str]:
    """The anchors GitHub gives the headings of ``markdown``: lower case, punctuation but
    hyphens and underscores dropped, spaces to hyphens, ``-1``, ``-2`` ... for repeats."""
    anchors: list[str] = []
    seen: dict[str, int] = {}
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if in_code or not heading:
            continue
        base = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.append(base if count == 0 else f"{base}-{count}")
    return anchors


def runbook_sections() -> dict[str, str]:
    """docs/runbooks.md's ``## `` sections by heading, each with its text."""
    parts = re.split(r"^## +(.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def image_source() -> str:
    found = re.search(
        r'org\.opencontainers\.image\.source="([^"]+)"', (REPO / "Dockerfile").read_text()
    )
    assert found, "the Dockerfile names the repository in its OCI source label"
    return found.group(1)


def _load_tool(name: str, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, REPO / "tools" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_generator() -> ModuleType:
    """tools/rules.py, with tools/mixin_config.py and tools/fit_rules.py, which it imports
    as sibling modules."""
    _load_tool("mixin_config", "mixin_config")
    _load_tool("fit_rules", "fit_rules")
    return _load_tool("rules", "podres_rules_tool")


def run_promtool(promtool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


def run_unit_tests_against(
    promtool: str, tmp_path: Path, groups: list[dict[str, Any]], unit_tests: list[Path]
) -> subprocess.CompletedProcess[str]:
    """Run ``unit_tests`` with their rule file replaced by a copy holding ``groups``."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    tests = []
    for path in unit_tests:
        doc = copy.deepcopy(_load(path))
        doc["rule_files"] = [str(rules)]
        tests.append(tmp_path / path.name)
        tests[-1].write_text(yaml.safe_dump(doc, sort_keys=False))
    return run_promtool(promtool, "test", "rules", *tests)


def failing_alerts(promtool: str, tmp_path: Path, groups: list[dict[str, Any]]) -> set[str]:
    """The alerts whose unit tests fail when run against the rule ``groups`` instead of the
    rule file (promtool checks each alert's cases on their own, so one run tells them all)."""
    result = run_unit_tests_against(promtool, tmp_path, groups, UNIT_TESTS)
    failed = set(re.findall(r"alertname: (\w+),", result.stdout + result.stderr))
    assert (result.returncode != 0) == bool(failed), result.stdout + result.stderr
    return failed


def with_every_alert(**changes: str) -> list[dict[str, Any]]:
    """The rule groups with every alert's fields replaced by ``changes``."""
    groups = rule_groups()
    for group in groups:
        for rule in group["rules"]:
            if "alert" in rule:
                rule.update(changes)
    return groups


# --------------------------------------------------------------------------------- promtool


@pytest.mark.prometheus
@pytest.mark.parametrize("path", [RULE_FILE, RECORDING_FILE], ids=lambda p: p.name)
def test_promtool_checks_the_rule_files(promtool: str, path: Path) -> None:
    """`promtool check rules` accepts each rule file and counts every rule in it."""
    result = run_promtool(promtool, "check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(group["rules"]) for group in _load(path)["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout


@pytest.mark.prometheus
@pytest.mark.parametrize(
    "path", UNIT_TESTS + RECORDING_TESTS, ids=lambda p: p.relative_to(HERE).as_posix()
)
def test_promtool_unit_tests_pass(promtool: str, path: Path) -> None:
    """`promtool test rules` passes each unit test file, of the alerts and of the recordings."""
    result = run_promtool(promtool, "test", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    """Every alert has a unit test case where it fires and one where it does not; no stray names."""
    fires: set[str] = set()
    silent: set[str] = set()
    for _, case in unit_test_cases():
        (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    names = set(alert_names())
    assert not names - fires, f"alerts never shown firing: {sorted(names - fires)}"
    assert not names - silent, f"alerts never shown not firing: {sorted(names - silent)}"
    assert (fires | silent) <= names, f"tests of unknown alerts: {sorted((fires | silent) - names)}"


def test_unit_tests_check_every_label_and_annotation() -> None:
    """Expected alerts spell out severity, node and cluster (where it can), and every annotation."""
    for path, case in unit_test_cases():
        rule = the_alert(case["alertname"])
        for expected in case.get("exp_alerts") or []:
            where = f"{path.name}: {case['alertname']} at {case['eval_time']}"
            labels = expected["exp_labels"]
            assert labels["severity"] == rule["labels"]["severity"], where
            if case["alertname"] not in WITHOUT_NODE:
                assert {"node", "cluster"} <= set(labels), where
            assert set(expected["exp_annotations"]) == ANNOTATIONS, where


@pytest.mark.prometheus
def test_unit_tests_catch_alerts_that_never_fire(promtool: str, tmp_path: Path) -> None:
    """With every expression made never true, each alert's unit tests fail: each really fires."""
    assert failing_alerts(promtool, tmp_path, with_every_alert(expr="vector(0) > 1")) == set(
        alert_names()
    )


@pytest.mark.prometheus
def test_unit_tests_catch_alerts_without_their_for(promtool: str, tmp_path: Path) -> None:
    """Without `for`, each alert that has one fails its tests: they look while it is pending."""
    pending = {r["alert"] for r in alert_rules() if seconds(r["for"]) > 0}
    assert pending
    assert failing_alerts(promtool, tmp_path, with_every_alert(**{"for": "0s"})) == pending


@pytest.mark.prometheus
def test_unit_tests_pass_against_a_copy_of_the_rules(promtool: str, tmp_path: Path) -> None:
    """The runs above are not failing for another reason: the same copy, unchanged, passes."""
    assert failing_alerts(promtool, tmp_path, rule_groups()) == set()


# ------------------------------------------------------------------------------ conventions


@pytest.mark.parametrize("name", alert_names())
def test_alert_follows_the_conventions(name: str) -> None:
    """Podres name, severity label only, summary/description/runbook_url, sane `for`, node named."""
    rule = the_alert(name)
    assert re.fullmatch(r"Podres[A-Z][A-Za-z]+", name)
    assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}
    assert set(rule["labels"]) == {"severity"}
    assert rule["labels"]["severity"] in SEVERITIES
    assert set(rule["annotations"]) == ANNOTATIONS
    assert 0 <= seconds(rule["for"]) <= 3600
    if name not in WITHOUT_NODE:
        assert "{{ $labels.node }}" in rule["annotations"]["summary"]
        assert "{{ $labels.node }}" in rule["annotations"]["description"]
    assert not rule["annotations"]["summary"].count("\n")


def test_alert_names_are_unique() -> None:
    """No alert name is used twice, and the groups' names are unique too."""
    names = alert_names()
    assert len(names) == len(set(names))
    groups = [g["name"] for g in rule_groups()]
    assert len(groups) == len(set(groups))


@pytest.mark.parametrize("name", sorted(set(alert_names()) - WITHOUT_NODE))
def test_aggregations_and_matching_keep_cluster_and_node(name: str) -> None:
    """Each `by (...)`, `on (...)` keeps cluster and node (or the target); no bare aggregation."""
    expr = " ".join(the_alert(name)["expr"].split())
    for match in _AGGREGATION.finditer(expr):
        op, clause, labels = match.groups()
        assert clause == "by", f"{name}: {op} without a leading `by (...)`: {expr}"
        assert {"cluster", "node"} <= {label.strip() for label in labels.split(",")}, expr
    for match in _MATCHING.finditer(expr):
        clause, labels = match.groups()
        names = {label.strip() for label in labels.split(",")}
        if clause == "on" and names >= PER_TARGET:
            continue  # within one target, which is one node (and how the node gets its name)
        if clause in ("on", "by"):
            assert {"cluster", "node"} <= names, expr
        else:
            assert not {"cluster", "node"} & {label.strip() for label in labels.split(",")}


def test_aggregation_check_is_not_vacuous() -> None:
    """The patterns above find the clauses of a rule that has them, and flag a bare sum."""
    expr = " ".join(the_alert("PodresResourceNoHealthyDevices")["expr"].split())
    assert len(list(_AGGREGATION.finditer(expr))) == 4
    assert len([m for m in _MATCHING.finditer(expr) if m.group(1) == "on"]) == 2
    bare = _AGGREGATION.search("sum(podres_plugin_devices) > 0")
    assert bare and bare.group(2) is None


def test_critical_xid_matcher_is_the_device_plugins() -> None:
    """The XID alert skips exactly the application XIDs the device plugin ignores."""
    expr = the_alert("PodresGPUCriticalXid")["expr"]
    matchers = re.findall(r'xid\s*(=~|!~|!=|=)\s*"([^"]*)"', expr)
    assert matchers
    for op, value in matchers:
        assert op == "!~"
        assert {int(code) for code in value.split("|")} == set(APPLICATION_XIDS)


def test_target_down_matches_the_job_names_of_every_scrape_setup() -> None:
    """PodresTargetDown matches the ServiceMonitor's, PodMonitor's and plain jobs, and no other."""
    expr = the_alert("PodresTargetDown")["expr"]
    found = re.findall(r'job=~"([^"]+)"', expr)
    assert found
    job = re.compile("|".join(f"^(?:{pattern})$" for pattern in found))
    services = [yaml.safe_load((REPO / "deploy" / f).read_text())["metadata"]["name"] for f in
                ("base/exporter-service.yaml",
                 "components/device-plugin/device-plugin-service.yaml")]  # fmt: skip
    monitor = yaml.safe_load((REPO / "deploy/components/pod-monitor/podmonitor.yaml").read_text())
    assert "jobLabel" not in monitor["spec"]
    pod_monitor_job = f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"
    for name in [*services, pod_monitor_job]:
        assert job.match(name), name
    for other in ("node-exporter", "kubelet", "podres-exporter-canary", "other/podres-exporter"):
        assert not job.match(other), other


# --------------------------------------------------------------------------------- runbooks


def test_runbook_urls_point_at_headings_of_the_runbooks() -> None:
    """Each runbook_url is docs/runbooks.md in the image's repository, at its alert's heading."""
    base = f"{image_source()}/blob/main/docs/runbooks.md"
    anchors = set(github_anchors(RUNBOOKS.read_text()))
    for rule in alert_rules():
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == base, url
        assert anchor == rule["alert"].lower(), url
        assert anchor in anchors, f"{url}: no such heading in docs/runbooks.md"


def test_github_anchors_follow_githubs_rules() -> None:
    """The anchor rules the runbook check relies on: case, punctuation, spaces, repeats."""
    text = "# Title\n## Podres`Alert` (v2)\n### Meaning\n### Meaning\n```\n# not a heading\n```\n"
    assert github_anchors(text) == ["title", "podresalert-v2", "meaning", "meaning-1"]


def test_every_alert_has_a_runbook_and_every_runbook_an_alert() -> None:
    """One runbook per alert: meaning, impact, diagnosis (podres top, PromQL), mitigation."""
    sections = runbook_sections()
    alerts = set(alert_names())
    runbooks = {heading for heading in sections if heading.startswith("Podres")}
    assert runbooks == alerts
    for name in alerts:
        text = sections[name]
        found = re.findall(r"^### +(.+?)\s*$", text, flags=re.MULTILINE)
        assert tuple(found) == RUNBOOK_SECTIONS, name
        diagnosis = text.split("### Diagnosis", 1)[1].split("### Mitigation", 1)[0]
        assert "```promql" in diagnosis, name
        assert "podres top" in diagnosis, name
        assert the_alert(name)["labels"]["severity"] in text, name


# ------------------------------------------------------------------------------- generated


def test_committed_rule_files_are_the_templates_with_the_default_settings() -> None:
    """The committed rule files and component are what tools/rules.py makes (`make rules`)."""
    rules = load_generator()
    files = rules.render(rules.MixinConfig())
    assert sorted(p.name for p in COMPONENT.iterdir()) == sorted(
        name.removeprefix("prometheus-rules/")
        for name in files
        if name.startswith("prometheus-rules/")
    )
    assert sorted(name for name in files if name.startswith("chart/")) == [
        "chart/podres-alerts.yaml",
        "chart/podres-recording.yaml",
    ]
    for name, content in files.items():
        path = rules.destination(name, None)
        assert path.read_text(encoding="utf-8") == content, f"run `make rules`: {path}"
    assert rules.main(["--check"]) == 0
    for plain, component in (
        ("podres-alerts.yaml", "prometheus-rules.yaml"),
        ("podres-recording.yaml", "recording-rules.yaml"),
    ):
        rule = yaml.safe_load(files[f"prometheus-rules/{component}"])
        assert rule["kind"] == "PrometheusRule"
        assert rule["spec"] == yaml.safe_load(files[plain])
    component = yaml.safe_load(files["prometheus-rules/kustomization.yaml"])
    assert component["kind"] == "Component"
    assert component["resources"] == ["prometheus-rules.yaml", "recording-rules.yaml"]


def test_generator_check_notices_a_stale_output(tmp_path: Path) -> None:
    """`tools/rules.py --check` fails on a stale output and passes once it is regenerated."""
    rules = load_generator()
    (tmp_path / "prometheus-rules").mkdir()
    (tmp_path / "prometheus-rules" / "kustomization.yaml").write_text("stale\n")
    assert rules.main(["--check", "--out", str(tmp_path)]) == 1
    assert rules.main(["--out", str(tmp_path)]) == 0
    assert rules.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "podres-recording.yaml").write_text("stale\n")
    assert rules.main(["--check", "--out", str(tmp_path)]) == 1


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("# only a comment\n", "one top-level `groups:`"),
        ("groups:\n  - name: a\n    rules: []\nextra: 1\n", "only top-level key"),
        ("kind: x\ngroups:\n  - name: a\n", "only comments may come before"),
        ("groups:\n  - name: a\n---\n", "one YAML document"),
    ],
)
def test_generator_refuses_a_file_it_cannot_indent_exactly(source: str, message: str) -> None:
    """The generator refuses rule files whose indented copy could mean something else."""
    rules = load_generator()
    with pytest.raises(rules.SourceError, match=re.escape(message)):
        rules.spec_lines("podres-alerts.yaml", source)
