"""The dashboard lint, the Grafana variable substitution the tests run queries with, and the
schema check against Grafana's published types.

``lint(board)`` returns one line per problem (an empty list: clean). The rules:

- **unit**: every panel sets ``fieldConfig.defaults.unit`` ("none" or "short" must be said).
- **panel type**: only ``timeseries``, ``stat``, ``table``, ``state-timeline``, ``heatmap``
  (and rows).
- **scope**: every series selector of every panel query carries ``node=~"$node"`` (or
  ``node="$node"``) and ``cluster=~"$cluster"`` (or ``=``); variable queries carry the
  matchers of the variables above them (``cluster`` none, ``node`` the cluster's). A selector
  of the series that lack the label (``node=""``, the scrape-labels banner) is scoped too. The
  label names are the boards' settings (``labels``: ``{"node": "host"}`` for boards
  generated with ``node_label: host``).
- **window**: a range-vector function (``rate``, ``irate``, ``increase``, ``changes``,
  ``*_over_time``...) reads ``[$__rate_interval]``, ``[$__range]`` or a literal window of at
  least :data:`MIN_LITERAL_WINDOW_S` (four scrape intervals at a 15 s scrape interval), or
  ``[$window]``, a board variable whose choices are all that long (a test checks them).
- **double counting** (docs/metrics.md, "Telemetry joined to holders"): a GPU's device-level
  series (``podres_gpu_*``, :func:`is_device_metric`) exist once per device, with empty holder
  labels when several containers share it; ``podres_gpu_holder_*`` split the same device per
  holder (processes of no holder on a series with empty labels). So an expression that sums
  must not

  1. combine device-level and per-holder GPU series: every GPU, shared or not, would count
     once in each;
  2. combine device-level GPU series with ``podres_container_device_info``: joining onto the
     holders copies a shared GPU's value to each of them;
  3. sum ``podres_gpu_memory_used_bytes`` or ``podres_gpu_memory_total_bytes`` across devices
     (a sum not ``by (uuid)``) without choosing one level of a MIG-enabled GPU: such a GPU and
     each of its MIG instances all report memory, the GPU's including its instances'. The
     expression must drop the MIG-enabled GPUs (``unless on (uuid) podres_gpu_info{...,
     mig_mode="enabled"}``) or select by a ``uuid`` regex naming ``MIG-``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

from tests.monitoring.dashboard_promql import Call, Expr, Selector, parse
from tests.monitoring.prom import NodePrometheus

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"
PANEL_TYPES = frozenset({"timeseries", "stat", "table", "state-timeline", "heatmap"})
# Production scrape interval assumed by literal windows (docs/dashboards.md): 4 x 15 s.
MIN_LITERAL_WINDOW_S = 60
GRAFANA_WINDOWS = frozenset({"$__rate_interval", "$__range", "${__rate_interval}", "${__range}"})
# The boards' own window variable (custom, every choice at least MIN_LITERAL_WINDOW_S).
WINDOW_VARIABLES = frozenset({"$window"})
# Device-level GPU metrics that both a MIG-enabled GPU and its MIG instances report (checked
# against the demo by test_mig_overlap_is_what_the_demo_serves).
MIG_OVERLAP = frozenset({"podres_gpu_memory_used_bytes", "podres_gpu_memory_total_bytes"})
# podres_gpu_* series that are not device telemetry: identity, health and the shared flag.
GPU_NOT_TELEMETRY = frozenset({"podres_gpu_info", "podres_gpu_healthy", "podres_gpu_shared"})
HOLDER_JOIN = "podres_container_device_info"
# The variables above each one: its query must be scoped by them.
VARIABLE_SCOPE = {"cluster": (), "node": ("cluster",)}
DEFAULT_SCOPE = ("cluster", "node")


def is_device_metric(name: str) -> bool:
    """A device-level GPU telemetry series: one per GPU or MIG instance."""
    return (
        name.startswith("podres_gpu_")
        and not name.startswith("podres_gpu_holder_")
        and name not in GPU_NOT_TELEMETRY
    )


def is_holder_metric(name: str) -> bool:
    """A per-holder split of a GPU's use."""
    return name.startswith("podres_gpu_holder_")


@dataclass(frozen=True)
class Target:
    """One query of a panel, where it is."""

    board: str
    panel: str
    ref_id: str
    expr: str

    @property
    def key(self) -> str:
        return f"{self.board} / {self.panel} / {self.ref_id}"


