"""Serve, prove, register, watch: the life of each resource's plugin socket.

For each resource, on its own thread (:class:`ResourcePlugin`):

1. serve ``DevicePlugin`` on a socket of its own in the device-plugins directory
   (:mod:`~podres_exporter.deviceplugin.serving`);
2. dial that socket and call ``GetDevicePluginOptions``: it answers before the
   kubelet is told about it;
3. ``Register`` with ``<dir>/kubelet.sock``
   (:mod:`~podres_exporter.deviceplugin.registration`). Refused, or no kubelet:
   retried with exponential backoff (with jitter), forever. The wait is logged at
   once (``kubelet_unavailable`` with the socket's path and the cause: missing,
   connection refused; ``registration_failed`` when the kubelet answered no), then
   again on a doubling schedule (``report_initial_s`` up to ``report_max_s``), and
   ``plugin_registered`` says how long it waited.
4. watch: every ``tick_s`` (100 ms), and at once when :class:`KubeletWatch` sees
   ``kubelet.sock`` change, the plugin's loop reads the socket's identity (device
   and inode); when the kubelet re-created it (a restart), or when our own socket
   vanished (the kubelet deletes plugin sockets at start), a fresh socket is
   served and registered again, in well under 2 s. Allocations live in the
   kubelet's checkpoint: nothing is lost. When the kubelet ends the ListAndWatch
   stream of the current registration, the plugin registers again (not when the
   servicer ended it for a newer stream).

Each retry waits a :class:`~podres_exporter.daemon.backoff.Backoff` from ``Timing``'s
``backoff_initial_s`` to ``backoff_max_s``: a refused Register with jitter (every
plugin on the node retries while the kubelet is away); serving a socket again,
registering again after a lost stream, and going on after an unexpected error,
without.

:meth:`PluginManager.stop` ends the streams, stops the servers with a short grace
and removes the sockets; :meth:`PluginManager.alive` says whether every thread still
runs. This module is the loop; it speaks no gRPC itself.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import structlog

from podres_exporter.core.errors import RegistrationError
from podres_exporter.daemon.backoff import NO_JITTER, Backoff, Jitter
from podres_exporter.daemon.fileid import FileIdentity, file_identity
from podres_exporter.deviceplugin.board import Board
from podres_exporter.deviceplugin.config import ResourceConfig
from podres_exporter.deviceplugin.kubeletwatch import KubeletWatch
from podres_exporter.deviceplugin.metrics import PluginMetrics
from podres_exporter.deviceplugin.registration import (
    KUBELET_SOCKET,
    KubeletUnavailable,
    WaitReport,
    register,
)
from podres_exporter.deviceplugin.servicer import DevicePluginServicer, HealthCheck
from podres_exporter.deviceplugin.serving import UNARY_WORKERS, Served, SocketServing

log = structlog.get_logger(__name__)

# A Register retry waits 0.8 to 1.2 times its backoff ceiling.
REGISTER_JITTER: Final[Jitter] = (0.8, 1.2)


@dataclass(frozen=True, slots=True)
class Timing:
    """Timeouts and backoff of the lifecycle, in seconds.

    Every retry (serve, Register, register again after a lost stream) backs off from
    ``backoff_initial_s`` to ``backoff_max_s``. ``register_timeout_s`` must outlast
    the kubelet's 10 s dial back; ``grace_s`` is how long in-flight calls get at
    shutdown (well inside a pod's grace period). While it cannot register, the plugin
    logs so at once, then after ``report_initial_s``, doubling up to ``report_max_s``.
    """

    backoff_initial_s: float = 0.2
    backoff_max_s: float = 5.0
    register_timeout_s: float = 15.0
    self_dial_timeout_s: float = 5.0
    grace_s: float = 1.0
    tick_s: float = 0.1
    report_initial_s: float = 10.0
    report_max_s: float = 300.0


class ResourcePlugin:
    """One resource's plugin: serve, self-dial, register, re-register; its own thread."""

    def __init__(
        self,
        resource: ResourceConfig,
        board: Board,
        metrics: PluginMetrics,
        watch: KubeletWatch,
        *,
        plugin_dir: str,
        health_check: HealthCheck | None = None,
        timing: Timing = Timing(),
        unary_workers: int = UNARY_WORKERS,
    ) -> None:
        self.resource = resource
        self._board = board
        self._metrics = metrics
        self._watch = watch
        self._kubelet_path = os.path.join(os.path.abspath(plugin_dir), KUBELET_SOCKET)
        self._sockets = SocketServing(
            resource,
            board,
            metrics,
            plugin_dir=plugin_dir,
            health_check=health_check,
            on_stream_lost=self._stream_ended,
            unary_workers=unary_workers,
            self_dial_timeout_s=timing.self_dial_timeout_s,
            grace_s=timing.grace_s,
        )
        self._timing = timing
        self._register_backoff = Backoff(
            timing.backoff_initial_s, timing.backoff_max_s, jitter=REGISTER_JITTER
        )
        self._backoff = Backoff(timing.backoff_initial_s, timing.backoff_max_s, jitter=NO_JITTER)
        self._wait_report = WaitReport(
            Backoff(timing.report_initial_s, timing.report_max_s, jitter=NO_JITTER)
        )
        self._rng = random.Random()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._served: Served | None = None
        self._registered_with: FileIdentity | None = None
        self._thread: threading.Thread | None = None
        self._serve_retry_at = 0.0  # after a failed serve, not before this (monotonic)
        self._serve_failures = 0  # in a row
        self._lost: tuple[DevicePluginServicer, float] | None = None
        self._registered_at = 0.0  # when the current registration's Register call began
        self.registrations = 0

    # -- state, for tests and /readyz

    @property
    def socket_path(self) -> str | None:
        with self._lock:
            return None if self._served is None else self._served.path

    @property
    def registered(self) -> bool:
        with self._lock:
            return self._registered_with is not None

    # -- thread

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"podres-plugin-{self.resource.slug}", daemon=True
        )
        self._thread.start()

    def alive(self) -> bool:
        """Whether the lifecycle thread runs (started, not stopped, not died)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop the thread, end the streams, stop the server, remove the socket."""
        self._stop.set()
        if self._thread is not None:  # a Register in flight is left to its deadline
            self._thread.join(timeout=self._timing.grace_s + 1)
        with self._lock:
            served, self._served = self._served, None
            self._registered_with = None
        if served is not None:
            self._sockets.retire(served)
        self._metrics.set_registered(self.resource.name, False)

    def _run(self) -> None:
        # Failures in a row: of Register (a loop error counts as one), reset by a
        # registration, a fresh socket or a new kubelet; and streams lost, reset only by
        # a new kubelet, so a kubelet that keeps ending our streams is not hammered.
        failures = lost = 0
        next_attempt = 0.0
        seen_kubelet = file_identity(self._kubelet_path)
        while not self._stop.is_set():
            generation = self._watch.generation
            # Read afresh, not the watch's copy, which can lag behind a registration that
            # already went to the new kubelet (a re-serve then would register twice, and
            # the kubelet drops the newer endpoint when the older one's stream ends).
            kubelet = file_identity(self._kubelet_path)
            try:
                if kubelet != seen_kubelet:  # a new kubelet: serve and register at once
                    seen_kubelet = kubelet
                    failures = lost = 0
                    next_attempt = 0.0
                    self._serve_retry_at, self._serve_failures = 0.0, 0
                if self._registration_lost():
                    self._metrics.set_registered(self.resource.name, False)
                    log.warning("list_and_watch_lost", resource=self.resource.name)
                    lost += 1
                    next_attempt = time.monotonic() + self._backoff.delay(lost, self._rng)
                if self._ensure_served(kubelet):
                    failures, next_attempt = 0, 0.0
                with self._lock:
                    registered_with = self._registered_with
                if self._served is not None and registered_with is None and kubelet is None:
                    self._waiting("kubelet_unavailable", "missing", error=None)
                if (
                    self._served is not None
                    and registered_with is None
                    and kubelet is not None
                    and time.monotonic() >= next_attempt
                ):
                    if self._register():
                        failures = 0
                    else:
                        failures += 1
                        wait = self._register_backoff.delay(failures, self._rng)
                        next_attempt = time.monotonic() + wait
            except Exception as err:  # noqa: BLE001 - never crash: log, back off, go on
                log.error("plugin_loop_error", resource=self.resource.name, error=repr(err))
                failures += 1
                next_attempt = time.monotonic() + self._backoff.delay(failures, self._rng)
            self._watch.wait(generation, self._timing.tick_s)

    def _stream_ended(self, servicer: DevicePluginServicer, started_at: float) -> None:
        """The kubelet ended a ListAndWatch stream of ``servicer`` that began at
        ``started_at`` (monotonic); called on the stream's thread."""
        with self._lock:
            self._lost = (servicer, started_at)

    def _registration_lost(self) -> bool:
        """True (once) when the kubelet ended the stream of the current registration: the
        kubelet never dials a plugin again by itself, so it must be registered again. A
        stream of a retired socket, or one that began before the current Register call (a
        previous registration's, ending late), says nothing about the current one."""
        with self._lock:
            lost, self._lost = self._lost, None
            if lost is None or self._served is None or self._registered_with is None:
                return False
            servicer, started_at = lost
            if servicer is not self._served.servicer or started_at < self._registered_at:
                return False
            self._registered_with = None
            return not self._stop.is_set()

    def _ensure_served(self, kubelet: FileIdentity | None) -> bool:
        """Serve a fresh socket when there is none, ours vanished, or the kubelet we
        registered with was replaced. True when a new socket is being served."""
        with self._lock:
            served, registered_with = self._served, self._registered_with
        reason: str | None = None
        if served is None:
            reason = "start"
        elif file_identity(served.path) != served.identity:
            reason = "socket_vanished"
            log.warning("plugin_socket_vanished", resource=self.resource.name, socket=served.path)
        elif registered_with is not None and kubelet is not None and kubelet != registered_with:
            reason = "kubelet_restarted"
        if reason is None or (reason == "start" and time.monotonic() < self._serve_retry_at):
            return False
        fresh = self._sockets.serve()
        if fresh is None:  # no directory, cannot bind, no answer: try again later
            self._serve_failures += 1
            wait = self._backoff.delay(self._serve_failures, self._rng)
            self._serve_retry_at = time.monotonic() + wait
        else:
            self._serve_failures = 0
        with self._lock:
            if self._stop.is_set():  # stop() ran meanwhile and owns the old one
                old, fresh = fresh, None
            else:
                old, self._served = self._served, fresh
            self._registered_with = None
        self._metrics.set_registered(self.resource.name, False)
        if old is not None:
            self._sockets.retire(old)
        if fresh is not None:
            log.info(
                "plugin_serving",
                resource=self.resource.name,
                socket=fresh.path,
                reason=reason,
            )
        return fresh is not None

    # -- registering

    def _register(self) -> bool:
        with self._lock:
            served = self._served
        if served is None:
            return False
        name = self.resource.name
        began = time.monotonic()  # the kubelet may open (and end) the stream before we return
        try:
            kubelet = register(
                self._kubelet_path,
                served.endpoint,
                self.resource,
                timeout_s=self._timing.register_timeout_s,
            )
        except KubeletUnavailable as err:
            self._metrics.registration(name, ok=False)
            self._waiting("kubelet_unavailable", err.cause, error=str(err))
            return False
        except RegistrationError as err:
            self._metrics.registration(name, ok=False)
            self._waiting("registration_failed", err.code, error=str(err))
            return False
        with self._lock:
            if self._served is served:
                self._registered_with = kubelet
                self._registered_at = began
        self.registrations += 1
        self._metrics.registration(name, ok=True)
        self._metrics.set_registered(name, True)
        waited = self._wait_report.succeeded()
        extra = {} if waited is None else {"waited_s": waited}
        log.info("plugin_registered", resource=name, endpoint=served.endpoint, **extra)
        return True

    def _waiting(self, event: str, cause: str, *, error: str | None) -> None:
        """Registering failed for ``cause``: log ``event`` when the report is due."""
        waited = self._wait_report.failed(cause)
        if waited is None:
            return
        extra = {} if error is None else {"error": error}
        log.warning(
            event,
            resource=self.resource.name,
            socket=self._kubelet_path,
            cause=cause,
            waited_s=waited,
            **extra,
        )


