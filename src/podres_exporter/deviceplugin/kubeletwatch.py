"""The kubelet watch: a wake-up for the plugins' loops when ``kubelet.sock`` changes.

It also counts the kubelet's restarts; it decides nothing (each resource's plugin reads
the socket's identity itself before it serves and registers).
"""

from __future__ import annotations

import threading

import structlog

from podres_exporter.daemon.fileid import file_identity
from podres_exporter.deviceplugin.metrics import PluginMetrics

log = structlog.get_logger(__name__)


class KubeletWatch:
    """A wake-up for the plugins' loops and the kubelet restart counter.

    Polls ``kubelet.sock``'s identity every ``poll_s``. Any change (gone, back, new)
    moves :attr:`generation` on and wakes :meth:`wait`; a socket re-created in
    place of another one counts as a kubelet restart
    (``podres_plugin_kubelet_restarts_total``). It decides nothing: each
    :class:`ResourcePlugin` reads the socket's identity itself before it serves and
    registers, since this copy can lag behind.
    """

    def __init__(self, path: str, metrics: PluginMetrics, *, poll_s: float = 0.1) -> None:
        self.path = path
        self._metrics = metrics
        self._poll_s = poll_s
        self._cond = threading.Condition()
        self._identity = file_identity(path)
        self._last_present = self._identity
        self._generation = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def generation(self) -> int:
        with self._cond:
            return self._generation

    def poll(self) -> None:
        """Look at the socket once (the thread does this every ``poll_s``)."""
        now = file_identity(self.path)
        with self._cond:
            if now == self._identity:
                return
            restarted = now is not None and self._last_present not in (None, now)
            self._identity = now
            if now is not None:
                self._last_present = now
            self._generation += 1
            self._cond.notify_all()
        if restarted:
            self._metrics.kubelet_restart()
            log.info("kubelet_restarted", socket=self.path)
        elif now is None:
            log.info("kubelet_socket_gone", socket=self.path)
        else:
            log.info("kubelet_socket_appeared", socket=self.path)

    def wait(self, generation: int, timeout: float) -> None:
        """Block until the generation moves past ``generation``, or ``timeout``."""
        with self._cond:
            if self._generation == generation and not self._stop.is_set():
                self._cond.wait(timeout)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="podres-kubelet-watch", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        """Whether the polling thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            self.poll()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
