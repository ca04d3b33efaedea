"""The exposition writer: the bytes prometheus_client's generators give.

On every golden scenario's families and on generated families, in both formats.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

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
from podres_exporter.daemon.web import render_registry
from podres_exporter.exporter.poller import Poller, Store
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.exporter.textformat import WriteCache, go_float, write
from podres_sim import SimKubelet
from tests.support import exporter_settings


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
