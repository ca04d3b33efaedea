"""The exporter's exposition, rendered when a view is published.

A scrape never calls the kubelet, and a scrape right after a poll does not render
either: when the poller publishes a view (``Store.on_publish``: in the poll thread,
before the view becomes current), the text format of its families is rendered and
compressed once, while scrapes keep being served the previous view. Each format is
rendered then while a scraper asked for it within :data:`ASKED_RECENT_S` (the text
format also while none was: before the first scrape); otherwise the first scrape of a
view in that format renders it (concurrent scrapes wait for one rendering). Prometheus
asks for OpenMetrics only, so a node it scrapes renders one format per poll. Only a
few live lines, the snapshot's age and the process metrics, are rendered per scrape and
appended.

The families are written by :func:`write`, not by ``prometheus_client``'s
generators: the same bytes (the tests compare both on every golden and on
generated families), without validating our known label names on every sample.
"""

from __future__ import annotations

import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import structlog
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om

from podres_exporter.collectors.families import RowFamily
from podres_exporter.collectors.kubelet import snapshot_age, snapshot_age_seconds
from podres_exporter.core.view import NodeView
from podres_exporter.daemon.web import render_registry
from podres_exporter.exporter.poller import Store

log = structlog.get_logger(__name__)

_EOF = b"# EOF\n"
# While a scraper asked for a format this recently, a published view is rendered in it;
# after that, the first scrape of a view in that format renders it. (The text format is
# rendered at publish too while no format was asked for recently.)
ASKED_RECENT_S = 600.0
# zlib's fastest level: the large benchmark node's 650 KB exposition in 2 ms and 52 KB,
# against 6 ms and 39 KB at the default level 6. It runs at every publish; the bytes
# saved would not pay for the CPU on a node's network.
GZIP_LEVEL = 1
# The process metrics (CPU, memory, file descriptors) served are at most this old.
PROCESS_EVERY_S = 1.0

# ----------------------------------------------------------------------------- the writer

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
    template: str | None = None
    quotes = 0
    lines: list[str] = []
    for values, value in metric.rows:
        prefix = known.get(values)
        if prefix is None:
            if template is None:
                template, quotes, _ = _shape(
                    metric, metric.sample_name, metric.labels, openmetrics, {}
                )
            prefix = _filled(template, quotes, values, "")
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
    return (body[: -len(_EOF)] if openmetrics else body).decode()


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


# ----------------------------------------------------------------------- the exposition


@dataclass(frozen=True, slots=True)
class _Gzipped:
    """A cached part as the start of a gzip member: its header and deflate stream, ended
    on a byte boundary by a sync flush (no final block yet), and the CRC-32 and length
    of what it holds, for the trailer."""

    head: bytes
    crc: int
    size: int

    def finish(self, live: bytes) -> bytes:
        """The whole member: ``live`` after the cached part, as stored deflate blocks
        (the last one final; no compression to run per scrape for a few KB), then the
        trailer. One member: decoders that read only the first, as curl does, see it
        all."""
        blocks = []
        for start in range(0, max(len(live), 1), _STORED_MAX):
            chunk = live[start : start + _STORED_MAX]
            final = start + _STORED_MAX >= len(live)
            blocks.append(struct.pack("<BHH", final, len(chunk), len(chunk) ^ 0xFFFF) + chunk)
        size = (self.size + len(live)) & 0xFFFFFFFF
        return b"".join((self.head, *blocks, struct.pack("<II", zlib.crc32(live, self.crc), size)))


_STORED_MAX = 0xFFFF  # the most bytes a stored deflate block holds


@dataclass(slots=True)
class _Rendered:
    """One view's cached part per format, and per format that part gzipped (the start of
    a gzip member that each scrape's live part ends)."""

    plain: dict[bool, bytes] = field(default_factory=dict)
    gzip: dict[bool, _Gzipped] = field(default_factory=dict)

    def part(self, openmetrics: bool, gz: bool) -> bytes | _Gzipped | None:
        """The cached part in this format, gzipped with ``gz``; None when it is not
        rendered (or compressed) yet."""
        return self.gzip.get(openmetrics) if gz else self.plain.get(openmetrics)


def _generation(view: NodeView | None) -> int:
    return view.snapshot.generation if view else 0


