"""A small typed builder for classic Grafana dashboard JSON.

It writes the dashboard model that Grafana 10 to 13 import as they are (not the v2 schema):
``schemaVersion`` 38, the version Grafana 10.0 writes, so that every later Grafana migrates the
boards forward at load. Only the panel types ``timeseries``, ``stat``, ``table``,
``state-timeline`` and ``heatmap`` can be built. Every panel queries the Prometheus data source
chosen in the board's ``datasource`` variable, and every panel states its unit.

The shapes follow Grafana's published types (the npm package ``@grafana/schema``); the tests
check the output against a JSON schema converted from them (tests/monitoring/schema/).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

JSON = dict[str, Any]
PanelType = Literal["timeseries", "stat", "table", "state-timeline", "heatmap"]
QueryFormat = Literal["time_series", "table", "heatmap"]

SCHEMA_VERSION = 38
GRID_WIDTH = 24
DATASOURCE: JSON = {"type": "prometheus", "uid": "${datasource}"}
# The refId Grafana's Prometheus variable editor gives the query of a query variable.
VARIABLE_REF_ID = "PrometheusVariableQueryEditor-VariableQuery"


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel. ``instant`` queries read the latest value (tables, stats)."""

    expr: str
    legend: str = ""
    instant: bool = False
    format: QueryFormat = "time_series"

    def to_json(self, ref_id: str) -> JSON:
        return {
            "datasource": DATASOURCE,
            "editorMode": "code",
            "expr": self.expr,
            "format": self.format,
            "instant": self.instant,
            "legendFormat": self.legend or "__auto",
            "range": not self.instant,
            "refId": ref_id,
        }


@dataclass(frozen=True)
class Link:
    """A data link: a click on a value opens ``url`` (Grafana interpolates its variables)."""

    title: str
    url: str

    def to_json(self) -> JSON:
        return {"title": self.title, "url": self.url}


@dataclass(frozen=True)
class Panel:
    """A visualisation. Build it with :func:`timeseries`, :func:`stat`, :func:`table`,
    :func:`state_timeline` or :func:`heatmap`, which fill in the options Grafana requires."""

    type: PanelType
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str
    width: int
    height: int
    options: Mapping[str, Any]
    custom: Mapping[str, Any]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    overrides: tuple[JSON, ...] = ()
    transformations: tuple[JSON, ...] = ()

    def to_json(self, panel_id: int, x: int, y: int) -> JSON:
        defaults: JSON = {"unit": self.unit, **self.defaults, "custom": dict(self.custom)}
        out: JSON = {
            "type": self.type,
            "title": self.title,
            "description": self.description,
            "id": panel_id,
            "gridPos": {"h": self.height, "w": self.width, "x": x, "y": y},
            "datasource": DATASOURCE,
            "targets": [q.to_json(_ref_id(i)) for i, q in enumerate(self.queries)],
            "fieldConfig": {"defaults": defaults, "overrides": list(self.overrides)},
            "options": dict(self.options),
        }
        if self.transformations:
            out["transformations"] = list(self.transformations)
        return out


@dataclass(frozen=True)
class Row:
    """A titled row of panels, laid out left to right, wrapping at the grid's 24 columns."""

    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    """A template variable; build it with :func:`datasource_variable`, :func:`query_variable`
    or :func:`constant_variable`."""

    name: str
    body: Mapping[str, Any]

    def to_json(self) -> JSON:
        return {"name": self.name, **self.body}


