"""``podres export``: the composition root of the exporter daemon."""

from __future__ import annotations

from functools import partial

import structlog

from podres_exporter import __version__, process
from podres_exporter.backoff import Backoff
from podres_exporter.exposition import Exposition
from podres_exporter.poller import Poller, Store
from podres_exporter.reader import NodeReader
from podres_exporter.settings import Settings
from podres_exporter.sources.gpu import GpuBackend
from podres_exporter.web import Index, Site, WebServer

log = structlog.get_logger(__name__)


class Exporter:
    """The running exporter: poller thread + HTTP server thread.

    ``gpu_backend``: the GPU telemetry backend (NVML by default; the demo and the
    tests inject one over a fake NVML).
    """

    def __init__(self, settings: Settings, *, gpu_backend: GpuBackend | None = None) -> None:
        self.settings = settings
        self.store = Store()
        self.reader = NodeReader.from_settings(settings, gpu_backend=gpu_backend)
        self.poller = Poller(
            self.reader,
            self.store,
            interval_s=settings.poll_interval_s,
            backoff=Backoff(settings.backoff_initial_s, settings.backoff_max_s),
            empty_confirm_s=settings.empty_confirm_s,
        )
        self.exposition = Exposition(self.store, partial(self.reader.families, version=__version__))
        try:
            self.server = self._listen()
        except BaseException:
            self.reader.close()  # the kubelet channel, NVML: opened above
            raise

    def _listen(self) -> WebServer:
        settings = self.settings
        return process.listen(
            settings.listen_address,
            Site(
                metrics=self.exposition.body,
                health=self._health,
                readiness=self._readiness,
                index=Index(
                    title="podres-exporter",
                    version=__version__,
                    summary="Which container holds which CPUs, devices and memory on this node.",
                    healthz="the process is alive",
                    readyz="a first kubelet reading was taken",
                    facts=(("kubelet socket", settings.kubelet_socket),),
                ),
            ),
        )

    def _health(self) -> tuple[bool, str]:
        alive = self.poller.alive()
        return alive, "ok" if alive else "poller stopped"

    def _readiness(self) -> tuple[bool, str]:
        view = self.store.current()
        if view is not None and view.snapshot.ready:
            return True, "ready"
        why = (view.snapshot.kubelet_error if view else None) or "no kubelet reading yet"
        return False, f"not ready: {why}"

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        self.poller.start()
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
        self.poller.stop()
        self.reader.close()
        log.info("exporter_stopped", reason=reason)


def run_export(settings: Settings) -> int:
    """Run the exporter until SIGTERM or SIGINT."""
    process.configure_logging(settings.log_level, settings.log_format)
    exporter = Exporter(settings)
    with process.stop_on_signals() as stop:
        exporter.start()
        reason = stop.wait()
    exporter.stop(reason)
    return 0