class Exposition:
    """Renders and caches the exposition of the Store's views, when they are published.

    ``families`` turns a view into its metric families (the exporter passes its
    NodeReader's :meth:`~podres_exporter.exporter.reader.NodeReader.families`).
    """

    def __init__(
        self,
        store: Store,
        families: Callable[[NodeView], Iterable[Metric]],
        *,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._families = families
        self._wall = wall_clock
        self._clock = clock
        self._lock = threading.Lock()
        # generation -> its rendering: the current view's and the one being published.
        self._views: dict[int, _Rendered] = {}
        self._asked_at: dict[bool, float] = {}  # openmetrics -> when a scraper last asked
        self._write_cache = WriteCache()  # families reused by the collectors keep their text
        self._process: dict[bool, tuple[float, bytes]] = {}  # format -> (when, process metrics)
        # format -> the snapshot age's HELP and TYPE, and its sample's name
        self._age_head: dict[bool, tuple[bytes, bytes]] = {}
        self._prepare_failed = False
        self._live = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._live)
        self.renders = 0  # how many times a cached part was rendered
        store.on_publish(self.prepare)

    def _view_families(self, view: NodeView | None) -> list[Metric]:
        return list(self._families(view)) if view else []

    def _render(self, families: list[Metric], openmetrics: bool) -> bytes:
        """The part rendered once per view and format (without OpenMetrics' ``# EOF``)."""
        plain = render_families(families, openmetrics, cache=self._write_cache)
        self.renders += 1
        return plain[: -len(_EOF)] if openmetrics and plain.endswith(_EOF) else plain

    @staticmethod
    def _compress(plain: bytes) -> _Gzipped:
        # wbits 31: a gzip member's header and deflate stream. The sync flush puts out
        # everything pending and ends on a byte boundary, where a scrape appends its live
        # part as stored blocks, and the trailer.
        compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
        head = compressor.compress(plain) + compressor.flush(zlib.Z_SYNC_FLUSH)
        return _Gzipped(head, zlib.crc32(plain), len(plain))

    def prepare(self, view: NodeView) -> None:
        """Render ``view`` before it becomes current (the Store calls this in the poll
        thread): each format asked for recently, and its gzip (the text format when none
        was). A failure is logged once and left to the scrapes (which then render)."""
        now = self._clock()
        asked = sorted(f for f, at in self._asked_at.items() if now - at < ASKED_RECENT_S)
        formats = asked or [False]
        for unasked in {False, True} - set(formats):  # its texts would only hold memory
            self._write_cache.forget(unasked)
        rendered = _Rendered()
        try:
            families = self._view_families(view)  # once for both formats
            for openmetrics in formats:
                plain = self._render(families, openmetrics)
                rendered.plain[openmetrics] = plain
                rendered.gzip[openmetrics] = self._compress(plain)
        except Exception as err:
            if not self._prepare_failed:
                log.exception("exposition_prepare_failed", error_kind=type(err).__name__)
                self._prepare_failed = True
            return
        if self._prepare_failed:
            log.info("exposition_prepare_recovered")
            self._prepare_failed = False
        current = _generation(self._store.current())
        with self._lock:
            self._views = {g: r for g, r in self._views.items() if g == current} | {
                _generation(view): rendered
            }

    def _cached(self, view: NodeView | None, openmetrics: bool, gz: bool) -> bytes | _Gzipped:
        """The view's cached part, gzipped with ``gz`` (the start of the gzip member each
        scrape's live part ends). Rendered here only when :meth:`prepare` did not (one
        lock hold: a new view between the two would otherwise mix generations)."""
        generation = _generation(view)
        with self._lock:
            rendered = self._views.get(generation)
            if rendered is None:
                rendered = _Rendered()
                # Older views are no longer served (generations only grow).
                self._views = {g: r for g, r in self._views.items() if g > generation}
                self._views[generation] = rendered
            plain = rendered.plain.get(openmetrics)
            if plain is None:
                plain = rendered.plain[openmetrics] = self._render(
                    self._view_families(view), openmetrics
                )
            if gz and openmetrics not in rendered.gzip:
                rendered.gzip[openmetrics] = self._compress(plain)
            part = rendered.part(openmetrics, gz)
            assert part is not None  # rendered and compressed just above
            return part

    def _live_part(self, view: NodeView | None, openmetrics: bool) -> bytes:
        """The snapshot's age, now; the process metrics, at most :data:`PROCESS_EVERY_S`
        old (reading them costs more than serving the rest of a cached body)."""
        now = self._clock()
        process = self._process.get(openmetrics)
        if process is None or now - process[0] >= PROCESS_EVERY_S:
            process = (now, write(self._live.collect(), openmetrics, eof=False))
            self._process[openmetrics] = process
        return self._age(view, openmetrics) + (process[1] + _EOF if openmetrics else process[1])

    def _age(self, view: NodeView | None, openmetrics: bool) -> bytes:
        """``podres_snapshot_age_seconds`` now: its head written once per format, its
        one line here (what :func:`write` gives, without its per-family work)."""
        cached = self._age_head.get(openmetrics)
        if cached is None:
            family = snapshot_age(None, 0.0)
            empty = Metric(family.name, family.documentation, family.type)
            head = write([empty], openmetrics, eof=False)
            cached = self._age_head[openmetrics] = (head, f"{family.name} ".encode())
        head, name = cached
        seconds = snapshot_age_seconds(view, self._wall())
        if seconds is None:
            return head
        return b"%s%s%s\n" % (head, name, go_float(seconds).encode())

    def ready_body(self, *, openmetrics: bool, gz: bool) -> bytes | tuple[bytes, bytes] | None:
        """The body when it can be given at once: the current view's rendering in this
        format is cached and no other scrape holds the lock (never waits for it, never
        renders: the web server calls this on its event loop). None otherwise; then
        :meth:`body`, which may render or wait, answers from a worker thread.

        Not gzipped, it comes in two pieces, the cached part and the live part, which the
        server writes one after the other: a large node's text is not copied to append
        a few lines at every scrape."""
        view = self._store.current()
        if not self._lock.acquire(blocking=False):
            return None
        try:
            rendered = self._views.get(_generation(view))
            part = rendered.part(openmetrics, gz) if rendered is not None else None
        finally:
            self._lock.release()
        if part is None:
            return None
        self._asked_at[openmetrics] = self._clock()
        return self._finish(view, openmetrics, part)

    def body(self, *, openmetrics: bool, gz: bool) -> bytes:
        """The full exposition; when ``gz``, one gzip member (decoders that read only
        the first member, as curl does, see it all)."""
        self._asked_at[openmetrics] = self._clock()
        view = self._store.current()
        body = self._finish(view, openmetrics, self._cached(view, openmetrics, gz))
        return body if isinstance(body, bytes) else b"".join(body)

    def _finish(
        self, view: NodeView | None, openmetrics: bool, part: bytes | _Gzipped
    ) -> bytes | tuple[bytes, bytes]:
        """The cached part followed by the live part: the two, or one gzip member."""
        live = self._live_part(view, openmetrics)
        return (part, live) if isinstance(part, bytes) else part.finish(live)
