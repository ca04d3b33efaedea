"""The Prometheus text format (0.0.4) and OpenMetrics 1.0 writer of the exporter's families.

The families are written here, not by ``prometheus_client``'s generators: the same
bytes (the tests compare both on every golden and on generated families), without
validating our known label names on every sample. A family whose samples are unusual
(a timestamp, an exemplar, no value: none of ours) is written by ``prometheus_client``.
:class:`WriteCache` keeps each family's text, so a family object the collectors reuse
is not written again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om

from podres_exporter.collectors.families import RowFamily
from podres_exporter.daemon.web import render_registry

EOF_LINE = b"# EOF\n"
"""OpenMetrics' last line."""

_SPECIAL_FLOATS = {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}
# The text format's names for OpenMetrics types (counter and info also rename).
_TEXT_TYPES = {
    "info": "gauge",
    "stateset": "gauge",
    "gaugehistogram": "histogram",
    "unknown": "untyped",
}
# Samples the text format moves into a gauge family of their own, after the family.
_TEXT_MOVED = ("_created", "_gsum", "_gcount")
# Go writes a float with more integer digits than this in exponent form; Python's repr
# only from 17.
_GO_MAX_INT_DIGITS = 6


def go_float(value: float) -> str:
    """``value`` as Go (and ``prometheus_client.utils.floatToGoString``) writes it."""
    d = float(value)
    s = repr(d)
    if "n" in s:  # inf, -inf, nan: no other float repr holds an "n"
        return _SPECIAL_FLOATS[s]
    dot = s.find(".")
    # Go switches to exponents sooner than Python (only positive values matter).
    if d > 0 and dot > _GO_MAX_INT_DIGITS:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _escape_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class _Unusual(Exception):
    """A sample this writer leaves to prometheus_client (timestamp, exemplar, no value)."""


# How to write the samples of one name and label names: a ``str.format`` template taking
# the label values in the sample's own order, then the value; how many quotes a line holds
# (a line with more held a value to escape); and where its lines go.
_Shape = tuple[str, int, list[str]]


def _shape(
    metric: Metric,
    name: str,
    keys: tuple[str, ...],
    openmetrics: bool,
    out: dict[str | None, list[str]],
) -> _Shape:
    """The names escaped as prometheus_client escapes them, once per name and labels; the
    lines go to ``out[None]``, or in the text format to ``out[suffix]`` for the samples it
    moves to a family of their own (``_created``...)."""
    ordered = sorted(range(len(keys)), key=keys.__getitem__)
    labels = ",".join(f'{om.escape_label_name(keys[i])}="{{{i}}}"' for i in ordered)
    if openmetrics:
        written = om._escape(name, om.UNDERSCORES, om._is_legacy_labelname_rune)
        moved = None
    else:
        written = om.escape_metric_name(name)
        moved = next((s for s in _TEXT_MOVED if name == metric.name + s), None)
    head = written.replace("{", "{{").replace("}", "}}")
    template = f"{head}{{{{{labels}}}}} {{{len(keys)}}}" if keys else f"{head} {{0}}"
    return template, 2 * len(keys), out.setdefault(moved, [])


def _number(value: float, numbers: dict[float, str]) -> str:
    """``value`` as written, memoised in ``numbers`` (never zeros: -0.0 equals 0.0)."""
    number = numbers.get(value)
    if number is None:
        number = go_float(value)
        if value:
            numbers[value] = number
    return number


def _filled(template: str, quotes: int, values: Iterable[str], tail: str) -> str:
    """``template`` with the label values and ``tail``; the values escaped only when the
    line holds more quotes than its own, a backslash or a newline."""
    values = tuple(values)
    line = template.format(*values, tail)
    if line.count('"') != quotes or "\\" in line or "\n" in line:
        line = template.format(*map(_escape_value, values), tail)
    return line


