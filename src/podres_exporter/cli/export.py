"""``podres export``: the composition root of the exporter daemon.

What the web answers to anyone who asks (``/``, ``/healthz``, ``/readyz``) is terse:
no path, no error text from the kubelet; the log has the details.
"""

from __future__ import annotations

from functools import partial

import structlog

from podres_exporter import __version__
from podres_exporter.core.errors import (
    KubeletError,
    KubeletNotServed,
    KubeletRateLimited,
    KubeletResponseTooLarge,
    KubeletTimeout,
    KubeletUnavailable,
)
from podres_exporter.daemon import process
from podres_exporter.daemon.backoff import Backoff
from podres_exporter.daemon.values import format_duration
from podres_exporter.daemon.web import Index, Site, WebServer
from podres_exporter.exporter.exposition import Exposition
from podres_exporter.exporter.poller import Poller, Store, stall_after
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.exporter.settings import Settings
from podres_exporter.sources.gpu import GpuBackend

log = structlog.get_logger(__name__)

# Why the exporter is not ready, by the kubelet error's class: the first match wins.
_NOT_READY: tuple[tuple[type[KubeletError], str], ...] = (
    (KubeletUnavailable, "kubelet unreachable"),
    (KubeletTimeout, "kubelet timed out"),
    (KubeletRateLimited, "kubelet rate-limited"),
    (KubeletResponseTooLarge, "kubelet answer too large"),
    (KubeletNotServed, "kubelet does not serve the pod-resources API"),
    (KubeletError, "kubelet answered an error"),
)


def not_ready_cause(err: KubeletError | None) -> str:
    """The cause category ``/readyz`` names for ``err`` (its class, never its text)."""
    if err is None:
        return "no kubelet reading yet"
    return next(cause for kind, cause in _NOT_READY if isinstance(err, kind))


class Exporter:
    """The running exporter: poller thread + HTTP server thread.

    ``gpu_backend``: the GPU telemetry backend (NVML by default; the demo and the
    tests inject one over a fake NVML). ``stall_after_s``: how long without a finished
    poll fails ``/healthz`` (by default :func:`~podres_exporter.exporter.poller.stall_after`).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        gpu_backend: GpuBackend | None = None,
        stall_after_s: float | None = None,
    ) -> None:
        self.settings = settings
        # What SIGHUP re-reads (process.stop_on_signals runs them): e.g. the web config.
        self.reloads: list[process.Reload] = []
        self.web_config = process.web_config(settings.web_config_file)  # ConfigError: exit 2
        if self.web_config is not None:
            self.reloads.append(self.web_config.reload)
        self.store = Store()
        # Bound first: a port that cannot be had is said before anything is opened or
        # logged (NVML, the sources). It serves only once started.
        self.server = self._listen()
        try:
            self.reader = NodeReader.from_settings(settings, gpu_backend=gpu_backend)
        except BaseException:
            self.server.stop()
            raise
        self.poller = Poller(
            self.reader,
            self.store,
            interval_s=settings.poll_interval_s,
            backoff=Backoff(settings.backoff_initial_s, settings.backoff_max_s),
            empty_confirm_s=settings.empty_confirm_s,
            stall_after_s=stall_after(settings) if stall_after_s is None else stall_after_s,
        )
        self.exposition = Exposition(
            self.store,
            partial(
                self.reader.families,
                version=__version__,
                node=settings.node_name,
                build=settings.build,
            ),
        )

    def _listen(self) -> WebServer:
        settings = self.settings
        return process.listen(
            settings.listen_address,
            Site(
                metrics=self._metrics,
                metrics_ready=self._metrics_ready,
                health=self._health,
                readiness=self._readiness,
                index=Index(
                    title="podres-exporter",
                    version=__version__,
                    summary="Which container holds which CPUs, devices and memory on this node.",
                    healthz="the poller and the web server run",
                    readyz="a first kubelet reading was taken",
                    facts=(("poll interval", format_duration(settings.poll_interval_s)),),
                ),
            ),
            web_config=self.web_config,
        )

    # The exposition is made after the server is bound: these ask it once it serves.
    def _metrics(self, *, openmetrics: bool, gz: bool) -> bytes:
        return self.exposition.body(openmetrics=openmetrics, gz=gz)

    def _metrics_ready(self, *, openmetrics: bool, gz: bool) -> bytes | tuple[bytes, bytes] | None:
        return self.exposition.ready_body(openmetrics=openmetrics, gz=gz)

    def _health(self) -> tuple[bool, str]:
        ok, text = self.poller.health()
        if ok and not self.server.alive():
            return False, "web server stopped"
        return ok, text

    def _readiness(self) -> tuple[bool, str]:
        view = self.store.current()
        if view is not None and view.snapshot.ready:
            return True, "ready"
        return False, f"not ready: {not_ready_cause(self.poller.kubelet_error)}"

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        self.poller.start()
        if self.web_config is not None:
            self.web_config.start()
        self.server.start("podres-http")
        log.info(
            "exporter_started",
            version=__version__,
            url=self.url,
            kubelet_socket=self.settings.kubelet_socket,
            poll_interval_s=self.settings.poll_interval_s,
        )

    def stop(self, reason: str = "requested") -> None:
        """Stop serving and polling; within a few seconds, well inside a pod's grace period."""
        self.server.stop()
        if self.web_config is not None:
            self.web_config.stop()
        # Closing the reader cancels a kubelet call in flight: the loop ends at once.
        self.poller.stop(interrupt=self.reader.close)
        log.info("exporter_stopped", reason=reason)


def run_export(settings: Settings) -> int:
    """Run the exporter until SIGTERM or SIGINT; SIGHUP runs its reload callbacks (and is
    ignored before and after: ``podres export`` ignores it first thing)."""
    process.configure_logging(settings.log_level, settings.log_format)
    process.raise_open_files_limit()  # before the reader sizes what it keeps open
    exporter = Exporter(settings)
    process.tune_gc()
    process.tune_switch_interval()
    # The stop inside too: a second SIGTERM or Ctrl-C while it stops is noted, not a
    # KeyboardInterrupt through the stop.
    with process.stop_on_signals(reload=exporter.reloads, last=True) as stop:
        exporter.start()
        reason = stop.wait()
        exporter.stop(reason)
    return 0
