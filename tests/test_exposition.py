"""The exposition writer and when the exposition is rendered.

The writer must give the bytes prometheus_client's generators give: on every golden
scenario's families and on generated families, in both formats. A view is rendered
when it is published, so a scrape right after a poll renders nothing.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Callable, Iterable
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from podres_exporter.collectors.families import RowFamily
from podres_exporter.collectors.kubelet import snapshot_age
from podres_exporter.core.view import NodeView
from podres_exporter.daemon.web import render_registry
from podres_exporter.exporter import exposition
from podres_exporter.exporter.exposition import (
    ASKED_RECENT_S,
    PROCESS_EVERY_S,
    Exposition,
    WriteCache,
    go_float,
    write,
)
from podres_exporter.exporter.poller import Poller, Store
from podres_exporter.exporter.reader import NodeReader
from podres_sim import SimKubelet
from tests.support import exporter_settings
from tests.test_poller import TOPO, Script, reading


class Families:
    """A prometheus_client collector over already-built families."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def reference(families: list[Metric], openmetrics: bool) -> bytes:
    """What prometheus_client itself writes."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families(families))
    return render_registry(registry, openmetrics=openmetrics)


def assert_same(families: list[Metric]) -> None:
    for openmetrics in (False, True):
        assert write(families, openmetrics) == reference(families, openmetrics)


# ------------------------------------------------------------------- the goldens' families


@pytest.mark.parametrize("scenario", ["minimal", "policy-none", "v1alpha1", "demo"])
def test_the_writer_equals_prometheus_client_on_every_golden(
    scenario: str, make_sim: Callable[..., SimKubelet]
) -> None:
    """Every family of each golden scenario (and the live ones), byte for byte."""
    sim = make_sim(scenario)
    backend = sim.host.gpu_backend()  # type: ignore[attr-defined]
    reader = NodeReader.from_settings(
        exporter_settings(sim, source_timeout_s=10.0), gpu_backend=backend
    )
    store = Store()
    try:
        Poller(reader, store).poll_once()
        view = store.current()
        assert view is not None
        families = list(reader.families(view, version="0.0.0-golden"))
    finally:
        reader.close()
        backend.close()
    assert len(families) > 10
    assert_same(families)
    live = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=live)
    assert_same([snapshot_age(view, 1e9), *live.collect()])


# --------------------------------------------------------------------- generated families

NAMES = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,12}", fullmatch=True)
LABEL_NAMES = st.lists(
    st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,8}", fullmatch=True), max_size=4, unique=True
)
LABEL_VALUES = st.text(max_size=12) | st.sampled_from(["", '"', "\\", "\n", 'a\\"b\nc', "é☃"])
FLOATS = (
    st.floats()
    | st.sampled_from([0.0, -0.0, 1e21, 1e-300, 5e-324, 1234567.0, 999999.0, -1234567.0, 1e16])
    | st.integers(-(2**70), 2**70).map(float)
)
HELP = st.text(max_size=30)


@st.composite
def families(draw: st.DrawFn) -> Metric:
    name = draw(NAMES)
    doc = draw(HELP)
    labels = draw(LABEL_NAMES)
    rows = draw(
        st.lists(
            st.tuples(st.lists(LABEL_VALUES, min_size=len(labels), max_size=len(labels)), FLOATS),
            max_size=4,
        )
    )
    kind = draw(
        st.sampled_from(
            [
                *("gauge", "counter", "counter_created", "info", "untyped", "histogram"),
                *("unit", "rows_gauge", "rows_counter", "rows_info"),
            ]
        )
    )
    if kind.startswith("rows_"):
        rows_family = RowFamily(name, doc, kind[len("rows_") :], labels)
        for values, v in rows:
            rows_family.add(values, 1.0 if kind == "rows_info" else v)
        return rows_family
    if kind == "info":
        info = InfoMetricFamily(name, doc, labels=labels)
        for values, _ in rows:
            info.add_metric(values, {})
        return info
    if kind == "histogram":
        hist = HistogramMetricFamily(name, doc, labels=labels)
        for values, v in rows:
            hist.add_metric(values, [("0.5", 0.0), ("+Inf", abs(v))], v)
        return hist
    if kind == "unit":
        metric = Metric(name, doc, "gauge", unit="bytes")
        for values, v in rows:
            metric.add_sample(metric.name, dict(zip(labels, values, strict=True)), v)
        return metric
    if kind.startswith("counter"):
        counter = CounterMetricFamily(name, doc, labels=labels)
        created = 1700000000.5 if kind == "counter_created" else None
        for values, v in rows:
            counter.add_metric(values, v, created=created)
        return counter
    fam = (GaugeMetricFamily if kind == "gauge" else UnknownMetricFamily)(name, doc, labels=labels)
    for values, v in rows:
        fam.add_metric(values, v)
    return fam


@settings(max_examples=300, deadline=None)
@given(st.lists(families(), max_size=4))
def test_the_writer_equals_prometheus_client_on_generated_families(
    generated: list[Metric],
) -> None:
    """Counters (with and without _created), gauges, info, untyped, histograms and units,
    with any label values and floats: the same bytes in both formats."""
    assert_same(generated)


def like_prometheus_client(fam: RowFamily) -> Metric:
    """The family prometheus_client's own class gives for the same rows."""
    labels = list(fam.labels)
    if fam.type == "info":
        info = InfoMetricFamily(fam.name, fam.documentation, labels=labels)
        for values, _ in fam.rows:
            info.add_metric(values, {})
        return info
    cls = CounterMetricFamily if fam.type == "counter" else GaugeMetricFamily
    other = cls(fam.name, fam.documentation, labels=labels)
    for values, v in fam.rows:
        other.add_metric(values, v)
    return other


