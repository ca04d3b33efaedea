"""The exporter's exposition, rendered once per published view.

A scrape never calls the kubelet. The exposition of a published view is
rendered once per view and format and shared by every scrape until the next
view (concurrent scrapes wait for one rendering). Only a few live lines, the
snapshot's age and the process metrics, are rendered per scrape and appended.
"""

from __future__ import annotations

import gzip
import threading
import time
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
        self._cache: dict[tuple[bool, bool], bytes] = {}
        self._live = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._live)
        self.renders = 0  # how many times the cached part was rendered

    def _cached_part(self, view: NodeView | None, openmetrics: bool, gz: bool) -> bytes:
        generation = view.snapshot.generation if view else 0
        with self._lock:
            if generation != self._cache_generation:
                self._cache = {}
                self._cache_generation = generation
            key = (openmetrics, gz)
            if key not in self._cache:
                plain = self._cache.get((openmetrics, False))
                if plain is None:
                    families = self._families(view) if view else []
                    plain = render_families(families, openmetrics)
                    if openmetrics and plain.endswith(_EOF):
                        plain = plain[: -len(_EOF)]
                    self._cache[(openmetrics, False)] = plain
                    self.renders += 1
                if gz:
                    self._cache[key] = gzip.compress(plain, compresslevel=6, mtime=0)
            return self._cache[key]

    def _live_part(self, view: NodeView | None, openmetrics: bool) -> bytes:
        families = [snapshot_age(view, self._wall()), *self._live.collect()]
        return render_families(families, openmetrics)

    def body(self, *, openmetrics: bool, gz: bool) -> bytes:
        """The full exposition; gzip as two concatenated members when ``gz``."""
        view = self._store.current()
        cached = self._cached_part(view, openmetrics, gz)
        live = self._live_part(view, openmetrics)
        if gz:
            return cached + gzip.compress(live, compresslevel=1, mtime=0)
        return cached + live
