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

The families are written by :mod:`~podres_exporter.exporter.textformat`; this module
decides when, keeps what it wrote per view and format (plain and as the start of a gzip
member), and adds the live lines at each scrape.
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

from podres_exporter.collectors.kubelet import snapshot_age, snapshot_age_seconds
from podres_exporter.core.view import NodeView
from podres_exporter.exporter.poller import Store
from podres_exporter.exporter.textformat import (
    EOF_LINE,
    WriteCache,
    go_float,
    render_families,
    write,
)

log = structlog.get_logger(__name__)

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
    ``live``: the registry read for each scrape's live lines, at most once per
    :data:`PROCESS_EVERY_S` (None: one holding the process metrics).
    """

    def __init__(
        self,
        store: Store,
        families: Callable[[NodeView], Iterable[Metric]],
        *,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        live: CollectorRegistry | None = None,
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
        if live is None:
            live = CollectorRegistry(auto_describe=False)
            ProcessCollector(registry=live)
        self._live = live
        self.renders = 0  # how many times a cached part was rendered
        store.on_publish(self.prepare)

    def _view_families(self, view: NodeView | None) -> list[Metric]:
        return list(self._families(view)) if view else []

    def _render(self, families: list[Metric], openmetrics: bool) -> bytes:
        """The part rendered once per view and format (without OpenMetrics' ``# EOF``)."""
        plain = render_families(families, openmetrics, cache=self._write_cache)
        self.renders += 1
        return plain[: -len(EOF_LINE)] if openmetrics and plain.endswith(EOF_LINE) else plain

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
        return self._age(view, openmetrics) + (process[1] + EOF_LINE if openmetrics else process[1])

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