@settings(max_examples=200, deadline=None)
@given(st.lists(families(), min_size=1, max_size=4))
def test_a_row_family_gives_the_samples_and_bytes_of_prometheus_clients_family(
    generated: list[Metric],
) -> None:
    """Its ``samples`` (built when read) and its text equal those of prometheus_client's
    class for the same rows, whatever the writer's cache held from an earlier write."""
    rows = [f for f in generated if isinstance(f, RowFamily)]
    others = [like_prometheus_client(f) for f in rows]
    assert [f.samples for f in rows] == [f.samples for f in others]
    assert [(f.name, f.type) for f in rows] == [(f.name, f.type) for f in others]
    cache = WriteCache()
    for openmetrics in (False, True):
        assert write(rows, openmetrics, cache=cache) == reference(others, openmetrics)


def test_a_row_familys_series_prefixes_follow_its_series() -> None:
    """Written again with changed values, a new series and a departed one, through the
    same cache: the bytes prometheus_client gives, and only live series' prefixes kept."""
    cache = WriteCache()

    def fam(rows: list[tuple[tuple[str, ...], float]]) -> RowFamily:
        f = RowFamily("podres_x_bytes", "Bytes.", "counter", ["b", "a"])
        for values, v in rows:
            f.add(values, v)
        return f

    first = fam([(("1", 'q"uote'), 1.0), (("2", "b\\s"), 2.0)])
    second = fam([(("2", "b\\s"), 3e21), (("3", "new"), 0.5)])
    for f in (first, second):
        for openmetrics in (False, True):
            expected = reference([like_prometheus_client(f)], openmetrics)
            assert write([f], openmetrics, cache=cache) == expected
    kept = cache.prefixes[False][(False, "podres_x_bytes_total", ("b", "a"))]
    assert set(kept) == {("2", "b\\s"), ("3", "new")}
    assert kept[("2", "b\\s")] == 'podres_x_bytes_total{a="b\\\\s",b="2"} '
    with pytest.raises(TypeError, match="rows"):
        first.samples = like_prometheus_client(first).samples


@given(FLOATS)
def test_floats_are_written_as_go_writes_them(value: float) -> None:
    assert go_float(value) == floatToGoString(value)


def test_escaped_values_and_signed_zero_are_written_as_prometheus_client_writes_them() -> None:
    """A fixed case the generated ones might miss: all escapes in one value, -0.0, NaN."""
    fam = GaugeMetricFamily("g", 'help "quoted" \\ \n', labels=["b", "a"])
    fam.add_metric(['x\\"y\nz', "plain"], -0.0)
    fam.add_metric(["", "é"], math.nan)
    assert_same([fam])
    assert b'g{a="plain",b="x\\\\\\"y\\nz"} -0.0\n' in write([fam], False)


def test_a_sample_with_a_timestamp_is_left_to_prometheus_client() -> None:
    """Samples none of our collectors emit (a timestamp) still come out identical."""
    fam = GaugeMetricFamily("g", "h", labels=["a"])
    fam.add_metric(["x"], 1.0, timestamp=1700000000.25)
    assert_same([fam, GaugeMetricFamily("h", "h", value=2.0)])


