"""One reading of the node: sources -> reading -> :class:`~podres_exporter.core.view.NodeView`.

The poll is composed here and nowhere else. The exporter's poller, ``podres snapshot``,
``podres top``'s local source, the benchmark and the golden tests all read the node
through a :class:`NodeReader`:

1. :meth:`NodeReader.observe` reads the CPU topology, starts the telemetry sources
   (NVML, sysfs devices, procfs: only those the enabled collectors need), reads the
   kubelet while they run, then collects them, each bounded by ``--source-timeout``.
   Nothing raises: a failed part comes back as its error.
2. The caller decides what to serve (the poller holds back a suspect empty reading,
   ``podres top`` keeps its last one) and :meth:`NodeReader.view` accounts it into
   an immutable NodeView.
3. :meth:`NodeReader.families` renders a view with the enabled collectors.
"""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import structlog
from prometheus_client.metrics_core import Metric

from podres_exporter import collectors
from podres_exporter.buildinfo import BuildInfo
from podres_exporter.collectors import Collector, RenderContext
from podres_exporter.core.accounting import contested
from podres_exporter.core.errors import ConfigError, KubeletError, SourceError
from podres_exporter.core.ids import DEFAULT_GPU_RESOURCES
from podres_exporter.core.model import (
    NOTHING_CONTESTED,
    KubeletReading,
    NodeTopology,
    PodAlloc,
    PodLiveness,
    RequestStats,
)
from podres_exporter.core.telemetry import SourceStatus, Telemetry
from podres_exporter.core.view import NodeView, Snapshot
from podres_exporter.exporter.settings import Settings
from podres_exporter.sources.cputopology import TopologyCache, read_topology
from podres_exporter.sources.devicecheckpoint import device_checkpoint_reader
from podres_exporter.sources.gpu import GpuBackend, open_nvml_backend
from podres_exporter.sources.kubelet import KubeletClient
from podres_exporter.sources.kubeletconfig import kubelet_config_reader
from podres_exporter.sources.liveness import read_liveness
from podres_exporter.sources.procfs import ContainerIndexCache, read_cpu_times, read_pid_cgroups
from podres_exporter.sources.sysfs import StaticCache, read_devices

log = structlog.get_logger(__name__)

# A telemetry source: a callable that returns some Telemetry fields by name.
TelemetrySource = Callable[[], Mapping[str, Any]]


class KubeletSource(Protocol):
    """What a reader needs of a kubelet client (:class:`KubeletClient`, or a test's script)."""

    socket_path: str

    def read(self) -> KubeletReading: ...

    def get_pod(self, namespace: str, name: str) -> PodAlloc | None: ...

    def stats(self) -> RequestStats: ...

    def release(self) -> None:
        """Let go of the connection until the next call (a poll far off)."""


# ---------------------------------------------------------------- telemetry


