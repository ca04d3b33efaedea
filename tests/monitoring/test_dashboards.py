"""The Grafana dashboards: in step with their generator, valid against Grafana's published
types, clean under the lint, and every query answered by a real Prometheus scraping the demo."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.monitoring.dashboard_lint import (
    MIG_OVERLAP,
    MIN_LITERAL_WINDOW_S,
    duration_seconds,
    grafana_values,
    is_device_metric,
    lint,
    lint_expr,
    panels,
    schema_errors,
    split_variable_query,
    substitute,
    targets,
    used_variables,
    variable_query,
    variables,
)
from tests.monitoring.dashboard_promql import metric_names, parse
from tests.monitoring.prom import NodePrometheus

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "dashboards"
DOCS = ROOT / "docs"

# Every query that returns nothing on the demo, and why. The test below asserts that this is
# exactly the set of empty queries: a query that starts returning data, or stops, fails it.
EMPTY_ON_DEMO = {
    "podres-health / Kubelet errors and rate-limit hits / A":
        "the simulated kubelet answers every call: it rate-limits at 100 queries/s, and the "
        "exporter polls it every 10 s",
    "podres-accelerators / XID errors / A": "the demo's NVML raises no XID events",
    "podres-accelerators / amdgpu busy / A": "the demo node has no AMD GPUs (DRM cards)",
    "podres-accelerators / amdgpu VRAM used / A": "the demo node has no AMD GPUs (DRM cards)",
    "podres-gpus / Held interfaces without traffic / A":
        "every interface the simulated host has up moves traffic (with the threshold raised, "
        "test_idle_interfaces_are_the_held_ones lists them)",
    "podres-fleet / Nodes that admit each shape / A":
        "the demo node is full for every default shape: all its whole GPUs are held and its "
        "free shared pool (6 CPUs) holds no 16-CPU pod (the table beside it shows the zeros)",
}  # fmt: skip
# Variables every board has, and the multi-value "All" ones where they apply.
COMMON_VARIABLES = ("datasource", "cluster", "node")
MULTI_VARIABLES = ("node", "namespace", "pod", "resource", "gpu")


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _generator() -> ModuleType:
    _load("grafana")  # tools/dashboards.py imports them as sibling modules
    _load("mixin_config")
    return _load("dashboards")


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return _generator()


@pytest.fixture(scope="module")
def boards() -> dict[str, dict[str, Any]]:
    """The committed boards by uid."""
    out = {}
    for path in sorted(COMMITTED.glob("*.json")):
        board = json.loads(path.read_text())
        out[board["uid"]] = board
    return out


def _exprs(board: dict[str, Any]) -> Iterator[str]:
    for target in targets(board):
        yield target.expr
    for variable in variables(board):
        if variable["type"] == "query":
            yield variable_query(variable)


# ---- generation --------------------------------------------------------------------------


def test_committed_dashboards_are_in_step_with_the_generator(generator: ModuleType) -> None:
    """Regenerating in memory gives the committed dashboards/*.json byte for byte."""
    fresh = generator.rendered()
    committed = {p.name: p.read_text() for p in COMMITTED.glob("*.json")}
    assert sorted(fresh) == sorted(committed), "file sets differ: run `make dashboards`"
    differ = sorted(name for name in fresh if fresh[name] != committed[name])
    assert not differ, f"out of step with tools/dashboards.py: {differ}; run `make dashboards`"


def test_check_mode_reports_a_stale_file(generator: ModuleType, tmp_path: Path) -> None:
    """`tools/dashboards.py --check` exits 0 on boards just written and 1 once one is edited."""
    assert generator.main(["--out", str(tmp_path)]) == 0
    assert generator.main(["--check", "--out", str(tmp_path)]) == 0
    edited = tmp_path / "podres-fleet.json"
    edited.write_text(edited.read_text().replace("podres / Fleet", "podres / Fleat"))
    assert generator.main(["--check", "--out", str(tmp_path)]) == 1


def test_multi_cluster_boards_show_the_cluster_picker(generator: ModuleType) -> None:
    """--multi-cluster changes nothing but the cluster variable's visibility."""
    single, multi = generator.boards(), generator.boards(multi_cluster=True)
    for name, board in single.items():
        other = copy.deepcopy(multi[name])
        cluster = next(v for v in variables(other) if v["name"] == "cluster")
        assert cluster["hide"] == 0
        cluster["hide"] = 2
        assert other == board, name


# ---- shape -------------------------------------------------------------------------------


def test_every_board_validates_against_grafanas_types(boards: dict[str, dict[str, Any]]) -> None:
    """Boards, panel options, field configs and queries fit @grafana/schema's types."""
    assert len(boards) == 6
    for uid, board in boards.items():
        assert schema_errors(board) == [], uid


@pytest.mark.parametrize(
    ("error", "breaks"),
    [
        ("'legends' was unexpected", lambda b, p: p["options"].update(legends={})),
        ("'reduceOptions' is a required property",
         lambda b, p: _first(b, "stat")["options"].pop("reduceOptions")),
        ("target A: 'expr' is a required property", lambda b, p: p["targets"][0].pop("expr")),
        ("'legend' was unexpected", lambda b, p: p["targets"][0].update(legend="x")),
        ("$.panels[", lambda b, p: p["gridPos"].pop("w")),
        ("$.templating.list[1].hide: 7 is not one of",
         lambda b, p: b["templating"]["list"][1].update(hide=7)),
        ("$.templating.list[1].type: 'prometheus' is not one of",
         lambda b, p: b["templating"]["list"][1].update(type="prometheus")),
        ("'schemaVersion' is a required property", lambda b, p: b.pop("schemaVersion")),
        ("custom.cellOptions",
         lambda b, p: _first(b, "table")["fieldConfig"]["defaults"]["custom"]["cellOptions"]
         .update(type="sparkles")),
        ("'yAxis' is a required property",
         lambda b, p: _first(b, "heatmap")["options"].pop("yAxis")),
    ],
)  # fmt: skip
def test_schema_rejects_a_broken_board(
    boards: dict[str, dict[str, Any]], error: str, breaks: Any
) -> None:
    """Each breakage of a valid board is caught by the schema check, where it is."""
    board = copy.deepcopy(boards["podres-health"])
    breaks(board, _first(board, "timeseries"))
    errors = schema_errors(board)
    assert any(error in e for e in errors), errors


def _first(board: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(p for p in panels(board) if p["type"] == kind)


def test_boards_have_stable_uids_and_link_to_each_other(
    boards: dict[str, dict[str, Any]],
) -> None:
    """Each board has a fixed uid, is tagged, and links to the others keeping variables."""
    for name in (p.name for p in COMMITTED.glob("*.json")):
        assert json.loads((COMMITTED / name).read_text())["uid"] == name.removesuffix(".json")
    for uid, board in boards.items():
        assert re.fullmatch(r"podres-[a-z-]+", uid)
        assert "podres" in board["tags"]
        assert board["schemaVersion"] == 38
        [link] = board["links"]
        assert link["type"] == "dashboards" and link["tags"] == ["podres"]
        assert link["includeVars"] and link["keepTime"]


def test_fleet_board_links_each_node_into_the_per_node_boards(
    boards: dict[str, dict[str, Any]],
) -> None:
    """The fleet tables' node cells link to every other board with var-node set."""
    fleet = boards["podres-fleet"]
    linked: set[str] = set()
    for panel in panels(fleet):
        for override in panel["fieldConfig"]["overrides"]:
            for prop in override["properties"]:
                if prop["id"] == "links":
                    assert override["matcher"]["options"] == "Node"
                    for link in prop["value"]:
                        found = re.match(r"/d/([\w-]+)/", link["url"])
                        assert found, link
                        assert "var-node=${__value.raw}" in link["url"]
                        assert "${__url_time_range}" in link["url"]
                        linked.add(found.group(1))
    assert linked == set(boards) - {"podres-fleet", "podres-gpus"}


def test_panel_titles_are_unique_within_a_board(boards: dict[str, dict[str, Any]]) -> None:
    """A panel's title names it (in the docs and in EMPTY_ON_DEMO): no two alike on a board."""
    for uid, board in boards.items():
        titles = [p["title"] for p in panels(board)]
        assert len(titles) == len(set(titles)), uid


def test_only_the_allowed_panel_types(boards: dict[str, dict[str, Any]]) -> None:
    """No graph or other legacy panels: timeseries, stat, table, state-timeline, heatmap."""
    kinds = {p["type"] for b in boards.values() for p in panels(b)}
    assert kinds == {"timeseries", "stat", "table", "state-timeline", "heatmap"}


def test_every_board_has_its_variables(boards: dict[str, dict[str, Any]]) -> None:
    """datasource, a hidden single cluster, multi-select "All" node, and each used variable."""
    for uid, board in boards.items():
        defined = {v["name"]: v for v in variables(board)}
        assert tuple(defined)[:3] == COMMON_VARIABLES, uid
        assert defined["datasource"]["type"] == "datasource"
        assert defined["datasource"]["query"] == "prometheus"
        cluster = defined["cluster"]
        assert (cluster["type"], cluster["hide"], cluster["multi"]) == ("query", 2, False)
        for name in MULTI_VARIABLES:
            if name in defined:
                variable = defined[name]
                assert variable["multi"] and variable["includeAll"], (uid, name)
                assert variable["allValue"] == ".*", (uid, name)
        used = set().union(*(used_variables(e) for e in _exprs(board)))
        used |= {"datasource"}  # every panel's and variable's data source
        assert {n for n in used if not n.startswith("__")} == set(defined), uid


def test_every_panel_says_what_it_answers(boards: dict[str, dict[str, Any]]) -> None:
    """Each panel has a description, and docs/dashboards.md names each board and panel."""
    docs = (DOCS / "dashboards.md").read_text()
    sections = re.split(r"^## ", docs, flags=re.M)
    for uid, board in boards.items():
        [section] = [s for s in sections if f"`{uid}`" in s.split("\n", 1)[0]]
        for panel in panels(board):
            assert panel["description"].strip(), (uid, panel["title"])
            assert f"**{panel['title']}**" in section, (uid, panel["title"])


# ---- lint --------------------------------------------------------------------------------


def test_lint_passes_on_every_board(boards: dict[str, dict[str, Any]]) -> None:
    """Units, node/cluster matchers, rate windows and GPU sums are right on every board."""
    assert [p for board in boards.values() for p in lint(board)] == []


GOOD = 'podres_gpu_utilization_ratio{node=~"$node", cluster=~"$cluster"}'


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ('podres_node_cpus{cluster=~"$cluster"}', 'no node=~"$node"'),
        ('podres_node_cpus{node=~"$node"}', 'no cluster=~"$cluster"'),
        ('sum(up{cluster=~"$cluster", job="x"})', 'no node=~"$node"'),
        ('podres_node_cpus{node=~".*", cluster=~"$cluster"}', 'no node=~"$node"'),
        (f'{GOOD} / on (uuid) podres_gpu_info{{cluster=~"$cluster"}}', 'no node=~"$node"'),
        ('rate(podres_kubelet_requests_total{node=~"$node", cluster=~"$cluster"}[30s])',
         "rate(...[30s])"),
        ('increase(podres_kubelet_requests_total{node=~"$node", cluster=~"$cluster"}'
         "[$__interval])", "increase(...[$__interval])"),
        ('sum by (namespace) (podres_gpu_memory_used_bytes{node=~"$node", cluster=~"$cluster"}'
         ' or podres_gpu_holder_memory_used_bytes{node=~"$node", cluster=~"$cluster"})',
         "per-holder"),
        ('sum(podres_gpu_holder_sm_utilization_ratio{node=~"$node", cluster=~"$cluster"}) '
         f"+ sum({GOOD})", "per-holder"),
        (f"sum by (namespace) ({GOOD} * on (uuid) group_right label_replace("
         'podres_container_device_info{node=~"$node", cluster=~"$cluster"}, '
         '"uuid", "$1", "device_id", "(.+)::[0-9]+"))', "copied to each holder"),
        ('sum(podres_gpu_memory_used_bytes{node=~"$node", cluster=~"$cluster"})',
         "MIG-enabled GPUs"),
        ('count(podres_build_info{node!="", cluster=~"$cluster"})', 'no node=~"$node"'),
        ('avg_over_time(podres_gpu_utilization_ratio{node=~"$node", cluster=~"$cluster"}'
         "[$interval])", "avg_over_time(...[$interval])"),
        ('sum by (namespace) (podres_gpu_memory_total_bytes{node=~"$node", '
         'cluster=~"$cluster", uuid=~"$gpu"})', "MIG-enabled GPUs"),
    ],
)  # fmt: skip
def test_lint_rejects_a_bad_query(expr: str, problem: str) -> None:
    """Each rule catches the mistake it is for."""
    problems = lint_expr(expr)
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    "expr",
    [
        'rate(podres_kubelet_requests_total{node="$node", cluster="$cluster"}[$__rate_interval])',
        'increase(podres_gpu_xid_errors_total{node=~"$node", cluster=~"$cluster"}[5m])',
        'sum by (namespace) (podres_gpu_holder_memory_used_bytes{node=~"$node", '
        'cluster=~"$cluster"})',
        'sum(podres_gpu_memory_used_bytes{node=~"$node", cluster=~"$cluster", uuid!~"MIG-.+"})',
        'sum by (node, uuid) (podres_gpu_memory_used_bytes{node=~"$node", cluster=~"$cluster"})',
        'sum(podres_gpu_memory_used_bytes{node=~"$node", cluster=~"$cluster"} unless on (uuid) '
        'podres_gpu_info{node=~"$node", cluster=~"$cluster", mig_mode="enabled"})',
        f'sum by (namespace) ({GOOD} and on (uuid) (podres_gpu_shared{{node=~"$node", '
        'cluster=~"$cluster"} == 1))',
        'count(podres_build_info{node="", cluster=~"$cluster"}) > bool 0 or vector(0)',
        f"avg_over_time({GOOD}[$window]) < $threshold",
    ],
)  # fmt: skip
def test_lint_accepts_a_right_query(expr: str) -> None:
    """The rules leave correct queries alone."""
    assert lint_expr(expr) == []


def test_lint_rejects_a_bad_panel(boards: dict[str, dict[str, Any]]) -> None:
    """A panel without a unit, a graph panel, and an unscoped variable are each reported."""
    board = copy.deepcopy(boards["podres-node-allocation"])
    first = next(panels(board))
    first["fieldConfig"]["defaults"].pop("unit")
    second = list(panels(board))[1]
    second["type"] = "graph"
    namespace = next(v for v in variables(board) if v["name"] == "namespace")
    namespace["query"]["query"] = "label_values(podres_container_exclusive_cpus, namespace)"
    problems = "\n".join(lint(board))
    assert f"{first['title']}: no unit" in problems
    assert f"{second['title']}: panel type 'graph' is not allowed" in problems
    assert 'variable namespace: podres_container_exclusive_cpus: no cluster=~"$cluster"' in (
        problems
    )


def test_every_metric_is_documented(boards: dict[str, dict[str, Any]]) -> None:
    """Each podres_* metric a board reads is in docs/metrics.md or docs/plugin.md."""
    documented = _documented()
    assert "podres_plugin_registered" in documented and "podres_node_cpus" in documented
    used: set[str] = set()
    for board in boards.values():
        for expr in _exprs(board):
            selector_text = split_variable_query(expr)[1] if expr.startswith("label_") else expr
            for selector in parse(selector_text).selectors:
                name, regex = metric_names(selector)
                if regex:
                    assert any(re.fullmatch(regex, n) for n in documented), regex
                if name:
                    used.add(name)
    undocumented = {n for n in used if _base(n) not in documented}
    prometheus_own = {"up", "scrape_duration_seconds"}
    process = {n for n in undocumented if n.startswith("process_")}
    assert "`process_*`" in (DOCS / "metrics.md").read_text()
    assert undocumented - process - prometheus_own == set()


def _documented() -> set[str]:
    """Our metrics (docs/metrics.md, docs/plugin.md) and recording rules (docs/rules.md)."""
    names = set()
    for doc in ("metrics.md", "plugin.md"):
        rows = re.findall(r"^\| ([^|]*`podres_[^|]*)\|", (DOCS / doc).read_text(), re.M)
        names |= {name for cell in rows for name in re.findall(r"`(podres_\w+)`", cell)}
    rules = DOCS / "rules.md"
    if rules.exists():
        names |= set(re.findall(r"^\| `(\w+:podres_\w+:\w+)` \|", rules.read_text(), re.M))
    return names


def _base(name: str) -> str:
    return re.sub(r"_(bucket|count|sum)$", "", name)


# ---- against the demo --------------------------------------------------------------------


@pytest.mark.prometheus
def test_every_query_returns_data_on_the_demo(
    boards: dict[str, dict[str, Any]], demo_prometheus: NodePrometheus
) -> None:
    """Each panel query, with the variables as Grafana fills them, returns series; the ones
    that cannot on the demo are exactly those listed, with the reason, in EMPTY_ON_DEMO."""
    empty = set()
    count = 0
    for board in boards.values():
        values = grafana_values(board, demo_prometheus)
        for target in targets(board):
            query = substitute(target.expr, values)
            assert not used_variables(query) - {"1"}, query
            count += 1
            if not demo_prometheus.query(query):
                empty.add(target.key)
    assert count > 80
    assert empty == set(EMPTY_ON_DEMO), (
        f"empty but not listed: {sorted(empty - set(EMPTY_ON_DEMO))}; "
        f"listed but not empty: {sorted(set(EMPTY_ON_DEMO) - empty)}"
    )


@pytest.mark.prometheus
def test_every_variable_query_returns_values_on_the_demo(
    boards: dict[str, dict[str, Any]], demo_prometheus: NodePrometheus
) -> None:
    """Each label_values(...) variable answers through /api/v1/label/<l>/values with the
    selector as match[], and the node and cluster variables offer the demo's."""
    seen: dict[str, list[str]] = {}
    for board in boards.values():
        values = grafana_values(board, demo_prometheus)
        for variable in variables(board):
            if variable["type"] != "query":
                continue
            kind, selector, label = split_variable_query(variable_query(variable))
            selector = substitute(selector, values)
            if kind == "label_values":
                found = demo_prometheus.label_values(label, selector)
            else:
                found = [str(r["metric"]) for r in demo_prometheus.query(selector)]
            assert found, (board["uid"], variable["name"], selector)
            seen[variable["name"]] = found
    assert seen["node"] == [demo_prometheus.node]
    assert seen["cluster"] == [demo_prometheus.cluster]
    assert "ml-training" in seen["namespace"]
    assert "nvidia.com/gpu" in seen["resource"]
    assert any(v.startswith("MIG-") for v in seen["gpu"])


@pytest.mark.prometheus
def test_mig_overlap_is_what_the_demo_serves(demo_prometheus: NodePrometheus) -> None:
    """The lint's MIG rule names exactly the device metrics that a MIG-enabled GPU and its
    instances both report, and the GPU's memory covers its instances'."""
    scope = f'node="{demo_prometheus.node}"'
    parents = demo_prometheus.query(f'podres_gpu_info{{{scope}, mig_mode="enabled"}}')
    assert parents, "the demo has a MIG-enabled GPU"
    parent = parents[0]["metric"]["uuid"]
    instances = {
        r["metric"]["uuid"]
        for r in demo_prometheus.query(f'podres_gpu_info{{{scope}, parent_uuid="{parent}"}}')
    }
    assert len(instances) > 1

    def names(uuid_regex: str) -> set[str]:
        rows = demo_prometheus.query(
            f'count by (__name__) ({{__name__=~"podres_gpu_.+", {scope}, uuid=~"{uuid_regex}"}})'
        )
        return {r["metric"]["__name__"] for r in rows if is_device_metric(r["metric"]["__name__"])}

    assert names(parent) & names("|".join(instances)) == MIG_OVERLAP
    [whole] = demo_prometheus.query(f'podres_gpu_memory_used_bytes{{{scope}, uuid="{parent}"}}')
    parts = demo_prometheus.query(
        f'sum(podres_gpu_memory_used_bytes{{{scope}, uuid=~"{"|".join(instances)}"}})'
    )
    assert float(whole["value"][1]) >= 0.9 * float(parts[0]["value"][1])


@pytest.mark.prometheus
def test_a_shared_gpu_is_exported_once_and_split_per_holder(
    demo_prometheus: NodePrometheus,
) -> None:
    """What the double-counting rule rests on: a shared GPU's device series has empty holder
    labels and is one series; its per-holder series name each holder."""
    scope = f'node="{demo_prometheus.node}"'
    shared = demo_prometheus.query(f"podres_gpu_shared{{{scope}}} == 1")
    assert shared
    for row in shared:
        uuid = row["metric"]["uuid"]
        [device] = demo_prometheus.query(f'podres_gpu_utilization_ratio{{{scope}, uuid="{uuid}"}}')
        assert device["metric"].get("namespace", "") == ""
        holders = demo_prometheus.query(
            f'podres_gpu_holder_sm_utilization_ratio{{{scope}, uuid="{uuid}"}}'
        )
        assert len({h["metric"].get("pod", "") for h in holders}) > 1


def test_window_choices_are_long_enough(boards: dict[str, dict[str, Any]]) -> None:
    """Every choice of a `$window` variable is as long as the lint asks of a literal window."""
    windows = [v for b in boards.values() for v in variables(b) if v["name"] == "window"]
    assert windows
    for window in windows:
        for option in window["options"]:
            seconds = duration_seconds(option["value"])
            assert seconds is not None and seconds >= MIN_LITERAL_WINDOW_S, option


def _panel_query(board: dict[str, Any], title: str, ref_id: str = "A") -> str:
    [target] = [t for t in targets(board) if t.panel == title and t.ref_id == ref_id]
    return target.expr


def _ask(board: dict[str, Any], prom: NodePrometheus, expr: str, **values: str) -> list[Any]:
    return prom.query(substitute(expr, {**grafana_values(board, prom), **values}))


@pytest.mark.prometheus
def test_the_gpu_table_has_one_row_per_gpu(
    boards: dict[str, dict[str, Any]], demo_prometheus: NodePrometheus
) -> None:
    """Each query of the GPU table gives at most one series per UUID, and the table's rows
    (the memory query: every GPU has memory) are every GPU and MIG instance the demo has."""
    board = boards["podres-gpus"]
    gpus = {r["metric"]["uuid"] for r in demo_prometheus.query("podres_gpu_info")}
    for ref_id in "ABCD":
        rows = _ask(board, demo_prometheus, _panel_query(board, "GPUs", ref_id))
        uuids = [r["metric"]["uuid"] for r in rows]
        assert len(uuids) == len(set(uuids)), ref_id
        assert set(uuids) <= gpus and (ref_id == "A" or set(uuids) == gpus), ref_id
    holders = _ask(board, demo_prometheus, _panel_query(board, "GPUs", "D"))
    assert all(float(r["value"][1]) >= 0 for r in holders)


@pytest.mark.prometheus
def test_low_utilisation_lists_the_demos_idle_gpu_with_its_holder(
    boards: dict[str, dict[str, Any]], demo_prometheus: NodePrometheus
) -> None:
    """Under the default threshold: the demo's held-but-idle GPU, with its holder; at 0 none."""
    board = boards["podres-gpus"]
    expr = _panel_query(board, "GPUs with low utilisation")
    rows = _ask(board, demo_prometheus, expr)
    assert rows and all(float(r["value"][1]) < 0.1 for r in rows)
    assert any(r["metric"].get("namespace") == "ml-training" for r in rows)
    assert _ask(board, demo_prometheus, expr, threshold="0") == []


@pytest.mark.prometheus
def test_idle_interfaces_are_the_held_ones(
    boards: dict[str, dict[str, Any]], demo_prometheus: NodePrometheus
) -> None:
    """With the threshold raised above any traffic, the idle-interface panel lists exactly
    the interfaces containers hold, each with its holder."""
    board = boards["podres-gpus"]
    expr = _panel_query(board, "Held interfaces without traffic")
    rows = _ask(board, demo_prometheus, expr, idle_rate="1e15")
    held = demo_prometheus.query(f'podres_net_up{{node="{demo_prometheus.node}", namespace!=""}}')
    assert held
    assert sorted(
        (r["metric"]["address"], r["metric"]["namespace"], r["metric"]["pod"]) for r in rows
    ) == sorted(
        (r["metric"]["address"], r["metric"]["namespace"], r["metric"]["pod"]) for r in held
    )