@dataclass(frozen=True)
class Dashboard:
    """A board: its ``uid`` is stable, so links and provisioning can name it."""

    uid: str
    title: str
    description: str
    tags: tuple[str, ...]
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    links: tuple[JSON, ...] = ()
    time_from: str = "now-1h"
    refresh: str = "1m"

    def to_json(self) -> JSON:
        panels: list[JSON] = []
        next_id = 1
        y = 0
        for row in self.rows:
            panels.append(
                {
                    "type": "row",
                    "title": row.title,
                    "id": next_id,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                    "panels": [],
                }
            )
            next_id += 1
            y += 1
            x = 0
            line_height = 0
            for panel in row.panels:
                if x + panel.width > GRID_WIDTH:
                    x, y, line_height = 0, y + line_height, 0
                panels.append(panel.to_json(next_id, x, y))
                next_id += 1
                x += panel.width
                line_height = max(line_height, panel.height)
            y += line_height
        return {
            "id": None,
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": list(self.tags),
            "editable": True,
            "graphTooltip": 1,
            "timezone": "browser",
            "time": {"from": self.time_from, "to": "now"},
            "refresh": self.refresh,
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "links": list(self.links),
            "templating": {"list": [v.to_json() for v in self.variables]},
            "panels": panels,
        }


def _ref_id(index: int) -> str:
    return chr(ord("A") + index)


# ---- variables -----------------------------------------------------------------------------


def datasource_variable(label: str = "Data source") -> Variable:
    """The Prometheus data source every query goes to."""
    return Variable(
        "datasource",
        {"label": label, "type": "datasource", "query": "prometheus", "regex": "", "hide": 0,
         "refresh": 1},
    )  # fmt: skip


