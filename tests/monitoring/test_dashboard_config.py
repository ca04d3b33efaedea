"""Boards for other label names and jobs (``tools/dashboards.py --config FILE``): every query,
legend and column uses the configured names, the defaults change nothing, a bad file is refused
naming the file and the key, and the renamed boards answer on a Prometheus that labels its
targets so."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.monitoring.dashboard_lint import (
    grafana_values,
    lint,
    panels,
    split_variable_query,
    substitute,
    targets,
    variable_query,
    variables,
)
from tests.monitoring.dashboard_promql import tokenize
from tests.monitoring.prom import NodePrometheus, running_prometheus
from tests.monitoring.test_dashboards import _generator
from tests.support import Prometheus, wait_until

SETTINGS = {
    "node_label": "host",
    "cluster_label": "region",
    "exporter_selector": 'job="gpu/podres"',
    "plugin_selector": 'job=~"gpu/podres-plugin|gpu/podres"',
}
RENAMED = {"node": "host", "cluster": "region"}
# Queries whose answer comes and goes from one instant to the next on the demo, so that two
# copies scraped a moment apart may differ.
VOLATILE = {
    "podres-accelerators / Active clock-event reasons / A": "a reason is active now or not",
    "podres-waste / Shared-pool contention per NUMA node / A": "needs two CPU readings",
    "podres-gpus / Held interfaces without traffic / A":
        "a counter the exporter has not re-read yet has a rate of 0 over a few seconds",
}  # fmt: skip


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return _generator()


@pytest.fixture(scope="module")
def renamed(generator: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The boards generated with :data:`SETTINGS`, by uid."""
    path = tmp_path_factory.mktemp("settings") / "labels.json"
    path.write_text(json.dumps(SETTINGS))
    out = tmp_path_factory.mktemp("boards")
    assert generator.main(["--config", str(path), "--out", str(out)]) == 0
    boards = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    return {b["uid"]: b for b in boards}


def _label_idents(expr: str) -> set[str]:
    return {t.text for t in tokenize(expr) if t.kind == "ident"} & set(RENAMED)


def test_every_query_legend_and_column_uses_the_configured_labels(
    renamed: dict[str, Any],
) -> None:
    """No query, variable, legend or table column of any board names `node` or `cluster`
    as a label; each selector is scoped by `host` and `region`; the lint passes."""
    assert len(renamed) == 6
    for uid, board in renamed.items():
        assert lint(board, RENAMED) == [], uid
        for target in targets(board):
            assert not _label_idents(target.expr), (target.key, target.expr)
            assert 'host=~"$node"' in target.expr or 'host=""' in target.expr, target.key
            assert 'region=~"$cluster"' in target.expr, target.key
        for panel in panels(board):
            for query in panel["targets"]:
                assert "{{node}}" not in query["legendFormat"], panel["title"]
            for step in panel.get("transformations", []):
                options = step["options"]
                fields = {
                    *options.get("include", {}).get("names", ()),
                    *options.get("indexByName", {}),
                    *options.get("renameByName", {}),
                }
                assert not fields & set(RENAMED), (panel["title"], fields)
        for variable in variables(board):
            if variable["type"] == "query":
                _, selector, label = split_variable_query(variable_query(variable))
                assert not _label_idents(selector) and label not in RENAMED, variable
    node = next(v for v in variables(renamed["podres-fleet"]) if v["name"] == "node")
    assert variable_query(node) == 'label_values(podres_build_info{region=~"$cluster"}, host)'
    job = next(v for v in variables(renamed["podres-health"]) if v["name"] == "job")
    assert job["query"] == "gpu/podres|gpu/podres-plugin"
    columns = {
        name
        for b in renamed.values()
        for p in panels(b)
        for step in p.get("transformations", [])
        if step["id"] == "organize"
        for name in step["options"]["renameByName"]
    }
    assert "host" in columns and "node" not in columns
    banner = next(p for p in panels(renamed["podres-gpus"]) if p["title"] == "Scrape labels")
    texts = json.dumps(banner["fieldConfig"]["defaults"]["mappings"])
    assert "series lack the host label" in texts


def test_the_defaults_change_nothing(generator: ModuleType) -> None:
    """Generating with the default settings gives the committed boards; the job constant is
    the default selectors' union."""
    defaults = generator.MixinConfig()
    assert generator.boards(config=defaults) == generator.boards()
    assert generator.job_regex(defaults) == generator.JOBS


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ('{"node_lable": "host"}', "unknown key 'node_lable' (did you mean 'node_label'?)"),
        ('{"node_label": ""}', "key 'node_label' must be a non-empty string"),
        ('{"node_label": 3}', "key 'node_label' must be a non-empty string"),
        ('{"exporter_selector": "service=\\"x\\""}',
         "key 'exporter_selector': the boards need one job matcher"),
        ('{"plugin_selector": "job=~\\"a\\", env=\\"b\\""}',
         "key 'plugin_selector': the boards need one job matcher"),
        ("[1]", "expected a JSON object of settings"),
        ("{", "not JSON"),
        (None, "cannot be read"),
    ],
)  # fmt: skip
def test_a_bad_settings_file_is_refused_naming_file_and_key(
    generator: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    named: str,
) -> None:
    """Exit 2, one line naming the file and the key, no traceback, nothing written."""
    path = tmp_path / "labels.json"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "boards"
    assert generator.main(["--config", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dashboards: {path}: "), err
    assert named in err, err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.prometheus
def test_the_renamed_boards_answer_where_targets_carry_those_labels(
    renamed: dict[str, Any],
    generator: ModuleType,
    quiet_demo: tuple[str, str],
    tmp_path: Path,
) -> None:
    """One Prometheus scrapes the demo twice: once labelled `node`/`cluster` (node demo-a)
    under the default jobs, once `host`/`region` (node demo-b) under the configured ones. Each
    renamed query, asked for demo-b, returns data exactly where the committed board's does
    for demo-a: a query still reading `node` would find no demo-b."""
    exporter, plugin = quiet_demo
    copies = (
        ({"node": "demo-a", "cluster": "a"}, ("podres-exporter", "podres-device-plugin")),
        ({"host": "demo-b", "region": "b"}, ("gpu/podres", "gpu/podres-plugin")),
    )
    jobs = [
        {"job_name": job, "honor_labels": True,
         "static_configs": [{"targets": [target], "labels": labels}]}
        for labels, names in copies
        for job, target in zip(names, (exporter, plugin), strict=True)
    ]  # fmt: skip
    with running_prometheus(tmp_path, jobs, up=4) as url:
        # Every target scraped five times: each rate() and increase() has its samples.
        warm = "count(count_over_time(up[1m]) >= 5) == 4"
        wait_until(lambda: Prometheus(url).query(warm), timeout=30)
        default_empty, count = _empty_queries(url, generator.boards(), "demo-a", "a")
        renamed_empty, renamed_count = _empty_queries(url, renamed, "demo-b", "b")
    assert count == renamed_count > 80
    assert renamed_empty - set(VOLATILE) == default_empty - set(VOLATILE)


def _empty_queries(
    url: str, boards: dict[str, Any], node: str, cluster: str
) -> tuple[set[str], int]:
    """The panel queries of ``boards`` that return nothing on ``url`` for ``node`` and
    ``cluster``, and how many ran."""
    prom = NodePrometheus(url, "", "", node, cluster, 1)
    empty, count = set(), 0
    for board in boards.values():
        values = grafana_values(board, prom)
        for target in targets(board):
            count += 1
            if not prom.query(substitute(target.expr, values)):
                empty.add(target.key)
    return empty, count