def panels(board: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel but rows, nested ones included."""
    for panel in board.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def targets(board: Mapping[str, Any]) -> Iterator[Target]:
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield Target(board["uid"], panel["title"], target["refId"], target["expr"])


def variables(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(board.get("templating", {}).get("list", []))


def variable_query(variable: Mapping[str, Any]) -> str:
    query = variable.get("query", "")
    return str(query["query"] if isinstance(query, dict) else query)


_VARIABLE_QUERY = re.compile(r"^\s*(label_values|query_result)\((.*)\)\s*$", re.S)


def split_variable_query(query: str) -> tuple[str, str, str]:
    """``label_values(sel, label)`` -> ("label_values", sel, label);
    ``query_result(expr)`` -> ("query_result", expr, "")."""
    found = _VARIABLE_QUERY.match(query)
    if not found:
        raise ValueError(f"not a label_values or query_result variable query: {query!r}")
    kind, body = found.groups()
    if kind == "query_result":
        return kind, body, ""
    selector, _, label = body.rpartition(",")
    return kind, selector.strip(), label.strip()


# ---- the lint ------------------------------------------------------------------------------


def _scoped(selector: Selector, variable: str, label: str) -> bool:
    matcher = selector.matcher(label)
    return matcher is not None and (
        (matcher.op in ("=~", "=") and matcher.value == f"${variable}")
        or (matcher.op == "=" and matcher.value == "")
    )


def _window_ok(window: str) -> bool:
    if window in GRAFANA_WINDOWS or window in WINDOW_VARIABLES:
        return True
    if ":" in window:
        return False  # subqueries: say what they mean with a recording rule instead
    seconds = duration_seconds(window)
    return seconds is not None and seconds >= MIN_LITERAL_WINDOW_S


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def duration_seconds(text: str) -> float | None:
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * _UNITS[u] for n, u in parts)


def _names(expr: Expr) -> set[str]:
    return {s.name for s in expr.selectors if s.name}


def lint_expr(
    expr_text: str,
    scope: tuple[str, ...] = DEFAULT_SCOPE,
    labels: Mapping[str, str] | None = None,
) -> list[str]:
    """Problems of one query: scope matchers, windows, double counting. ``labels`` names the
    label of each scope variable where it is not the variable's own name."""
    expr = parse(expr_text)
    problems = []
    for selector in expr.selectors:
        for variable in scope:
            label = (labels or {}).get(variable, variable)
            if not _scoped(selector, variable, label):
                what = selector.name or "{...}"
                problems.append(f'{what}: no {label}=~"${variable}" matcher')
    for call in expr.calls:
        for window in expr.ranges_of(call):
            if not _window_ok(window):
                problems.append(
                    f"{call.name}(...[{window}]): use $__rate_interval, $__range or a window of "
                    f"at least {MIN_LITERAL_WINDOW_S}s"
                )
    sums = [c for c in expr.calls if c.name == "sum"]
    if sums:
        names = _names(expr)
        device = {n for n in names if is_device_metric(n)}
        if device and any(is_holder_metric(n) for n in names):
            problems.append(
                "sums device-level GPU series with per-holder ones: each GPU counts twice"
            )
        if device and HOLDER_JOIN in names:
            problems.append(
                f"sums device-level GPU series joined to {HOLDER_JOIN}: a shared GPU's value is "
                "copied to each holder"
            )
    for call in sums:
        if call.grouping is not None and not call.without and "uuid" in call.grouping:
            continue
        inner = expr.selectors_in(call)
        overlapping = [s for s in inner if s.name in MIG_OVERLAP and not _mig_level(s)]
        if overlapping and not _drops_mig_parents(expr, call):
            problems.append(
                f"sums {overlapping[0].name} across devices with MIG-enabled GPUs and their "
                "instances both in: add `unless on (uuid) podres_gpu_info{...,"
                'mig_mode="enabled"}` or select by uuid'
            )
    return problems


def _mig_level(selector: Selector) -> bool:
    matcher = selector.matcher("uuid")
    return matcher is not None and matcher.op in ("=~", "!~") and "MIG-" in matcher.value


def _drops_mig_parents(expr: Expr, call: Call) -> bool:
    tokens = [t.text for t in expr.tokens[call.open_ : call.close + 1]]
    for i in range(len(tokens) - 4):
        if tokens[i : i + 5] == ["unless", "on", "(", "uuid", ")"]:
            after = [s for s in expr.selectors_in(call) if s.start == call.open_ + i + 5]
            if after and after[0].name == "podres_gpu_info":
                mode = after[0].matcher("mig_mode")
                if mode is not None and mode.op == "=" and mode.value == "enabled":
                    return True
    return False


def lint(board: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> list[str]:
    """Every problem of a board, one line each, naming the panel or variable."""
    problems = []
    for panel in panels(board):
        where = f"{board.get('uid')} / {panel.get('title')}"
        if panel.get("type") not in PANEL_TYPES:
            problems.append(f"{where}: panel type {panel.get('type')!r} is not allowed")
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if not isinstance(unit, str) or not unit:
            problems.append(f"{where}: no unit (fieldConfig.defaults.unit)")
        for target in panel.get("targets", []):
            problems += [
                f"{where} / {target.get('refId')}: {p}"
                for p in lint_expr(target["expr"], labels=labels)
            ]
    for variable in variables(board):
        if variable.get("type") != "query":
            continue
        name = variable["name"]
        scope = VARIABLE_SCOPE.get(name, DEFAULT_SCOPE)
        _, selector, _ = split_variable_query(variable_query(variable))
        problems += [
            f"{board.get('uid')} / variable {name}: {p}" for p in lint_expr(selector, scope, labels)
        ]
    return problems


# ---- Grafana's substitution, as the tests apply it -----------------------------------------


def grafana_values(board: Mapping[str, Any], prom: NodePrometheus) -> dict[str, str]:
    """What Grafana would put for each variable on ``prom``'s node: its node and cluster,
    "All" (``.*``) for the other multi-value variables, constants as they are, and the
    built-in intervals for a 1 s scrape interval."""
    values = {
        "__rate_interval": f"{4 * prom.scrape_interval_s}s",
        "__interval": f"{prom.scrape_interval_s}s",
        "__range": "1m",
        "node": prom.node,
        "cluster": prom.cluster,
    }
    for variable in variables(board):
        name = variable["name"]
        if variable["type"] == "constant":
            values[name] = variable["query"]
        elif variable["type"] == "custom":
            values[name] = variable["current"]["value"]
        elif variable.get("includeAll") and name not in values:
            values[name] = variable["allValue"]
    return values


_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::\w+)?\}")


