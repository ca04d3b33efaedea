"""The background loop: one reading per interval, never one per scrape.

Each poll reads the node through a :class:`~podres_exporter.exporter.reader.NodeReader`
(topology, kubelet, telemetry), decides what to serve, and publishes the immutable
:class:`~podres_exporter.core.view.NodeView` the reader accounts. When the kubelet
fails, the last good reading stays published with ``kubelet_up`` false, and the
next attempt waits an exponential backoff with jitter
(:class:`~podres_exporter.daemon.backoff.Backoff`; the kubelet's rate limit is global:
hammering it hurts every client on the node).

A kubelet that has just restarted answers for a short while with no pods and
no allocatable CPUs. A reading that lost every pod, or every allocatable CPU, at
once is held back and re-read soon; it is accepted only when it persists for
``empty_confirm_s``.

Each failure is logged once per change of state, not once per retry: a kubelet failure
once per distinct cause (the error's class, gRPC code and message, numbers and the
socket's path aside; every timeout one cause) while it lasts, each such line counting
every cause seen so far, and the recovery with the same counts. :meth:`Poller.health` is
the exporter's ``/healthz``: the loop's thread runs and has finished a poll recently
(:func:`stall_after`).
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable

import structlog

from podres_exporter.core.errors import KubeletError, KubeletTimeout
from podres_exporter.core.model import KubeletReading
from podres_exporter.core.view import NodeView
from podres_exporter.daemon.backoff import Backoff
from podres_exporter.exporter.reader import NodeReader, Observation
from podres_exporter.exporter.settings import Settings

log = structlog.get_logger(__name__)

# The most kubelet calls in one reading (List v1, its v1alpha1 fallback, allocatable),
# each bounded by --kubelet-timeout.
_KUBELET_CALLS = 3
# How many times the longest legitimate poll cycle may pass before the loop counts as
# stalled, and the least time that takes (a big node's accounting is not bounded by a flag).
_STALL_MARGIN = 2.0
_MIN_STALL_S = 60.0
# A wait at least this long lets the kubelet's channel go until the next poll: an open
# one costs about 1 ms of CPU a second (gRPC's threads waking), a new one about 2 ms.
_RELEASE_AFTER_S = 5.0
# Distinct causes of kubelet failures named in the log while a failure lasts; the ones
# past these are counted together (a kubelet's messages are a handful, not unbounded).
_MAX_CAUSES = 8
_OTHER_CAUSES = "other causes"
_CAUSE_CHARS = 200
_NUMBER = re.compile(r"\d+")


def failure_cause(err: KubeletError, socket_path: str) -> str:
    """A kubelet failure's cause as logged: class, gRPC code and the message's last clause
    (after its last ``": "``: the system's or gRPC's final reason, e.g. ``Connection
    refused``), the socket's path as ``<socket>`` and each number as ``N`` (sizes and
    addresses vary from one retry of the same cause to the next). gRPC words one refusal
    several ways ("failed to connect to all addresses; last error: ...: Connection
    refused", "connect failed: ... error: Connection refused"): one cause. A timeout is one
    cause, whatever gRPC's words for it."""
    if isinstance(err, KubeletTimeout):
        return f"{type(err).__name__} {err.code}"
    last = str(err).replace(socket_path, "<socket>").rsplit(": ", 1)[-1]
    return f"{type(err).__name__} {err.code}: {_NUMBER.sub('N', last)}"[:_CAUSE_CHARS]


def stall_after(settings: Settings) -> float:
    """Seconds without a finished poll after which the loop is stalled (``/healthz`` fails).

    A cycle waits at most the poll interval or the backoff ceiling, then reads the
    kubelet (each call bounded by its timeout) while the telemetry runs (bounded by the
    source timeout); twice that, and at least a minute.
    """
    cycle = (
        max(settings.poll_interval_s, settings.backoff_max_s)
        + _KUBELET_CALLS * settings.kubelet_timeout_s
        + settings.source_timeout_s
    )
    return max(_MIN_STALL_S, _STALL_MARGIN * cycle)


class Store:
    """The latest published NodeView, shared by the HTTP server and other readers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._view: NodeView | None = None
        self._prepare: list[Callable[[NodeView], None]] = []

    def on_publish(self, prepare: Callable[[NodeView], None]) -> None:
        """Call ``prepare(view)`` on every publish, in the publishing thread, before the
        view becomes current: readers keep the previous view meanwhile (the exposition
        renders the new one there, so no scrape renders)."""
        self._prepare.append(prepare)

    def current(self) -> NodeView | None:
        """The latest view, or None before the first poll finished."""
        return self._view

    def publish(self, view: NodeView) -> None:
        """Prepare ``view`` (:meth:`on_publish`), then make it current and wake waiters."""
        for prepare in self._prepare:
            prepare(view)
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
        stall_after_s: float = _MIN_STALL_S,
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
        self._last_error_kind: tuple[str, str] | None = None
        self._causes: Counter[str] = Counter()
        self._kubelet_error: KubeletError | None = None
        self._topology_failed = False
        self._poll_error_kind: str | None = None
        self._stall_after = stall_after_s
        self._progress_at: float | None = None
        self._reading: KubeletReading | None = None
        self._suspect_since: float | None = None
        self._suspect_total = 0

    # -- one poll

    def poll_once(self) -> float:
        """Poll once, publish when there is something new; return the seconds to wait."""
        seen = self._reader.observe()
        self._note_topology(seen)
        self._kubelet_error = seen.kubelet_error
        if seen.reading is None:
            assert seen.kubelet_error is not None
            return self._failed(seen, seen.kubelet_error)
        reading = seen.reading
        if self._last_error_kind is not None:
            log.info(
                "kubelet_recovered",
                socket=self._reader.socket_path,
                after_failures=self._failures,
                causes=dict(self._causes),
            )
        self._failures = 0
        self._last_error_kind = None
        self._causes.clear()
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

    def _note_topology(self, seen: Observation) -> None:
        """Log the topology's failure once when it starts, and its recovery."""
        if seen.topology_error is not None and not self._topology_failed:
            log.error(
                "topology_read_failed",
                error=str(seen.topology_error),
                serving="last good topology" if self._reading else "none",
            )
        elif seen.topology_error is None and self._topology_failed:
            log.info("topology_recovered")
        self._topology_failed = seen.topology_error is not None

    def _failed(self, seen: Observation, err: KubeletError) -> float:
        self._failures += 1
        self._last_error_kind = (type(err).__name__, err.code)
        cause = failure_cause(err, self._reader.socket_path)
        new = cause not in self._causes
        if new and len(self._causes) >= _MAX_CAUSES:
            cause, new = _OTHER_CAUSES, _OTHER_CAUSES not in self._causes
        self._causes[cause] += 1
        if new and not self._stop.is_set():
            log.warning(
                "kubelet_read_failed",
                socket=self._reader.socket_path,
                error_kind=type(err).__name__,
                code=err.code,
                error=str(err),
                causes=dict(self._causes),
                serving="last good reading" if self._reading else "nothing yet",
            )
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
        """Poll until :meth:`stop`; never raises on bad data or a missing kubelet.

        The cadence runs on deadlines of the monotonic clock: the next poll is due its
        wait after this one was due, not after it finished, so neither a poll's own
        time nor scrapes competing for the interpreter stretch the interval. A loop
        that fell behind (a poll longer than the interval) starts the next poll at
        once, without a burst to catch up. After a failure the backoff is waited in
        full from the failure's end."""
        due = time.monotonic()
        while not self._stop.is_set():
            try:
                wait = self.poll_once()
            except Exception as err:
                kind = type(err).__name__
                if kind != self._poll_error_kind and not self._stop.is_set():
                    log.exception("poll_failed", error_kind=kind)
                    self._poll_error_kind = kind
                self._failures += 1
                wait = self._backoff.delay(self._failures, self._rng)
            else:
                if self._poll_error_kind is not None:
                    log.info("poll_recovered", after=self._poll_error_kind)
                    self._poll_error_kind = None
            self._progress_at = self._clock()
            now = time.monotonic()
            # A backoff counts from the failure (a call that timed out is not retried at
            # once); a regular poll is due one interval after the last was due.
            due = now + wait if self._failures else max(due + wait, now)
            if due - now >= _RELEASE_AFTER_S:
                self._release()
            self._stop.wait(due - now)

    def _release(self) -> None:
        """Let the reader's kubelet channel go until the next poll; a failure to is
        logged, and the next poll connects all the same."""
        try:
            self._reader.release()
        except Exception as err:  # noqa: BLE001 - never the loop's end
            log.warning("kubelet_release_failed", error=repr(err))

    @property
    def kubelet_error(self) -> KubeletError | None:
        """The kubelet's error at the latest poll; None when it answered (or before any)."""
        return self._kubelet_error

    def start(self) -> None:
        """Run the loop in a daemon thread."""
        self._progress_at = self._clock()
        self._thread = threading.Thread(target=self.run, name="podres-poller", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        """True while the loop thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def health(self) -> tuple[bool, str]:
        """The loop's part of ``/healthz``: its thread runs and finished a poll within
        ``stall_after_s`` (a poll that hangs, or a wait that never ends, fails it)."""
        if not self.alive():
            return False, "poller stopped"
        progress = self._progress_at
        if progress is not None and self._clock() - progress > self._stall_after:
            return False, "poller stalled"
        return True, "ok"

    def stop(self, timeout: float = 5.0, *, interrupt: Callable[[], None] | None = None) -> None:
        """Ask the loop to stop, run ``interrupt`` (what ends a poll in flight: its owner
        closing the reader cancels a kubelet call whose deadline is far away), and wait
        for the loop. A poll that fails because it was interrupted is not logged."""
        self._stop.set()
        if interrupt is not None:
            interrupt()
        if self._thread is not None:
            self._thread.join(timeout)
