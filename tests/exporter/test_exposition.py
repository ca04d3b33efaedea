"""When the exposition is rendered, and what a scrape is served.

A view is rendered when it is published, so a scrape right after a poll renders
nothing; a gzipped body is one member; the live lines are read per scrape.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable
from functools import partial

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.kubelet import snapshot_age
from podres_exporter.core.view import NodeView
from podres_exporter.exporter.exposition import ASKED_RECENT_S, PROCESS_EVERY_S, Exposition
from podres_exporter.exporter.poller import Poller, Store
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.exporter.textformat import write
from tests.exporter.support import TOPO, Script, reading


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountedProcess:
    """The process metrics, counting how often a scrape reads them."""

    def __init__(self) -> None:
        self.reads = 0
        self._process = ProcessCollector(registry=None)

    def collect(self) -> Iterable[Metric]:
        self.reads += 1
        return self._process.collect()


class Setup:
    """A Store fed by a Poller over a scripted kubelet, an Exposition on it, and counts of
    how often views were turned into families and rendered, and the process metrics read."""

    def __init__(self) -> None:
        self.reader = NodeReader(Script([reading(n % 3 + 1) for n in range(20)]), lambda: TOPO)
        self.store = Store()
        self.poller = Poller(self.reader, self.store)
        self.clock = Clock()
        self.family_calls = 0
        self.current_during_families: list[NodeView | None] = []
        self.process = CountedProcess()
        live = CollectorRegistry(auto_describe=False)
        live.register(self.process)
        self.exposition = Exposition(self.store, self.families, clock=self.clock, live=live)

    def families(self, view: NodeView) -> Iterable[Metric]:
        self.family_calls += 1
        self.current_during_families.append(self.store.current())
        return partial(self.reader.families, version="0")(view)

    def counts(self) -> tuple[int, int]:
        return self.family_calls, self.exposition.renders


def _one_member(data: bytes) -> bytes:
    """``data`` decoded as a single gzip member, as curl and other first-member readers
    do; nothing may follow it."""
    member = zlib.decompressobj(wbits=31)
    out = member.decompress(data) + member.flush()
    assert member.eof and member.unused_data == b""
    return out


def test_a_gzipped_body_is_one_member_with_the_live_part_stored() -> None:
    """The cached part compressed at the poll, then the scrape's live part as stored
    deflate blocks and the trailer: one gzip member whose CRC and length cover both
    (zlib checks them), equal to the plain body but for the live values."""
    s = Setup()
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
    zipped = Exposition._compress(cached).finish(live)
    assert _one_member(zipped) == cached + live


def test_a_scrape_after_a_publish_renders_nothing() -> None:
    """The poll renders the text format and its gzip; scrapes, gzipped or not, don't."""
    s = Setup()
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


def test_the_view_is_rendered_before_it_becomes_current() -> None:
    """Scrapes during the rendering are served the previous view (they neither wait nor
    render)."""
    s = Setup()
    s.poller.poll_once()
    first = s.store.current()
    s.poller.poll_once()
    assert s.current_during_families == [None, first]


def test_each_format_is_rendered_at_publish_only_while_asked_for_recently() -> None:
    """Never asked: the text format at the poll, the first OpenMetrics scrape renders;
    asked recently: the poll renders what was asked (OpenMetrics alone for a Prometheus);
    not asked for ASKED_RECENT_S: the scrape renders again."""
    s = Setup()
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


def test_a_failed_preparation_leaves_the_rendering_to_the_scrape() -> None:
    """A rendering that fails at publish does not stop the view from being published."""
    s = Setup()
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


def test_a_ready_body_never_renders_nor_waits() -> None:
    """``ready_body`` gives the cached body (what ``body`` gives) and None when that
    needs a rendering, or while another scrape holds the lock: the web server then
    asks ``body`` from a worker."""
    s = Setup()
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


def test_process_metrics_are_read_at_most_once_a_second() -> None:
    """The live part's process metrics come from one reading per PROCESS_EVERY_S; the
    snapshot's age is worked out at every scrape."""
    s = Setup()
    s.poller.poll_once()
    for _ in range(5):
        body = s.exposition.body(openmetrics=False, gz=False)
    assert s.process.reads == 1
    assert b"podres_snapshot_age_seconds " in body and b"process_cpu_seconds_total" in body
    s.clock.now += PROCESS_EVERY_S
    s.exposition.body(openmetrics=True, gz=False)
    s.exposition.body(openmetrics=False, gz=False)
    assert s.process.reads == 3  # a new second: once per format


def not_live(body: bytes) -> bytes:
    """The body less its live lines (the snapshot's age and the process metrics)."""
    return b"\n".join(
        line
        for line in body.split(b"\n")
        if b"snapshot_age" not in line and b"process_" not in line
    )


@pytest.mark.parametrize("openmetrics", [False, True])
def test_the_snapshot_age_is_written_as_the_writer_writes_it(openmetrics: bool) -> None:
    """The live snapshot age, written without the writer's per-family work, is byte for
    byte what ``write`` gives: before a reading (no sample) and with one."""
    s = Setup()
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
