"""The background loop: one reading per interval, never one per scrape.

Each poll reads the node through a :class:`~podres_exporter.reader.NodeReader`
(topology, kubelet, telemetry), decides what to serve, and publishes the immutable
:class:`~podres_exporter.view.NodeView` the reader accounts. When the kubelet
fails, the last good reading stays published with ``kubelet_up`` false, and the
next attempt waits an exponential backoff with jitter
(:class:`~podres_exporter.backoff.Backoff`; the kubelet's rate limit is global:
hammering it hurts every client on the node).

A kubelet that has just restarted answers for a short while with no pods and
no allocatable CPUs. A reading that lost every pod, or every allocatable CPU, at
once is held back and re-read soon; it is accepted only when it persists for
``empty_confirm_s``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import structlog

from podres_exporter.backoff import Backoff
from podres_exporter.errors import KubeletError
from podres_exporter.model import KubeletReading
from podres_exporter.reader import NodeReader, Observation
from podres_exporter.view import NodeView

log = structlog.get_logger(__name__)


class Store:
    """The latest published NodeView, shared by the HTTP server and other readers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._view: NodeView | None = None

    def current(self) -> NodeView | None:
        """The latest view, or None before the first poll finished."""
        return self._view

    def publish(self, view: NodeView) -> None:
        """Replace the current view and wake waiters."""
        with self._cond:
            self._view = view
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[NodeView], bool], timeout: float) -> NodeView | None:
        """Block until a published view satisfies ``predicate``; None on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._view is None or not predicate(self._view):
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self._view


def _cpus(reading: KubeletReading) -> frozenset[int]:
    return reading.allocatable.cpu_ids if reading.allocatable is not None else frozenset()


def _lost_everything(before: KubeletReading, now: KubeletReading) -> bool:
    """Every pod, or every allocatable CPU, gone at once: what a restarting kubelet says.

    Either alone counts: List and GetAllocatableResources are two calls, and the
    kubelet's start-up window can end between them.
    """
    return (bool(before.pods) and not now.pods) or (bool(_cpus(before)) and not _cpus(now))


class Poller:
    """Reads the node through a :class:`NodeReader` once per interval; publishes to a Store."""

    def __init__(
        self,
        reader: NodeReader,
        store: Store,
        *,
        interval_s: float = 10.0,
        backoff: Backoff | None = None,
        empty_confirm_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._reader = reader
        self._store = store
        self._interval = interval_s
        self._backoff = backoff or Backoff()
        self._empty_confirm = empty_confirm_s
        self._clock = clock
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._generation = 0
        self._failures = 0
        self._last_error_kind: str | None = None
        self._reading: KubeletReading | None = None
        self._suspect_since: float | None = None
        self._suspect_total = 0

    # -- one poll

    def poll_once(self) -> float:
        """Poll once, publish when there is something new; return the seconds to wait."""
        seen = self._reader.observe()
        if seen.topology_error is not None:
            log.error("topology_read_failed", error=str(seen.topology_error))
        if seen.reading is None:
            assert seen.kubelet_error is not None
            return self._failed(seen, seen.kubelet_error)
        reading = seen.reading
        if self._failures:
            log.info(
                "kubelet_recovered", socket=self._reader.socket_path, after_failures=self._failures
            )
        self._failures = 0
        self._last_error_kind = None
        if self._reading is not None and _lost_everything(self._reading, reading):
            now = self._clock()
            if self._suspect_since is None:
                self._suspect_since = now
                self._suspect_total += 1
                log.warning(
                    "kubelet_empty_reading_held",
                    socket=self._reader.socket_path,
                    reason="every pod or every allocatable CPU gone at once; "
                    "the kubelet may have just restarted",
                )
            if now - self._suspect_since < self._empty_confirm:
                return min(0.5, self._interval)
            log.info("kubelet_empty_reading_confirmed", socket=self._reader.socket_path)
        self._suspect_since = None
        self._reading = reading
        self._publish(seen)
        return self._interval

    def _failed(self, seen: Observation, err: KubeletError) -> float:
        self._failures += 1
        kind = type(err).__name__
        if kind != self._last_error_kind:
            log.warning(
                "kubelet_read_failed",
                socket=self._reader.socket_path,
                error_kind=kind,
                code=err.code,
                error=str(err),
                serving="last good reading" if self._reading else "nothing yet",
            )
            self._last_error_kind = kind
        self._suspect_since = None
        self._publish(seen)
        return self._backoff.delay(self._failures, self._rng)

    def _publish(self, seen: Observation) -> None:
        self._generation += 1
        view = self._reader.view(
            seen,
            generation=self._generation,
            previous=self._store.current(),
            suspect_empty_readings=self._suspect_total,
        )
        self._store.publish(view)

    # -- the loop

    def run(self) -> None:
        """Poll until :meth:`stop`; never raises on bad data or a missing kubelet."""
        while not self._stop.is_set():
            try:
                wait = self.poll_once()
            except Exception:
                log.exception("poll_failed")
                self._failures += 1
                wait = self._backoff.delay(self._failures, self._rng)
            self._stop.wait(wait)

    def start(self) -> None:
        """Run the loop in a daemon thread."""
        self._thread = threading.Thread(target=self.run, name="podres-poller", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        """True while the loop thread runs (the /healthz answer)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to stop and wait for it (the reader is its owner's to close)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
