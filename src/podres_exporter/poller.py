"""The background loop: one reading per interval, never one per scrape.

Each poll reads the node topology and the kubelet, accounts the result and
publishes an immutable :class:`~podres_exporter.view.NodeView`. When the kubelet
fails, the last good reading stays published with ``kubelet_up`` false, and the
next attempt waits an exponential backoff with jitter (the kubelet's rate limit
is global: hammering it hurts every client on the node).

A kubelet that has just restarted answers for a short while with no pods and
no allocatable CPUs. A reading that lost every pod, or every allocatable CPU, at
once is held back and re-read soon; it is accepted only when it persists for
``empty_confirm_s``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

import structlog

from podres_exporter.errors import KubeletError, SourceError
from podres_exporter.ids import DEFAULT_GPU_RESOURCES
from podres_exporter.model import KubeletReading, NodeTopology, RequestStats, Snapshot
from podres_exporter.telemetry import SourceStatus, Telemetry
from podres_exporter.view import NodeView

log = structlog.get_logger(__name__)


class KubeletSource(Protocol):
    """What the poller needs of a kubelet client."""

    socket_path: str

    def read(self) -> KubeletReading: ...

    def stats(self) -> RequestStats: ...


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


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter.

    The n-th retry waits a random time in [d/2, d], d = min(max, initial * 2^(n-1)).
    """

    initial_s: float = 1.0
    max_s: float = 30.0

    def delay(self, failures: int, rng: random.Random) -> float:
        d = min(self.max_s, self.initial_s * (2 ** max(failures - 1, 0)))
        return rng.uniform(d / 2, d)


# A telemetry source: a callable that returns some Telemetry fields by name.
Source = Callable[[], Mapping[str, Any]]