def substitute(text: str, values: Mapping[str, str]) -> str:
    """Replace ``$name`` and ``${name}`` as Grafana does; unknown names (``$1``) stay."""

    def one(found: re.Match[str]) -> str:
        name = found.group(1) or found.group(2)
        return values.get(name, found.group())

    return _VARIABLE.sub(one, text)


def used_variables(text: str) -> set[str]:
    return {a or b for a, b in _VARIABLE.findall(text)}


# ---- Grafana's published types ---------------------------------------------------------------


@cache
def _validator(name: str) -> Draft7Validator | None:
    path = SCHEMA_DIR / f"{name}.json"
    if not path.exists():
        return None
    schema = json.loads(path.read_text())
    Draft7Validator.check_schema(schema)
    return Draft7Validator(schema)


def schema_errors(board: Mapping[str, Any]) -> list[str]:
    """Where the board breaks Grafana's dashboard, panel-options and Prometheus-query types."""
    board_validator = _validator("dashboard")
    query_validator = _validator("prometheus-query")
    assert board_validator is not None and query_validator is not None
    out = [f"{e.json_path}: {e.message}" for e in board_validator.iter_errors(board)]
    for panel in panels(board):
        where = f"{panel.get('title')}"
        kind = panel.get("type")
        options = _validator(f"{kind}-options")
        if options is None:
            out.append(f"{where}: no published options type for panel type {kind!r}")
            continue
        out += [f"{where}: options{e.json_path[1:]}: {e.message}"
                for e in options.iter_errors(panel.get("options", {}))]  # fmt: skip
        custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
        field = _validator(f"{kind}-fieldconfig")
        if field is not None:
            out += [f"{where}: fieldConfig.defaults.custom{e.json_path[1:]}: {e.message}"
                    for e in field.iter_errors(custom)]  # fmt: skip
        elif custom:
            out.append(f"{where}: panel type {kind!r} has no custom field config")
        for target in panel.get("targets", []):
            out += [f"{where}: target {target.get('refId')}{e.json_path[1:]}: {e.message}"
                    for e in query_validator.iter_errors(target)]  # fmt: skip
    return out