# ----------------------------------------------------------------------- publish-time rendering


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Setup:
    """A Store fed by a Poller over a scripted kubelet, an Exposition on it, and counts of
    how often views were turned into families and rendered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reader = NodeReader(Script([reading(n % 3 + 1) for n in range(20)]), lambda: TOPO)
        self.store = Store()
        self.poller = Poller(self.reader, self.store)
        self.clock = Clock()
        self.family_calls = 0
        self.renders = 0
        self.current_during_families: list[NodeView | None] = []
        original = exposition.render_families

        def counting(
            families: Iterable[Metric], openmetrics: bool, *, cache: WriteCache | None = None
        ) -> bytes:
            self.renders += 1
            return original(families, openmetrics, cache=cache)

        monkeypatch.setattr(exposition, "render_families", counting)
        self.exposition = Exposition(self.store, self.families, clock=self.clock)

    def families(self, view: NodeView) -> Iterable[Metric]:
        self.family_calls += 1
        self.current_during_families.append(self.store.current())
        return partial(self.reader.families, version="0")(view)

    def counts(self) -> tuple[int, int]:
        return self.family_calls, self.renders


def _one_member(data: bytes) -> bytes:
    """``data`` decoded as a single gzip member, as curl and other first-member readers
    do; nothing may follow it."""
    member = zlib.decompressobj(wbits=31)
    out = member.decompress(data) + member.flush()
    assert member.eof and member.unused_data == b""
    return out


def test_a_gzipped_body_is_one_member_with_the_live_part_stored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cached part compressed at the poll, then the scrape's live part as stored
    deflate blocks and the trailer: one gzip member whose CRC and length cover both
    (zlib checks them), equal to the plain body but for the live values."""
    s = Setup(monkeypatch)
    s.poller.poll_once()
    for openmetrics in (False, True):
        zipped = s.exposition.body(openmetrics=openmetrics, gz=True)
        plain = s.exposition.body(openmetrics=openmetrics, gz=False)
        assert _one_member(zipped) == gzip.decompress(zipped)
        assert not_live(_one_member(zipped)) == not_live(plain)
        assert _one_member(zipped).endswith(b"# EOF\n" if openmetrics else b"\n")


@pytest.mark.parametrize("live_bytes", [0, 1, 65535, 65536, 200_000])
def test_a_live_part_of_any_length_ends_the_member(live_bytes: int) -> None:
    """Stored blocks hold at most 65,535 bytes: a longer live part takes several, the
    last one final; an empty one, one empty final block."""
    cached = b"podres_pods 1.0\n" * 5000
    live = bytes(i % 251 for i in range(live_bytes))
    zipped = exposition.Exposition._compress(cached).finish(live)
    assert _one_member(zipped) == cached + live


def test_a_scrape_after_a_publish_renders_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The poll renders the text format and its gzip; scrapes, gzipped or not, don't."""
    s = Setup(monkeypatch)
    s.poller.poll_once()
    assert s.counts() == (1, 1)
    plain = s.exposition.body(openmetrics=False, gz=False)
    zipped = s.exposition.body(openmetrics=False, gz=True)
    assert s.counts() == (1, 1)
    assert b"podres_pods 1.0\n" in plain
    assert b"podres_pods 1.0\n" in gzip.decompress(zipped)
    s.poller.poll_once()
    assert s.counts() == (2, 2)
    assert b"podres_pods 2.0\n" in gzip.decompress(s.exposition.body(openmetrics=False, gz=True))
    assert s.counts() == (2, 2)