class SourceRunner:
    """Runs the telemetry sources side by side, each bounded by ``timeout_s``.

    :meth:`start` launches every source that is not still running; :meth:`collect`
    waits for them until the timeout and returns the merged Telemetry. A source
    that fails keeps its last value, marked stale with the error; one that runs
    past the timeout keeps its last value, marked stale, and is not launched again
    until it has finished, so a hung driver call never stacks up threads nor
    delays the other sources, a scrape or the process's exit (each runs on a daemon
    thread of its own). A source's failure is logged when it starts and when its
    cause (the error's class, or the timeout) changes, never once per poll.

    ``intervals`` (source name -> seconds, ``--source-interval.NAME``): a source whose
    last launch is more recent than its interval is not launched; its last value is
    served as it is (a failed or never-read source is launched at every poll).

    A source whose new value equals its last (nothing moved) keeps its last objects:
    what was derived from them downstream (the join's rows, the families and their
    text) is reused as it is.
    """

    def __init__(
        self,
        sources: Mapping[str, TelemetrySource],
        *,
        timeout_s: float = 5.0,
        intervals: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._sources = dict(sources)
        self._intervals = dict(intervals or {})
        self._launched: dict[str, float] = {}
        self._timeout = timeout_s
        self._clock = clock
        self._wall = wall_clock
        self._closed = False
        self._running: dict[str, tuple[Future[Mapping[str, Any]], float]] = {}
        self._values: dict[str, Mapping[str, Any]] = {}
        self._status: dict[str, SourceStatus] = {}
        self._cause: dict[str, str | None] = {}  # why each source last failed; None: ok
        self._started_at = 0.0

    def start(self) -> None:
        """Launch every source that is not still running from an earlier poll."""
        self._started_at = self._clock()
        if self._closed:
            return
        now = self._started_at
        for name, fn in self._sources.items():
            if name in self._running or not self._due(name, now):
                continue
            self._launched[name] = now
            self._running[name] = (_launch(name, fn), now)

    def _due(self, name: str, now: float) -> bool:
        """Whether ``name`` is read at this poll: its interval has passed since its last
        launch (less a tenth of it, at most 1 s: polls due on the interval's boundary
        jitter by milliseconds), or it has no good value to serve."""
        every = self._intervals.get(name, 0.0)
        last = self._launched.get(name)
        if every <= 0 or last is None or name not in self._values:
            return True
        status = self._status.get(name)
        if status is not None and not status.ok:
            return True
        return now - last >= every - min(1.0, every / 10)

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
                    cause="timeout",
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
                    cause=type(err).__name__,
                )
                continue
            del self._running[name]
            last = self._values.get(name)
            if last is not None and last == value:
                # The same readings: hand on the very objects, so that what was derived
                # from them (the join's rows, the families, their text) is reused.
                value = last
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

    def _set(self, name: str, status: SourceStatus, cause: str | None = None) -> None:
        """Record a source's status; log when it turns ok or failed, or fails anew."""
        before = self._status.get(name)
        if status.ok:
            if before is None or not before.ok:
                log.info("source_ok", source=name, duration_s=round(status.duration_s, 3))
        elif before is None or before.ok or self._cause.get(name) != cause:
            log.warning(
                "source_failed",
                source=name,
                cause=cause,
                error=status.error,
                stale=status.stale,
            )
        self._status[name] = status
        self._cause[name] = None if status.ok else cause

    def close(self) -> None:
        """Stop launching sources; running ones finish in their threads, which never
        hold up the process's exit (a hung driver call must not block a SIGTERM)."""
        self._closed = True


def _launch(name: str, fn: TelemetrySource) -> Future[Mapping[str, Any]]:
    """Run ``fn`` on a daemon thread of its own; its outcome in the Future. (A
    ThreadPoolExecutor's workers are joined at interpreter exit: one hung in a driver
    call would keep the process alive after SIGTERM.)"""
    future: Future[Mapping[str, Any]] = Future()

    def run() -> None:
        try:
            result = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the caller, as an executor does
            future.set_exception(err)
        else:
            future.set_result(result)

    threading.Thread(target=run, name=f"podres-source-{name}", daemon=True).start()
    return future


def gpu_source(backend: GpuBackend, settings: Settings) -> TelemetrySource:
    """GPUs from the backend, then the cgroups of their processes and the log-name index."""

    index = ContainerIndexCache()  # the runner never runs a source twice at once

    def read() -> dict[str, Any]:
        inventory = backend.read()
        pids = {p.pid for g in inventory.gpus for p in g.processes}
        if not pids:
            return {"gpus": inventory, "pid_cgroups": {}, "containers": None}
        return {
            "gpus": inventory,
            "pid_cgroups": read_pid_cgroups(settings.path_procfs, pids),
            "containers": index.read(settings.path_container_logs, settings.path_pod_logs),
        }

    return read


