"""The rules as a mixin: `tools/rules.py --config FILE` regenerates every rule for other label
names, job selectors and runbook URL, the result is valid and works on series labelled that way,
a bad settings file is refused with the key named, and the templates' placeholders are checked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.rules.test_rules import WITHOUT_NODE, load_generator, run_promtool

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "rules.py"
DEFAULT_URL = "https://github.com/podres-exporter/podres-exporter/blob/main/docs/runbooks.md#"
CUSTOM = {
    "cluster_label": "k8s_cluster",
    "node_label": "kubernetes_node",
    "exporter_selector": 'job="gpu-nodes/podres"',
    "plugin_selector": 'job="gpu-nodes/podres-plugin"',
    "runbook_url": "https://wiki.example.com/runbooks/podres#{anchor}",
    "recording_interval": "30s",
    "target_down_alert": "false",
}
DEFAULT_SELECTORS = (
    'job=~"podres-exporter|podres-system/podres-exporter"',
    'job=~"podres-device-plugin|podres-system/podres-exporter"',
)
_CLAUSE = re.compile(r"\b(by|on|ignoring|without|group_left|group_right)\s*\(([^)]*)\)")


def run_tool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def rules_of(path: Path) -> list[dict[str, Any]]:
    groups = yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _key(rule: dict[str, Any]) -> str:
    """A rule's identity: its alert, or its record with its own labels (one record per shape)."""
    return rule.get("alert") or f"{rule['record']}{sorted((rule.get('labels') or {}).items())}"


def clause_labels(expr: str) -> list[str]:
    """Every label named in the expression's by/on/ignoring/without/group_* clauses."""
    return [
        label.strip()
        for _, labels in _CLAUSE.findall(expr)
        for label in labels.split(",")
        if label.strip()
    ]