class SourceRunner:
    """Runs the telemetry sources side by side, each bounded by ``timeout_s``.

    :meth:`start` launches every source that is not still running; :meth:`collect`
    waits for them until the timeout and returns the merged Telemetry. A source
    that fails keeps its last value, marked stale with the error; one that runs
    past the timeout keeps its last value, marked stale, and is not launched again
    until it has finished, so a hung driver call never stacks up threads nor
    delays the other sources or a scrape.
    """

    def __init__(
        self,
        sources: Mapping[str, Source],
        *,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._sources = dict(sources)
        self._timeout = timeout_s
        self._clock = clock
        self._wall = wall_clock
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, len(self._sources)), thread_name_prefix="podres-source"
        )
        self._running: dict[str, tuple[Future[Mapping[str, Any]], float]] = {}
        self._values: dict[str, Mapping[str, Any]] = {}
        self._status: dict[str, SourceStatus] = {}
        self._started_at = 0.0

    def start(self) -> None:
        """Launch every source that is not still running from an earlier poll."""
        self._started_at = self._clock()
        for name, fn in self._sources.items():
            if name not in self._running:
                self._running[name] = (self._pool.submit(fn), self._clock())

    def collect(self) -> Telemetry:
        """Wait for the running sources until the timeout; merge the latest values."""
        deadline = self._started_at + self._timeout
        for name, (future, started) in list(self._running.items()):
            previous = self._status.get(name)
            last_ok = previous.last_success if previous else None
            try:
                value = future.result(timeout=max(0.0, deadline - self._clock()))
            except TimeoutError:
                self._set(
                    name,
                    SourceStatus(
                        ok=False,
                        duration_s=self._clock() - started,
                        stale=True,
                        error=f"still running after {self._timeout:g}s (--source-timeout)",
                        last_success=last_ok,
                    ),
                )
                continue
            except Exception as err:  # noqa: BLE001 - one broken source must not stop the others
                del self._running[name]
                self._set(
                    name,
                    SourceStatus(
                        ok=False,
                        duration_s=self._clock() - started,
                        stale=name in self._values,
                        error=f"{type(err).__name__}: {err}",
                        last_success=last_ok,
                    ),
                )
                continue
            del self._running[name]
            self._values[name] = value
            self._set(
                name,
                SourceStatus(
                    ok=True, duration_s=self._clock() - started, last_success=self._wall()
                ),
            )
        merged: dict[str, Any] = {}
        for name in self._sources:
            merged.update(self._values.get(name, {}))
        return Telemetry(**merged, sources=MappingProxyType(dict(self._status)))

    def _set(self, name: str, status: SourceStatus) -> None:
        before = self._status.get(name)
        if before is None or before.ok != status.ok:
            if status.ok:
                log.info("source_ok", source=name, duration_s=round(status.duration_s, 3))
            else:
                log.warning("source_failed", source=name, error=status.error, stale=status.stale)
        self._status[name] = status

    def close(self) -> None:
        """Stop accepting work; running sources finish in their threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def _cpus(reading: KubeletReading) -> frozenset[int]:
    return reading.allocatable.cpu_ids if reading.allocatable is not None else frozenset()


def _lost_everything(before: KubeletReading, now: KubeletReading) -> bool:
    """Every pod, or every allocatable CPU, gone at once: what a restarting kubelet says.

    Either alone counts: List and GetAllocatableResources are two calls, and the
    kubelet's start-up window can end between them.
    """
    return (bool(before.pods) and not now.pods) or (bool(_cpus(before)) and not _cpus(now))


class Poller:
    """Owns the kubelet client and the topology reader; publishes to a Store."""

    def __init__(
        self,
        kubelet: KubeletSource,
        read_topology: Callable[[], NodeTopology],
        store: Store,
        *,
        interval_s: float = 10.0,
        backoff: Backoff | None = None,
        empty_confirm_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        telemetry: SourceRunner | None = None,
        gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES,
    ) -> None:
        self._kubelet = kubelet
        self._telemetry = telemetry
        self._telemetry_value: Telemetry | None = None
        self._gpu_resources = tuple(gpu_resources)
        self._read_topology = read_topology
        self._store = store
        self._interval = interval_s
        self._backoff = backoff or Backoff()
        self._empty_confirm = empty_confirm_s
        self._clock = clock
        self._wall = wall_clock
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._generation = 0
        self._failures = 0
        self._last_error_kind: str | None = None
        self._reading: KubeletReading | None = None
        self._topology = NodeTopology(online_cpus=frozenset())
        self._suspect_since: float | None = None
        self._suspect_total = 0

    # -- one poll

    def poll_once(self) -> float:
        """Poll once, publish when there is something new; return the seconds to wait."""
        try:
            self._topology = self._read_topology()
        except SourceError as err:
            log.error("topology_read_failed", error=str(err))
        if self._telemetry is not None:
            self._telemetry.start()  # the sources run while the kubelet is read
        try:
            reading = self._kubelet.read()
        except KubeletError as err:
            self._collect_telemetry()
            return self._failed(err)
        self._collect_telemetry()
        if self._failures:
            log.info(
                "kubelet_recovered", socket=self._kubelet.socket_path, after_failures=self._failures
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
                    socket=self._kubelet.socket_path,
                    reason="every pod or every allocatable CPU gone at once; "
                    "the kubelet may have just restarted",
                )
            if now - self._suspect_since < self._empty_confirm:
                return min(0.5, self._interval)
            log.info("kubelet_empty_reading_confirmed", socket=self._kubelet.socket_path)
        self._suspect_since = None
        self._reading = reading
        self._publish(kubelet_up=True, error=None)
        return self._interval

    def _collect_telemetry(self) -> None:
        if self._telemetry is not None:
            self._telemetry_value = self._telemetry.collect()

    def _failed(self, err: KubeletError) -> float:
        self._failures += 1
        kind = type(err).__name__
        if kind != self._last_error_kind:
            log.warning(
                "kubelet_read_failed",
                socket=self._kubelet.socket_path,
                error_kind=kind,
                code=err.code,
                error=str(err),
                serving="last good reading" if self._reading else "nothing yet",
            )
            self._last_error_kind = kind
        self._suspect_since = None
        self._publish(kubelet_up=False, error=str(err))
        return self._backoff.delay(self._failures, self._rng)

    def _publish(self, *, kubelet_up: bool, error: str | None) -> None:
        self._generation += 1
        snap = Snapshot(
            generation=self._generation,
            taken_at=self._wall(),
            topology=self._topology,
            reading=self._reading,
            kubelet_up=kubelet_up,
            kubelet_error=error,
            stats=self._kubelet.stats(),
            suspect_empty_readings=self._suspect_total,
            telemetry=self._telemetry_value,
        )
        view = NodeView.of(snap, self._store.current(), gpu_resources=self._gpu_resources)
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
        """Ask the loop to stop and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._telemetry is not None:
            self._telemetry.close()
