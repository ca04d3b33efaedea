"""The exporter's exposition, rendered once per published view.

A scrape never calls the kubelet. The exposition of a published view is
rendered once per view and format and shared by every scrape until the next
view (concurrent scrapes wait for one rendering). Only a few live lines, the
snapshot's age and the process metrics, are rendered per scrape and appended.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.kubelet import snapshot_age
from podres_exporter.poller import Store
from podres_exporter.view import NodeView
from podres_exporter.web import render_registry

_EOF = b"# EOF\n"


class _Families:
    """A prometheus_client collector over already-built families."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def render_families(families: Iterable[Metric], openmetrics: bool) -> bytes:
    """Families in the text format, or OpenMetrics (with its ``# EOF``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return render_registry(registry, openmetrics=openmetrics)


class Exposition:
    """Renders and caches the exposition of the Store's current view.

    ``families`` turns a view into its metric families (the exporter passes its
    NodeReader's :meth:`~podres_exporter.reader.NodeReader.families`).
    """

    def __init__(
        self,
        store: Store,
        families: Callable[[NodeView], Iterable[Metric]],
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._families = families
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._cache_generation = -1
        self._cache: dict[bool, bytes] = {}  # openmetrics -> the cached part
        # openmetrics -> the gzip stream after the cached part: its output so far, and the
        # compressor to copy for each scrape's live part (one member in all).
        self._gzip: dict[bool, tuple[bytes, zlib._Compress]] = {}
        self._live = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._live)
        self.renders = 0  # how many times the cached part was rendered

    def _cached(
        self, view: NodeView | None, openmetrics: bool, gz: bool
    ) -> tuple[bytes, zlib._Compress | None]:
        """The part rendered once per view and format (without OpenMetrics' ``# EOF``);
        with ``gz``, that part compressed once per view and a copy of the compressor, so
        each scrape only compresses its live part into the same gzip member. One lock
        hold: a new view between the two would otherwise mix generations."""
        generation = view.snapshot.generation if view else 0
        with self._lock:
            if generation != self._cache_generation:
                self._cache = {}
                self._gzip = {}
                self._cache_generation = generation
            plain = self._cache.get(openmetrics)
            if plain is None:
                families = self._families(view) if view else []
                plain = render_families(families, openmetrics)
                if openmetrics and plain.endswith(_EOF):
                    plain = plain[: -len(_EOF)]
                self._cache[openmetrics] = plain
                self.renders += 1
            if not gz:
                return plain, None
            stream = self._gzip.get(openmetrics)
            if stream is None:
                # wbits 31: a gzip member (header, deflate, CRC and size trailer).
                compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
                stream = (compressor.compress(plain), compressor)
                self._gzip[openmetrics] = stream
            head, compressor = stream
            return head, compressor.copy()

    def _live_part(self, view: NodeView | None, openmetrics: bool) -> bytes:
        families = [snapshot_age(view, self._wall()), *self._live.collect()]
        return render_families(families, openmetrics)

    def body(self, *, openmetrics: bool, gz: bool) -> bytes:
        """The full exposition; when ``gz``, one gzip member (decoders that read only
        the first member, as curl does, see it all)."""
        view = self._store.current()
        head, compressor = self._cached(view, openmetrics, gz)
        live = self._live_part(view, openmetrics)
        if compressor is None:
            return head + live
        return head + compressor.compress(live) + compressor.flush()