# ------------------------------------------------------------------------ all of it


class PluginManager:
    """Every resource's plugin and the kubelet watch."""

    def __init__(
        self,
        resources: Iterable[ResourceConfig],
        boards: Mapping[str, Board],
        metrics: PluginMetrics,
        *,
        plugin_dir: str,
        health_check: HealthCheck | None = None,
        timing: Timing = Timing(),
        poll_s: float = 0.1,
    ) -> None:
        self.watch = KubeletWatch(os.path.join(plugin_dir, KUBELET_SOCKET), metrics, poll_s=poll_s)
        self.plugins = {
            r.name: ResourcePlugin(
                r,
                boards[r.name],
                metrics,
                self.watch,
                plugin_dir=plugin_dir,
                health_check=health_check,
                timing=timing,
            )
            for r in resources
        }

    def start(self) -> None:
        self.watch.start()
        for plugin in self.plugins.values():
            plugin.start()

    def alive(self) -> bool:
        """True while every resource's lifecycle thread and the kubelet watch run: a dead
        one would never serve or register its resource again (the plugin's ``/healthz``)."""
        return self.watch.alive() and all(p.alive() for p in self.plugins.values())

    def stop(self) -> None:
        """Stop every plugin (sockets removed) and the watch; returns within seconds."""
        threads = [
            threading.Thread(target=p.stop, name=f"stop-{p.resource.slug}")
            for p in self.plugins.values()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.watch.stop()