@pytest.fixture(scope="module")
def custom(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rules generated with :data:`CUSTOM` by the command line, into a directory."""
    root = tmp_path_factory.mktemp("mixin")
    config = root / "labels.json"
    config.write_text(json.dumps(CUSTOM), encoding="utf-8")
    result = run_tool("--config", config, "--out", root / "out")
    assert result.returncode == 0, result.stderr
    return root / "out"


def test_custom_settings_write_both_rule_files_and_the_component(custom: Path) -> None:
    """--out DIR holds the two rule files and the component, its specs the files' content."""
    assert sorted(p.relative_to(custom).as_posix() for p in custom.rglob("*.yaml")) == [
        "podres-alerts.yaml",
        "podres-recording.yaml",
        "prometheus-rules/kustomization.yaml",
        "prometheus-rules/prometheus-rules.yaml",
        "prometheus-rules/recording-rules.yaml",
    ]
    for plain, component in (
        ("podres-alerts.yaml", "prometheus-rules.yaml"),
        ("podres-recording.yaml", "recording-rules.yaml"),
    ):
        spec = yaml.safe_load((custom / "prometheus-rules" / component).read_text())["spec"]
        assert spec == yaml.safe_load((custom / plain).read_text())


def test_every_expression_uses_the_custom_label_names(custom: Path) -> None:
    """No clause names `cluster` or `node`; each one the defaults name is renamed, none lost."""
    default = REPO / "deploy" / "prometheus"
    for name in ("podres-alerts.yaml", "podres-recording.yaml"):
        before = {_key(r): r for r in rules_of(default / name)}
        after = rules_of(custom / name)
        for rule in after:
            key = _key(rule)
            labels, old = clause_labels(rule["expr"]), clause_labels(before[key]["expr"])
            assert not {"cluster", "node"} & set(labels), (key, rule["expr"])
            assert labels.count("k8s_cluster") == old.count("cluster"), key
            assert labels.count("kubernetes_node") == old.count("node"), key
            assert len(labels) == len(old), key


def test_every_selector_and_runbook_is_the_custom_one(custom: Path) -> None:
    """Job selectors, runbook URLs, annotations' node label and the interval follow the settings."""
    text = (custom / "podres-alerts.yaml").read_text() + (
        custom / "podres-recording.yaml"
    ).read_text()
    for selector in DEFAULT_SELECTORS:
        assert selector not in text
    assert DEFAULT_URL not in text
    assert "$labels.node " not in text
    default = REPO / "deploy" / "prometheus" / "podres-alerts.yaml"
    custom_rules = rules_of(custom / "podres-alerts.yaml")
    for rule in custom_rules:
        url = rule["annotations"]["runbook_url"]
        assert url == f"https://wiki.example.com/runbooks/podres#{rule['alert'].lower()}"
        assert "{{ $labels.kubernetes_node }}" in rule["annotations"]["summary"] or (
            rule["alert"] in WITHOUT_NODE
        )
    reads = {r["alert"]: r["expr"].count(CUSTOM["exporter_selector"]) for r in custom_rules}
    before = {r["alert"]: r["expr"].count(DEFAULT_SELECTORS[0]) for r in rules_of(default)}
    assert reads == {name: count for name, count in before.items() if name in reads}
    assert sum(reads.values()) > 10
    groups = yaml.safe_load((custom / "podres-recording.yaml").read_text())["groups"]
    assert [g["interval"] for g in groups] == ["30s"]


def test_target_down_alert_can_be_left_out(custom: Path) -> None:
    """target_down_alert false drops PodresTargetDown, and only it, with its lines."""
    default = {r["alert"] for r in rules_of(REPO / "deploy" / "prometheus" / "podres-alerts.yaml")}
    names = {r["alert"] for r in rules_of(custom / "podres-alerts.yaml")}
    assert default - names == {"PodresTargetDown"}
    assert names < default
    assert "up{" not in (custom / "podres-alerts.yaml").read_text()


@pytest.mark.prometheus
def test_promtool_accepts_the_custom_rules(promtool: str, custom: Path) -> None:
    """`promtool check rules` accepts both generated files."""
    result = run_promtool(
        promtool,
        "check",
        "rules",
        custom / "podres-alerts.yaml",
        custom / "podres-recording.yaml",
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.prometheus
def test_custom_rules_work_on_series_labelled_that_way(
    promtool: str, custom: Path, tmp_path: Path
) -> None:
    """On series of the custom job and cluster label, the node comes out as `kubernetes_node`."""
    target = 'k8s_cluster="c1", job="gpu-nodes/podres", instance="10.0.0.1:9842"'
    case = {
        "rule_files": [str(custom / "podres-recording.yaml"), str(custom / "podres-alerts.yaml")],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": [
                    {"series": f'podres_node_info{{node="node-a", {target}}}', "values": "1x20"},
                    {
                        "series": "podres_node_devices"
                        f'{{resource="nvidia.com/gpu", numa_node="1", state="free", {target}}}',
                        "values": "3x20",
                    },
                    {
                        "series": 'podres_net_carrier{interface="eth1", address="0000:5e:01.3", '
                        f'namespace="net", pod="router-0", container="router", {target}}}',
                        "values": "0x20",
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": "node_resource:podres_free_devices:max",
                        "eval_time": "1m",
                        "exp_samples": [
                            {
                                "labels": "node_resource:podres_free_devices:max{k8s_cluster="
                                '"c1", kubernetes_node="node-a", resource="nvidia.com/gpu"}',
                                "value": 3,
                            }
                        ],
                    },
                    {
                        "expr": 'ALERTS{alertname="PodresNICNoCarrier", alertstate="firing"}',
                        "eval_time": "6m",
                        "exp_samples": [
                            {
                                "labels": 'ALERTS{alertname="PodresNICNoCarrier", alertstate='
                                '"firing", severity="critical", interface="eth1", address='
                                '"0000:5e:01.3", namespace="net", pod="router-0", container='
                                f'"router", kubernetes_node="node-a", {target}}}',
                                "value": 1,
                            }
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "custom.test.yaml"
    path.write_text(yaml.safe_dump(case, sort_keys=False), encoding="utf-8")
    result = run_promtool(promtool, "test", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_files_are_the_defaults_output() -> None:
    """`tools/rules.py --check`, run as a command, finds the committed files in step."""
    result = run_tool("--check")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"node_lable": "host"}, "unknown key 'node_lable' (did you mean 'node_label'?)"),
        ({"target_down_alert": "no"}, "key 'target_down_alert' must be 'true' or 'false'"),
        ({"cluster_label": "k8s-cluster"}, "key 'cluster_label' must be a label name"),
        ({"node_label": 3}, "key 'node_label' must be a non-empty string"),
        ({"fit_shapes": "gpu=nvidia.com/gpu:0"}, "key 'fit_shapes': gpu: 'nvidia.com/gpu:0'"),
        ({"fit_shapes": "a=cpu:1,a=cpu:2"}, "key 'fit_shapes': a shape name is used twice"),
        ({"fit_shapes": "Big=cpu:1"}, "key 'fit_shapes': 'Big=cpu:1': expected NAME="),
        ({"fit_shapes": "x=gpu:1"}, "key 'fit_shapes': x: 'gpu': expected cpu or a domain/name"),
    ],
)
def test_a_bad_settings_file_exits_2_naming_file_and_key(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    """A bad key or value: exit 2, one line naming the file and the key, no traceback, no files."""
    config = tmp_path / "labels.json"
    config.write_text(json.dumps(settings), encoding="utf-8")
    result = run_tool("--config", config, "--out", tmp_path / "out")
    assert result.returncode == 2
    assert result.stderr.startswith(f"rules: {config}: {message}"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert not (tmp_path / "out").exists()


def test_a_missing_settings_file_exits_2(tmp_path: Path) -> None:
    """A settings file that cannot be read: exit 2 naming it."""
    result = run_tool("--config", tmp_path / "none.json", "--check")
    assert result.returncode == 2
    assert result.stderr.startswith(f"rules: {tmp_path / 'none.json'}: cannot be read")


# -------------------------------------------------------------------------------- templates


def test_placeholders_leave_prometheus_variables_alone() -> None:
    """`$labels`, `$value` stay; `$$` is a dollar; settings are substituted."""
    rules = load_generator()
    text = "a: {{ $labels.$node }} {{ $value | humanize }} $cluster $${x} ${node}\n"
    assert rules.substitute("t", text, {"node": "host", "cluster": "k"}) == (
        "a: {{ $labels.host }} {{ $value | humanize }} k ${x} host\n"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: $clustr\n", "t:2: unknown setting $clustr"),
        ("a: 1\nb: $1\n", "t:2: a lone `$` (write `$$`)"),
        ("groups:\n  - name: x\n    rules:\n      - record: r\n        labels: {u: $runbook_url}\n",
         "$runbook_url outside an alert"),
    ],
)  # fmt: skip
def test_template_errors_name_the_line(text: str, message: str) -> None:
    """A misspelt placeholder, a lone `$`, or a runbook outside an alert: the line is named."""
    rules = load_generator()
    config = rules.MixinConfig()
    with pytest.raises(rules.SourceError, match=re.escape(message)):
        rules.substitute("t", rules._with_runbooks("t", text, config), rules.settings(config))


def test_dropping_an_alert_takes_its_comment_and_nothing_else() -> None:
    """drop_alert removes the rule, the comment above it and its blank line; the rest stays."""
    rules = load_generator()
    text = (
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: a\n\n"
        "      # About B.\n      - alert: B\n        expr: |-\n          b\n\n          c\n\n"
        "      - alert: C\n        expr: c\n"
    )
    assert rules.drop_alert(text, "B") == (
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: a\n\n"
        "      - alert: C\n        expr: c\n"
    )
    with pytest.raises(rules.SourceError, match="alert D is not in the rules once"):
        rules.drop_alert(text, "D")


def test_shapes_of_the_settings_become_rules_and_the_alert(tmp_path: Path) -> None:
    """Each shape of ``fit_shapes`` gets its two recording rules and a part of the alert;
    the default shapes are no more."""
    config = tmp_path / "labels.json"
    config.write_text(json.dumps({"fit_shapes": "vf2_cpu4=intel.com/sriov:2+cpu:4"}))
    result = run_tool("--config", config, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    recording = rules_of(tmp_path / "out" / "podres-recording.yaml")
    shaped = [r for r in recording if (r.get("labels") or {}).get("shape")]
    assert {(r["record"], r["labels"]["shape"]) for r in shaped} == {
        ("node_numa:podres_shape_fitting_pods:min", "vf2_cpu4"),
        ("node:podres_shape_fitting_pods_by_totals:min", "vf2_cpu4"),
    }
    assert all('resource="intel.com/sriov"' in r["expr"] and "/ 4)" in r["expr"] for r in shaped)
    (alert,) = (
        r
        for r in rules_of(tmp_path / "out" / "podres-alerts.yaml")
        if r["alert"] == "PodresShapeFragmented"
    )
    assert '"shape", "vf2_cpu4"' in alert["expr"] and "gpu4" not in alert["expr"]