def _sample_lines(
    metric: Metric, openmetrics: bool, numbers: dict[float, str]
) -> dict[str | None, list[str]]:
    """The family's sample lines (key None), and the text format's moved ones by suffix.
    ``numbers``: values already written (never zeros: -0.0 equals 0.0)."""
    shapes: dict[tuple[str, tuple[str, ...]], _Shape] = {}
    out: dict[str | None, list[str]] = {None: []}
    for name, labels, value, timestamp, exemplar, native in metric.samples:
        if timestamp is not None or exemplar is not None or native is not None or value is None:
            raise _Unusual
        key = (name, tuple(labels))
        shape = shapes.get(key)
        if shape is None:
            shape = shapes[key] = _shape(metric, name, key[1], openmetrics, out)
        template, quotes, lines = shape
        lines.append(_filled(template, quotes, labels.values(), _number(value, numbers)))
    return out


# A family's series prefixes (``name{labels} ``) by label values, per format, sample
# name and label names; a WriteCache keeps those of the families it wrote last time.
_Prefixes = dict[tuple[bool, str, tuple[str, ...]], dict[tuple[str, ...], str]]


@dataclass(slots=True)
class _Pass:
    """One write's memos: values already written (never zeros: -0.0 equals 0.0), and
    the series prefixes, those of the last write (``last``) and this one's."""

    numbers: dict[float, str] = field(default_factory=dict)
    last: _Prefixes = field(default_factory=dict)
    prefixes: _Prefixes = field(default_factory=dict)


def _row_key(metric: RowFamily, openmetrics: bool) -> tuple[bool, str, tuple[str, ...]]:
    return (openmetrics, metric.sample_name, metric.labels)


def _row_lines(metric: RowFamily, openmetrics: bool, memo: _Pass) -> dict[str | None, list[str]]:
    """A RowFamily's sample lines: each its series' prefix (kept from the last write
    while the series lasts) and its value; no Sample, no label dict."""
    key = _row_key(metric, openmetrics)
    known = memo.last.get(key, {})
    kept = memo.prefixes[key] = {}
    numbers = memo.numbers
    # A template per set of empty sparse labels (left out): () is the full one.
    shapes: dict[tuple[int, ...], tuple[str, int]] = {}
    sparse = metric.sparse
    lines: list[str] = []
    for values, value in metric.rows:
        prefix = known.get(values)
        if prefix is None:
            empty = tuple(i for i in sparse if not values[i])
            shape = shapes.get(empty)
            if shape is None:
                keys = tuple(k for i, k in enumerate(metric.labels) if i not in empty)
                template, quotes, _ = _shape(metric, metric.sample_name, keys, openmetrics, {})
                shape = shapes[empty] = (template, quotes)
            shown = [v for i, v in enumerate(values) if i not in empty] if empty else values
            prefix = _filled(shape[0], shape[1], shown, "")
        kept[values] = prefix
        lines.append(prefix + _number(value, numbers))
    return {None: lines}


def _lines(metric: Metric, openmetrics: bool, memo: _Pass) -> dict[str | None, list[str]]:
    if isinstance(metric, RowFamily):
        return _row_lines(metric, openmetrics, memo)
    return _sample_lines(metric, openmetrics, memo.numbers)


def _text_family(metric: Metric, memo: _Pass) -> list[str]:
    name, typ = metric.name, metric.type
    if typ == "counter":
        name += "_total"
    elif typ == "info":
        name += "_info"
    typ = _TEXT_TYPES.get(typ, typ)
    written = om.escape_metric_name(name)
    doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    lines = _lines(metric, False, memo)
    out = [f"# HELP {written} {doc}\n# TYPE {written} {typ}\n"]
    main = lines.pop(None)
    if main:
        out.append("\n".join(main) + "\n")
    for suffix in sorted(s for s in lines if s is not None):
        moved = om.escape_metric_name(metric.name + suffix)
        out.append(f"# HELP {moved} {doc}\n# TYPE {moved} gauge\n")
        out.append("\n".join(lines[suffix]) + "\n")
    return out