def query_variable(
    name: str,
    label: str,
    query: str,
    *,
    multi: bool = True,
    hide: Literal[0, 2] = 0,
    description: str = "",
) -> Variable:
    """A variable whose values come from ``label_values(...)`` or ``query_result(...)``.

    ``multi`` variables also offer "All", whose value is the regex ``.*``: it matches series
    whose label is empty or absent too (a shared GPU's empty holder labels), which a list of
    the values found would not.
    """
    body: JSON = {
        "label": label,
        "description": description,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": VARIABLE_REF_ID},
        "regex": "",
        "refresh": 2,
        "sort": 1,
        "hide": hide,
        "multi": multi,
        "includeAll": multi,
    }
    if multi:
        body["allValue"] = ".*"
        body["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return Variable(name, body)


def constant_variable(name: str, value: str, description: str = "") -> Variable:
    """A hidden constant: one place to change a value that several queries use."""
    return Variable(
        name,
        {"label": name, "description": description, "type": "constant", "query": value,
         "hide": 2, "skipUrlSync": True},
    )  # fmt: skip


def custom_variable(
    name: str, label: str, options: Sequence[str], current: str, description: str = ""
) -> Variable:
    """A single-value variable chosen from a fixed list (a window, a threshold)."""
    assert current in options, (name, current)
    return Variable(
        name,
        {"label": label, "description": description, "type": "custom",
         "query": ",".join(options),
         "options": [{"selected": o == current, "text": o, "value": o} for o in options],
         "current": {"selected": True, "text": current, "value": current},
         "hide": 0, "multi": False, "includeAll": False},
    )  # fmt: skip


def dashboard_links(tag: str, title: str) -> tuple[JSON, ...]:
    """A drop-down of every board carrying ``tag``, keeping the time range and variables."""
    return (
        {"title": title, "type": "dashboards", "tags": [tag], "asDropdown": True,
         "includeVars": True, "keepTime": True, "targetBlank": False, "icon": "external link",
         "tooltip": "", "url": ""},
    )  # fmt: skip


# ---- panels --------------------------------------------------------------------------------

_LEGEND: JSON = {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": True}
_TOOLTIP: JSON = {"mode": "multi", "sort": "desc"}
_HIDE_FROM: JSON = {"legend": False, "tooltip": False, "viz": False}


def _field_defaults(
    *,
    min_: float | None = None,
    max_: float | None = None,
    thresholds: Sequence[tuple[float, str]] = (),
    mappings: Sequence[JSON] = (),
    color: str = "palette-classic",
    links: Sequence[Link] = (),
    decimals: int | None = None,
) -> JSON:
    out: JSON = {"color": {"mode": color}}
    if min_ is not None:
        out["min"] = min_
    if max_ is not None:
        out["max"] = max_
    if decimals is not None:
        out["decimals"] = decimals
    steps: list[JSON] = [{"color": "green", "value": None}]
    steps += [{"color": c, "value": v} for v, c in thresholds]
    out["thresholds"] = {"mode": "absolute", "steps": steps}
    if mappings:
        out["mappings"] = list(mappings)
    if links:
        out["links"] = [link.to_json() for link in links]
    return out


def value_text(mapping: Mapping[int, tuple[str, str]]) -> JSON:
    """A value mapping: each number shows as a text in a colour (``{1: ("up", "green")}``)."""
    return {
        "type": "value",
        "options": {
            str(value): {"text": text, "color": color, "index": i}
            for i, (value, (text, color)) in enumerate(sorted(mapping.items()))
        },
    }


def timeseries(
    title: str,
    description: str,
    *queries: Query,
    unit: str,
    width: int = 12,
    height: int = 8,
    stack: bool = False,
    min_: float | None = 0,
    max_: float | None = None,
    legend_table: bool = False,
    overrides: Sequence[JSON] = (),
) -> Panel:
    """Lines over time (stacked areas with ``stack``)."""
    legend = {**_LEGEND, "displayMode": "table", "placement": "right"} if legend_table else _LEGEND
    custom: JSON = {
        "drawStyle": "line",
        "lineInterpolation": "linear",
        "lineWidth": 1,
        "fillOpacity": 40 if stack else 10,
        "gradientMode": "none",
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        "axisPlacement": "auto",
        "hideFrom": _HIDE_FROM,
    }
    return Panel(
        "timeseries", title, description, queries, unit, width, height,
        options={"legend": legend, "tooltip": _TOOLTIP},
        custom=custom,
        defaults=_field_defaults(min_=min_, max_=max_),
        overrides=tuple(overrides),
    )  # fmt: skip


def stat(
    title: str,
    description: str,
    *queries: Query,
    unit: str,
    width: int = 4,
    height: int = 4,
    thresholds: Sequence[tuple[float, str]] = (),
    text_mode: Literal["auto", "value", "value_and_name", "name"] = "auto",
    graph: bool = False,
    mappings: Sequence[JSON] = (),
    links: Sequence[Link] = (),
) -> Panel:
    """One number per series (the last value), coloured by ``thresholds``; ``links`` open
    from the value."""
    options: JSON = {
        "colorMode": "value",
        "graphMode": "area" if graph else "none",
        "justifyMode": "auto",
        "orientation": "auto",
        "percentChangeColorMode": "standard",
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "showPercentChange": False,
        "textMode": text_mode,
        "wideLayout": True,
    }
    return Panel(
        "stat", title, description, queries, unit, width, height,
        options=options,
        custom={},
        defaults=_field_defaults(
            thresholds=thresholds, color="thresholds", mappings=mappings, links=links
        ),
    )  # fmt: skip


def table(
    title: str,
    description: str,
    *queries: Query,
    unit: str,
    columns: Mapping[str, str],
    width: int = 24,
    height: int = 8,
    column_units: Mapping[str, str] | None = None,
    column_links: Mapping[str, Sequence[Link]] | None = None,
    sort_by: str | None = None,
    sort_desc: bool = False,
    numeric_columns: Sequence[str] = (),
    mappings: Sequence[JSON] = (),
) -> Panel:
    """The latest values as rows: one instant query or several, merged on their labels.

    ``columns`` maps each label or value column to show (``Value`` for a single query,
    ``Value #A``, ``Value #B``... for several) to its title, in order; every other column is
    hidden. ``column_units`` and ``column_links`` are keyed by those titles.
    """
    tables = tuple(Query(q.expr, q.legend, instant=True, format="table") for q in queries)
    transformations: list[JSON] = []
    if len(tables) > 1:
        transformations.append({"id": "merge", "options": {}})
    transformations.append(
        {
            "id": "filterFieldsByName",
            "options": {"include": {"names": list(columns)}},
        }
    )
    transformations.append(
        {
            "id": "organize",
            "options": {
                "excludeByName": {},
                "indexByName": {name: i for i, name in enumerate(columns)},
                "renameByName": {k: v for k, v in columns.items() if k != v},
            },
        }
    )
    if numeric_columns:
        transformations.append(
            {
                "id": "convertFieldType",
                "options": {
                    "conversions": [
                        {"targetField": columns[c], "destinationType": "number"}
                        for c in numeric_columns
                    ],
                    "fields": {},
                },
            }
        )
    overrides: list[JSON] = []
    for name, unit_ in (column_units or {}).items():
        overrides.append(_override(name, [{"id": "unit", "value": unit_}]))
    for name, links in (column_links or {}).items():
        overrides.append(_override(name, [{"id": "links", "value": [x.to_json() for x in links]}]))
    options: JSON = {"cellHeight": "sm", "frameIndex": 0, "showHeader": True}
    if sort_by:
        options["sortBy"] = [{"desc": sort_desc, "displayName": sort_by}]
    return Panel(
        "table", title, description, tables, unit, width, height,
        options=options,
        custom={"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False},
        defaults=_field_defaults(color="thresholds", mappings=mappings),
        overrides=tuple(overrides),
        transformations=tuple(transformations),
    )  # fmt: skip


def state_timeline(
    title: str,
    description: str,
    *queries: Query,
    unit: str,
    mappings: Sequence[JSON] = (),
    thresholds: Sequence[tuple[float, str]] = (),
    width: int = 12,
    height: int = 8,
) -> Panel:
    """Each series as a band coloured by its value (``mappings`` name the values)."""
    options: JSON = {
        "alignValue": "left",
        "legend": {**_LEGEND, "showLegend": False},
        "mergeValues": True,
        "rowHeight": 0.9,
        "showValue": "auto",
        "tooltip": {"mode": "single", "sort": "none"},
    }
    return Panel(
        "state-timeline", title, description, queries, unit, width, height,
        options=options,
        custom={"fillOpacity": 70, "lineWidth": 0, "hideFrom": _HIDE_FROM},
        defaults=_field_defaults(thresholds=thresholds, mappings=mappings, color="thresholds"),
    )  # fmt: skip


def heatmap(
    title: str,
    description: str,
    query: Query,
    *,
    unit: str,
    y_unit: str,
    width: int = 12,
    height: int = 8,
) -> Panel:
    """Histogram buckets over time (a ``sum by (le) (rate(..._bucket[...]))`` query)."""
    options: JSON = {
        "calculate": False,
        "cellGap": 1,
        "color": {"exponent": 0.5, "fill": "dark-orange", "mode": "scheme", "reverse": False,
                  "scale": "exponential", "scheme": "Oranges", "steps": 64},
        "exemplars": {"color": "rgba(255,0,255,0.7)"},
        "filterValues": {"le": 1e-9},
        "legend": {"show": True},
        "rowsFrame": {"layout": "auto"},
        "showValue": "never",
        "tooltip": {"mode": "single", "yHistogram": False},
        "yAxis": {"axisPlacement": "left", "reverse": False, "unit": y_unit},
    }  # fmt: skip
    buckets = Query(query.expr, query.legend or "{{le}}", format="heatmap")
    return Panel(
        "heatmap", title, description, (buckets,), unit, width, height,
        options=options,
        custom={"hideFrom": _HIDE_FROM, "scaleDistribution": {"type": "linear"}},
        defaults={},
    )  # fmt: skip


def _override(name: str, properties: list[JSON]) -> JSON:
    return {"matcher": {"id": "byName", "options": name}, "properties": properties}


def series_override(regex: str, properties: list[JSON]) -> JSON:
    """Field properties for the series whose display name matches ``regex``."""
    return {"matcher": {"id": "byRegexp", "options": regex}, "properties": properties}