def build_sources(
    settings: Settings,
    enabled: Iterable[Collector],
    gpu_backend: GpuBackend | None,
    closers: list[Callable[[], None]] | None = None,
) -> dict[str, TelemetrySource]:
    """The telemetry sources the enabled collectors need, and only those; what closes
    the files they keep open is appended to ``closers``."""
    needed = frozenset().union(*(c.needs for c in enabled))
    sources: dict[str, TelemetrySource] = {}
    if "gpu" in needed and gpu_backend is not None:
        sources["gpu"] = gpu_source(gpu_backend, settings)
    if "sysfs" in needed:
        sysfs = settings.path_sysfs
        # A quarter of the descriptors this process may open, at most: the rest stay
        # for connections (see process.raise_open_files_limit).
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        budget = settings.sysfs_open_files
        if soft != resource.RLIM_INFINITY:
            budget = min(budget, soft // 4)
        static = StaticCache(open_files=budget)
        if closers is not None:
            closers.append(static.close)
        sources["sysfs"] = lambda: {"devices": read_devices(sysfs, cache=static)}
    if "cpu" in needed:
        procfs = settings.path_procfs
        sources["cpu"] = lambda: {"cpu_times": read_cpu_times(procfs)}
    sources.update(kubelet_file_sources(settings, needed))
    return sources


def kubelet_file_sources(settings: Settings, needed: frozenset[str]) -> dict[str, TelemetrySource]:
    """The kubelet's own files as sources: its configuration and its device checkpoint,
    each kept while unchanged, its last good value served when it cannot be read."""
    sources: dict[str, TelemetrySource] = {}
    if "kubelet_config" in needed:
        config = kubelet_config_reader(settings.kubelet_config_path)
        sources["kubelet_config"] = lambda: {"kubelet_config": config.read()}
    if "device_checkpoint" in needed:
        checkpoint = device_checkpoint_reader(settings.kubelet_device_checkpoint_path)
        sources["device_checkpoint"] = lambda: {"device_checkpoint": checkpoint.read()}
    return sources


def source_intervals(settings: Settings) -> dict[str, float]:
    """Each telemetry source's least time between two readings (0: every poll)."""
    return {
        "gpu": settings.source_interval_gpu_s,
        "sysfs": settings.source_interval_sysfs_s,
        "cpu": settings.source_interval_cpu_s,
    }


def enabled_collectors(settings: Settings) -> tuple[Collector, ...]:
    """The collectors switched on by the settings; ConfigError for an unknown name."""
    try:
        return collectors.select(settings.collector_overrides)
    except KeyError as err:
        raise ConfigError(f"unknown collector {err.args[0]!r}") from err


# ---------------------------------------------------------------- the reader


@dataclass(frozen=True, slots=True)
class Observation:
    """What one :meth:`NodeReader.observe` saw; a part that failed carries its error.

    ``topology`` None: sysfs could not be read (``topology_error`` says why).
    ``reading`` None: the kubelet could not be read (``kubelet_error``).
    ``telemetry`` None: no telemetry source is enabled.
    ``liveness`` None: not read (no reading, or no liveness source).
    """

    topology: NodeTopology | None
    topology_error: SourceError | None
    reading: KubeletReading | None
    kubelet_error: KubeletError | None
    telemetry: Telemetry | None
    stats: RequestStats
    taken_at: float
    liveness: PodLiveness | None = None


class NodeReader:
    """Reads one node: the kubelet, the CPU topology and the telemetry the collectors need.

    Build it with :meth:`from_settings` (what every command does); the parts can be
    injected for tests. ``gpu_backend``: NVML by default, opened only when the gpu
    collector is on; a backend passed in is the caller's to close. ``telemetry``
    False reads the kubelet and the topology only.
    """

    def __init__(
        self,
        kubelet: KubeletSource,
        read_topology: Callable[[], NodeTopology],
        *,
        enabled: Iterable[Collector] = collectors.ALL,
        runner: SourceRunner | None = None,
        gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES,
        owned: Iterable[Callable[[], None]] = (),
        wall_clock: Callable[[], float] = time.time,
        liveness: Callable[[], PodLiveness] | None = None,
    ) -> None:
        self.kubelet = kubelet
        self._liveness = liveness
        self.enabled = tuple(enabled)
        self._read_topology = read_topology
        self._runner = runner
        self._gpu_resources = tuple(gpu_resources)
        self._owned = tuple(owned)
        self._families = collectors.FamilyCache()
        self._wall = wall_clock

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        gpu_backend: GpuBackend | None = None,
        telemetry: bool = True,
        enabled: Iterable[Collector] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> NodeReader:
        """The reader the settings describe; ConfigError for an unknown collector."""
        chosen = tuple(enabled) if enabled is not None else enabled_collectors(settings)
        client = KubeletClient(
            settings.kubelet_socket,
            max_message_bytes=settings.kubelet_max_message_bytes,
            timeout_s=settings.kubelet_timeout_s,
            limits=settings.answer_limits,
            wall_clock=wall_clock,
        )
        owned: list[Callable[[], None]] = [client.close]
        runner = None
        if telemetry:
            own_backend = None
            if gpu_backend is None and any("gpu" in c.needs for c in chosen):
                gpu_backend = own_backend = open_nvml_backend(
                    slow_interval_s=settings.source_interval_gpu_slow_s
                )
            sources = build_sources(settings, chosen, gpu_backend, owned)
            if sources:
                runner = SourceRunner(
                    sources,
                    timeout_s=settings.source_timeout_s,
                    intervals=source_intervals(settings),
                    wall_clock=wall_clock,
                )
                owned.append(runner.close)
            if own_backend is not None:
                owned.append(own_backend.close)
        return cls(
            client,
            partial(read_topology, settings.path_sysfs, TopologyCache()),
            liveness=partial(
                read_liveness, settings.path_pod_logs, Path(settings.path_sysfs, "fs", "cgroup")
            ),
            enabled=chosen,
            runner=runner,
            gpu_resources=settings.gpu_resources,
            owned=owned,
            wall_clock=wall_clock,
        )

    @property
    def socket_path(self) -> str:
        return self.kubelet.socket_path

    def observe(self) -> Observation:
        """Read every part once; the telemetry sources run while the kubelet is read."""
        topology: NodeTopology | None = None
        topology_error: SourceError | None = None
        try:
            topology = self._read_topology()
        except SourceError as err:
            topology_error = err
        if self._runner is not None:
            self._runner.start()
        reading: KubeletReading | None = None
        kubelet_error: KubeletError | None = None
        try:
            reading = self.kubelet.read()
        except KubeletError as err:
            kubelet_error = err
        liveness = None
        if reading is not None and self._liveness is not None:
            # Read only when some device or CPU is listed by several pods (a kubelet
            # before 1.34 listing a finished pod): never on most nodes.
            liveness = self._liveness() if contested(reading) else NOTHING_CONTESTED
        telemetry = self._runner.collect() if self._runner is not None else None
        return Observation(
            topology=topology,
            topology_error=topology_error,
            reading=reading,
            kubelet_error=kubelet_error,
            telemetry=telemetry,
            stats=self.kubelet.stats(),
            taken_at=self._wall(),
            liveness=liveness,
        )

    def view(
        self,
        seen: Observation,
        *,
        generation: int,
        previous: NodeView | None = None,
        suspect_empty_readings: int = 0,
    ) -> NodeView:
        """Account ``seen`` into a NodeView, serving the last good data for a failed part.

        A topology or kubelet reading that failed is replaced by ``previous``'s (the
        last good one; an empty topology or no reading before there is one). ``seen``
        always gives the kubelet's state, its request statistics and the telemetry.
        """
        last = previous.snapshot if previous is not None else None
        topology = seen.topology
        if topology is None:
            topology = last.topology if last is not None else NodeTopology(frozenset())
        reading, liveness = seen.reading, seen.liveness
        if reading is None and last is not None:
            reading, liveness = last.reading, last.liveness
        error = seen.kubelet_error
        snap = Snapshot(
            generation=generation,
            taken_at=seen.taken_at,
            topology=topology,
            reading=reading,
            kubelet_up=error is None,
            kubelet_error=None if error is None else str(error),
            stats=seen.stats,
            suspect_empty_readings=suspect_empty_readings,
            telemetry=seen.telemetry,
            liveness=liveness,
        )
        return NodeView.of(snap, previous, gpu_resources=self._gpu_resources)

    def families(
        self, view: NodeView, version: str, node: str = "", build: BuildInfo | None = None
    ) -> list[Metric]:
        """The enabled collectors' metric families for ``view`` (a collector whose inputs
        did not change since the last call gives the same family objects); ``node`` and
        ``build`` (revision, Python version) for the build collector."""
        b = build or BuildInfo(version)
        ctx = RenderContext(view, version, node, b.revision, b.python_version)
        return collectors.collect_all(self.enabled, ctx, cache=self._families)

    def release(self) -> None:
        """Let go of what is kept open only to be reused soon: the kubelet's channel."""
        self.kubelet.release()

    def close(self) -> None:
        """Close what the reader opened (the kubelet channel, NVML, the source threads)."""
        for close in self._owned:
            close()