def _openmetrics_family(metric: Metric, memo: _Pass) -> list[str]:
    written = om.escape_metric_name(metric.name)
    doc = _escape_value(metric.documentation)
    out = [f"# HELP {written} {doc}\n# TYPE {written} {metric.type}\n"]
    if metric.unit:
        out.append(f"# UNIT {written} {metric.unit}\n")
    main = _lines(metric, True, memo)[None]
    if main:
        out.append("\n".join(main) + "\n")
    return out


class _One:
    """A prometheus_client collector of one family (for the writer's fallback)."""

    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterable[Metric]:
        return [self._metric]


def _fallback(metric: Metric, openmetrics: bool) -> str:
    """One family by prometheus_client itself (OpenMetrics without its ``# EOF``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_One(metric))
    body = render_registry(registry, openmetrics=openmetrics)
    return (body[: -len(EOF_LINE)] if openmetrics else body).decode()


class WriteCache:
    """The text of each family the writer wrote last time, per format.

    A family object written again (a collector's families are reused while its inputs
    do not change: ``collectors.FamilyCache``) is not formatted again. The cache keeps
    the families it holds alive, so an object's identity cannot pass to another.
    """

    def __init__(self) -> None:
        self._last: dict[bool, dict[int, tuple[Metric, str]]] = {False: {}, True: {}}
        self.prefixes: dict[bool, _Prefixes] = {False: {}, True: {}}
        self.reused = 0

    def take(self, openmetrics: bool) -> dict[int, tuple[Metric, str]]:
        return self._last[openmetrics]

    def keep(self, openmetrics: bool, written: dict[int, tuple[Metric, str]]) -> None:
        self._last[openmetrics] = written

    def forget(self, openmetrics: bool) -> None:
        """Drop what was kept for one format (no longer rendered at every publish)."""
        self._last[openmetrics] = {}
        self.prefixes[openmetrics] = {}


def _family_text(metric: Metric, openmetrics: bool, memo: _Pass) -> str:
    try:
        return "".join((_openmetrics_family if openmetrics else _text_family)(metric, memo))
    except _Unusual:
        return _fallback(metric, openmetrics)


def write(
    families: Iterable[Metric],
    openmetrics: bool,
    *,
    eof: bool = True,
    cache: WriteCache | None = None,
) -> bytes:
    """Families in the text format (0.0.4) or OpenMetrics 1.0, the bytes prometheus_client
    writes. Names are escaped once per name and label names, label values only when they
    hold a backslash, newline or quote; a sample with a timestamp, an exemplar or no value
    (none of ours) has its family written by prometheus_client. ``eof``: end OpenMetrics
    with its ``# EOF``. ``cache``: a family object written last time is not written again."""
    out: list[str] = []
    memo = _Pass(last=cache.prefixes[openmetrics] if cache is not None else {})
    last = cache.take(openmetrics) if cache is not None else {}
    written: dict[int, tuple[Metric, str]] = {}
    for metric in families:
        hit = last.get(id(metric))
        if hit is not None and hit[0] is metric:
            text = hit[1]
            if isinstance(metric, RowFamily):  # its prefixes stay for when it changes
                key = _row_key(metric, openmetrics)
                if key in memo.last:
                    memo.prefixes[key] = memo.last[key]
            if cache is not None:
                cache.reused += 1
        else:
            text = _family_text(metric, openmetrics, memo)
        if cache is not None:
            written[id(metric)] = (metric, text)
        out.append(text)
    if cache is not None:
        cache.keep(openmetrics, written)
        cache.prefixes[openmetrics] = memo.prefixes
    if openmetrics and eof:
        out.append("# EOF\n")
    return "".join(out).encode()


def render_families(
    families: Iterable[Metric], openmetrics: bool, *, cache: WriteCache | None = None
) -> bytes:
    """Families in the text format, or OpenMetrics (with its ``# EOF``)."""
    return write(families, openmetrics, cache=cache)
