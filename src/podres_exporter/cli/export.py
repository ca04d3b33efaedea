"""``podres export``: the composition root of the exporter daemon."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any

import structlog

from podres_exporter import __version__, collectors, logconf
from podres_exporter.collectors import Collector
from podres_exporter.errors import ConfigError
from podres_exporter.http import Exposition, MetricsServer
from podres_exporter.poller import Backoff, Poller, Source, SourceRunner, Store
from podres_exporter.settings import Settings
from podres_exporter.sources.cputopology import read_topology
from podres_exporter.sources.devices import read_devices
from podres_exporter.sources.gpu import GpuBackend
from podres_exporter.sources.kubelet import KubeletClient
from podres_exporter.sources.procfs import (
    read_container_index,
    read_cpu_times,
    read_pid_cgroups,
)

log = structlog.get_logger(__name__)


def gpu_source(backend: GpuBackend, settings: Settings) -> Source:
    """GPUs from the backend, then the cgroups of their processes and the log-name index."""

    def read() -> dict[str, Any]:
        inventory = backend.read()
        pids = {p.pid for g in inventory.gpus for p in g.processes}
        if not pids:
            return {"gpus": inventory, "pid_cgroups": {}, "containers": None}
        return {
            "gpus": inventory,
            "pid_cgroups": read_pid_cgroups(settings.path_procfs, pids),
            "containers": read_container_index(
                settings.path_container_logs, settings.path_pod_logs
            ),
        }

    return read


def build_sources(
    settings: Settings, enabled: tuple[Collector, ...], gpu_backend: GpuBackend | None
) -> dict[str, Source]:
    """The telemetry sources the enabled collectors need, and only those."""
    names = {c.name for c in enabled}
    sources: dict[str, Source] = {}
    if "gpu" in names and gpu_backend is not None:
        sources["gpu"] = gpu_source(gpu_backend, settings)
    if names & {"pci", "net", "infiniband", "drm"}:
        sysfs = settings.path_sysfs
        sources["sysfs"] = lambda: {"devices": read_devices(sysfs)}
    if "cpu_usage" in names:
        procfs = settings.path_procfs
        sources["cpu"] = lambda: {"cpu_times": read_cpu_times(procfs)}
    return sources


def default_gpu_backend() -> GpuBackend:
    """The NVML backend over the real pynvml; "no data" on a node without NVIDIA driver."""
    from podres_exporter.sources.gpu import open_nvml_backend

    return open_nvml_backend()


# The pieces every reader of the node composes the same way: the exporter, podres top's
# local source and podres snapshot.


def enabled_collectors(settings: Settings) -> tuple[Collector, ...]:
    """The collectors switched on by the settings; ConfigError for an unknown name."""
    try:
        return collectors.select(settings.collectors)
    except KeyError as err:
        raise ConfigError(f"unknown collector {err.args[0]!r}") from err


def gpu_backend_for(
    enabled: tuple[Collector, ...], gpu_backend: GpuBackend | None
) -> GpuBackend | None:
    """``gpu_backend``, else NVML when the gpu collector is on, else none (NVML not opened)."""
    if gpu_backend is None and any(c.name == "gpu" for c in enabled):
        return default_gpu_backend()
    return gpu_backend


def kubelet_client(
    settings: Settings, *, wall_clock: Callable[[], float] = time.time
) -> KubeletClient:
    """The pod-resources client the settings describe."""
    return KubeletClient(
        settings.kubelet_socket,
        max_message_bytes=settings.kubelet_max_message_bytes,
        timeout_s=settings.kubelet_timeout_s,
        wall_clock=wall_clock,
    )


def telemetry_runner(
    settings: Settings,
    enabled: tuple[Collector, ...],
    gpu_backend: GpuBackend | None,
    *,
    wall_clock: Callable[[], float] = time.time,
) -> SourceRunner | None:
    """The telemetry sources the enabled collectors need, run side by side; None if none."""
    sources = build_sources(settings, enabled, gpu_backend)
    if not sources:
        return None
    return SourceRunner(sources, timeout_s=settings.source_timeout_s, wall_clock=wall_clock)


class Exporter:
    """The running exporter: poller thread + HTTP server thread.

    ``gpu_backend``: the GPU telemetry backend (NVML by default; the demo and the
    tests inject one over a fake NVML).
    """

    def __init__(self, settings: Settings, *, gpu_backend: GpuBackend | None = None) -> None:
        enabled = enabled_collectors(settings)
        self.gpu_backend = gpu_backend = gpu_backend_for(enabled, gpu_backend)
        self.settings = settings
        self.store = Store()
        self.client = kubelet_client(settings)
        self.poller = Poller(
            self.client,
            partial(read_topology, settings.path_sysfs),
            self.store,
            interval_s=settings.poll_interval_s,
            backoff=Backoff(settings.backoff_initial_s, settings.backoff_max_s),
            empty_confirm_s=settings.empty_confirm_s,
            telemetry=telemetry_runner(settings, enabled, gpu_backend),
            gpu_resources=settings.gpu_resources,
        )
        self.exposition = Exposition(self.store, enabled, __version__)
        try:
            self.server = MetricsServer(
                settings.listen_address,
                store=self.store,
                exposition=self.exposition,
                version=__version__,
                socket_path=settings.kubelet_socket,
                healthy=self.poller.alive,
            )
        except OSError as err:
            host, port = settings.listen_address
            raise ConfigError(
                f"cannot listen on {host}:{port} (--listen-address): {err.strerror or err}"
            ) from err
        self._http_thread = threading.Thread(
            target=self.server.serve_forever, name="podres-http", daemon=True
        )

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        self.poller.start()
        self._http_thread.start()
        log.info(
            "exporter_started",
            version=__version__,
            url=self.url,
            kubelet_socket=self.settings.kubelet_socket,
            poll_interval_s=self.settings.poll_interval_s,
        )

    def stop(self, reason: str = "requested") -> None:
        """Stop serving and polling; within a few seconds, well inside a pod's grace period."""
        self.server.shutdown()
        self.server.server_close()
        self.poller.stop()
        self.client.close()
        if self.gpu_backend is not None:
            self.gpu_backend.close()
        log.info("exporter_stopped", reason=reason)


def wait_for_signal(stop: threading.Event | None = None) -> str:
    """Block until SIGTERM or SIGINT (or ``stop`` is set); return the reason."""
    event = stop or threading.Event()
    reason = ["stop requested"]

    def handler(signum: int, _frame: FrameType | None) -> None:
        reason[0] = f"signal {signal.Signals(signum).name}"
        event.set()

    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, handler)
    try:
        while not event.wait(0.5):
            pass
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)
    return reason[0]


def run_export(settings: Settings) -> int:
    """Run the exporter until SIGTERM or SIGINT."""
    logconf.configure(
        settings.log_level,
        json=None if settings.log_format == "auto" else settings.log_format == "json",
    )
    exporter = Exporter(settings)
    exporter.start()
    exporter.stop(wait_for_signal())
    return 0