def test_the_view_is_rendered_before_it_becomes_current(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scrapes during the rendering are served the previous view (they neither wait nor
    render)."""
    s = Setup(monkeypatch)
    s.poller.poll_once()
    first = s.store.current()
    s.poller.poll_once()
    assert s.current_during_families == [None, first]


def test_each_format_is_rendered_at_publish_only_while_asked_for_recently(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Never asked: the text format at the poll, the first OpenMetrics scrape renders;
    asked recently: the poll renders what was asked (OpenMetrics alone for a Prometheus);
    not asked for ASKED_RECENT_S: the scrape renders again."""
    s = Setup(monkeypatch)
    s.poller.poll_once()
    body = s.exposition.body(openmetrics=True, gz=False)
    assert body.endswith(b"# EOF\n") and body.count(b"# EOF") == 1
    assert s.counts() == (2, 2)  # text at the poll, OpenMetrics at the scrape
    s.poller.poll_once()
    assert s.counts() == (3, 3)  # OpenMetrics only: no scraper asked for text
    kept = s.exposition._write_cache  # what the text format still holds
    assert kept.take(False) == {} and kept.prefixes[False] == {}, "text not asked: dropped"
    assert kept.take(True), "OpenMetrics asked: its texts are kept"
    s.exposition.body(openmetrics=True, gz=True)
    assert s.counts() == (3, 3)
    s.exposition.body(openmetrics=False, gz=True)
    assert s.counts() == (4, 4)  # text asked: rendered by this scrape
    s.poller.poll_once()
    assert s.counts() == (5, 6)  # both at the poll, from one list of families
    s.exposition.body(openmetrics=True, gz=True)
    s.exposition.body(openmetrics=False, gz=True)
    assert s.counts() == (5, 6)
    s.clock.now += ASKED_RECENT_S + 1
    s.poller.poll_once()
    assert s.counts() == (6, 7)  # neither asked lately: the text format
    s.exposition.body(openmetrics=True, gz=False)
    assert s.counts() == (7, 8)


def test_a_failed_preparation_leaves_the_rendering_to_the_scrape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rendering that fails at publish does not stop the view from being published."""
    s = Setup(monkeypatch)
    broken = [True]
    original = s.families

    def families(view: NodeView) -> Iterable[Metric]:
        if broken[0]:
            raise RuntimeError("boom")
        return original(view)

    s.exposition._families = families
    s.poller.poll_once()
    assert s.store.current() is not None
    broken[0] = False
    assert b"podres_pods 1.0\n" in s.exposition.body(openmetrics=False, gz=False)


def test_a_ready_body_never_renders_nor_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ready_body`` gives the cached body (what ``body`` gives) and None when that
    needs a rendering, or while another scrape holds the lock: the web server then
    asks ``body`` from a worker."""
    s = Setup(monkeypatch)
    assert s.exposition.ready_body(openmetrics=False, gz=False) is None  # no view yet
    s.poller.poll_once()
    counts = s.counts()
    ready = s.exposition.ready_body(openmetrics=False, gz=True)
    assert isinstance(ready, bytes)  # one gzip member
    assert not_live(gzip.decompress(ready)) == not_live(
        s.exposition.body(openmetrics=False, gz=False)
    )
    assert s.exposition.ready_body(openmetrics=True, gz=False) is None  # not rendered yet
    assert s.counts() == counts, "nothing rendered"
    pieces = s.exposition.ready_body(openmetrics=False, gz=False)
    assert isinstance(pieces, tuple), "the cached part and the live part, not joined"
    assert not_live(b"".join(pieces)) == not_live(s.exposition.body(openmetrics=False, gz=False))
    with s.exposition._lock:
        assert s.exposition.ready_body(openmetrics=False, gz=False) is None


def test_process_metrics_are_read_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live part's process metrics come from one reading per PROCESS_EVERY_S; the
    snapshot's age is worked out at every scrape."""
    s = Setup(monkeypatch)
    s.poller.poll_once()
    reads = [0]
    collect = s.exposition._live.collect

    def counting() -> Iterable[Metric]:
        reads[0] += 1
        return collect()

    monkeypatch.setattr(s.exposition._live, "collect", counting)
    for _ in range(5):
        body = s.exposition.body(openmetrics=False, gz=False)
    assert reads[0] == 1
    assert b"podres_snapshot_age_seconds " in body and b"process_cpu_seconds_total" in body
    s.clock.now += PROCESS_EVERY_S
    s.exposition.body(openmetrics=True, gz=False)
    s.exposition.body(openmetrics=False, gz=False)
    assert reads[0] == 3  # a new second: once per format


def not_live(body: bytes) -> bytes:
    """The body less its live lines (the snapshot's age and the process metrics)."""
    return b"\n".join(
        line
        for line in body.split(b"\n")
        if b"snapshot_age" not in line and b"process_" not in line
    )


@pytest.mark.parametrize("openmetrics", [False, True])
def test_the_snapshot_age_is_written_as_the_writer_writes_it(
    monkeypatch: pytest.MonkeyPatch, openmetrics: bool
) -> None:
    """The live snapshot age, written without the writer's per-family work, is byte for
    byte what ``write`` gives: before a reading (no sample) and with one."""
    s = Setup(monkeypatch)
    wall = 1_700_000_123.25
    s.exposition._wall = lambda: wall
    assert s.exposition._age(None, openmetrics) == write(
        [snapshot_age(None, wall)], openmetrics, eof=False
    )
    s.poller.poll_once()
    view = s.store.current()
    assert view is not None
    for _ in range(2):  # the head from the first call, then from the cache
        assert s.exposition._age(view, openmetrics) == write(
            [snapshot_age(view, wall)], openmetrics, eof=False
        )
