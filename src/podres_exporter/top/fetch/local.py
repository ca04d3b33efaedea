"""The local source of ``podres top``: the kubelet socket and telemetry, read in-process.

The exporter's own :class:`~podres_exporter.exporter.reader.NodeReader` reads them and
the exporter's collectors render them. No exporter needed.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from podres_exporter.core.errors import KubeletUnavailable
from podres_exporter.top.fetch.source import fetch_error
from podres_exporter.top.rows import BUSY_COUNTER, BUSY_RATIO, AnySample, Reading, Sample

if TYPE_CHECKING:
    from podres_exporter.core.view import NodeView
    from podres_exporter.exporter.settings import Settings
    from podres_exporter.sources.gpu import GpuBackend

# Collectors whose metrics top does not show: the local source leaves them off.
UNSHOWN_COLLECTORS = frozenset({"build", "pci", "net", "infiniband"})
# How long connecting to the kubelet socket may take before the call is left to say more.
PROBE_TIMEOUT_S = 1.0


TOP_SOCKET_HINT = (
    "pass --kubelet-socket PATH (or PODRES_KUBELET_SOCKET), or read an exporter with --exporter URL"
)


def check_socket(path: str, hint: str = TOP_SOCKET_HINT) -> None:
    """Fail early with exit status 2 and ``hint`` (what to pass instead), naming
    ``--kubelet-socket``, when the socket is missing, not ours to use, or nothing listens on
    it (connecting is refused: a file left by a kubelet that stopped). A listener slow to
    accept is left to the kubelet call and its deadline."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise fetch_error(
            f"kubelet socket {path} does not exist (not a Kubernetes node, or the kubelet's "
            f"pod-resources socket is elsewhere): {hint}",
            exit_code=2,
        ) from None
    except PermissionError:
        raise fetch_error(
            f"permission denied reaching kubelet socket {path} (it is root-only: run as root): "
            f"{hint}",
            exit_code=2,
        ) from None
    if not stat.S_ISSOCK(st.st_mode):
        raise fetch_error(f"{path} is not a unix socket: {hint}", exit_code=2)
    if not os.access(path, os.R_OK | os.W_OK):
        raise fetch_error(
            f"permission denied on kubelet socket {path} (it is root-only: run as root): {hint}",
            exit_code=2,
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(PROBE_TIMEOUT_S)
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            raise fetch_error(
                f"kubelet socket {path} refuses connections (nothing listens on it: the "
                f"kubelet is not running, or the file is left from an earlier one): {hint}",
                exit_code=2,
            ) from None
        except OSError:  # a full backlog, a path too long to connect by: the call says
            return


class LocalSource:
    """The local kubelet and telemetry, read by the exporter's own NodeReader in-process.

    ``gpu_backend``: NVML by default ("no data" on a node without NVIDIA driver).
    ``wall_clock`` stamps the readings (the kubelet's, the telemetry's and top's own).
    A failed kubelet read after the first one keeps the last reading with
    ``podres_kubelet_up 0``, as the exporter does; the first must succeed.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        node_name: str,
        gpu_backend: GpuBackend | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        # Deferred: the exporter's machinery (gRPC, the collectors) is for this source only.
        from podres_exporter.exporter.reader import NodeReader, enabled_collectors

        self.settings = settings
        self.description = f"kubelet {settings.kubelet_socket}"
        self.origin = node_name
        check_socket(settings.kubelet_socket)
        # Only the collectors behind the metrics top shows: their sources are all it reads.
        chosen = [c for c in enabled_collectors(settings) if c.name not in UNSHOWN_COLLECTORS]
        self._reader = NodeReader.from_settings(
            settings, gpu_backend=gpu_backend, enabled=chosen, wall_clock=wall_clock
        )
        self._view: NodeView | None = None
        self._generation = 0

    def read(self) -> Reading:
        from podres_exporter import __version__
        from podres_exporter.collectors.kubelet import snapshot_age

        previous = self._view
        seen = self._reader.observe()
        if previous is None:  # the first reading must succeed; later ones keep the last good
            if seen.topology is None:
                raise fetch_error(f"{seen.topology_error} (--path.sysfs)", exit_code=2)
            if seen.reading is None:
                error = seen.kubelet_error
                code = 2 if isinstance(error, KubeletUnavailable) else 1
                raise fetch_error(
                    f"cannot read the kubelet at {self.settings.kubelet_socket} "
                    f"(--kubelet-socket): {error}",
                    exit_code=code,
                )
        self._generation += 1
        view = self._reader.view(seen, generation=self._generation, previous=previous)
        self._view = view
        families = [*self._reader.families(view, __version__), snapshot_age(view, seen.taken_at)]
        # The collectors' samples as they are: copying a large node's costs a second.
        samples = tuple(s for fam in families for s in fam.samples)
        return Reading(samples, seen.taken_at, self.origin)

    def read_with_busy(
        self,
        sample_s: float,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Reading:
        """A reading with each exclusive CPU's busy share over ``sample_s`` (:data:`BUSY_RATIO`).

        Per-CPU time is read from procfs before and ``sample_s`` after the reading starts
        (the kubelet read happens in between): one reading, not two, for ``--once``.
        Without procfs the reading has no busy shares.
        """
        from podres_exporter.core.errors import SourceError
        from podres_exporter.sources.procfs import read_cpu_times

        procfs = self.settings.path_procfs
        try:
            before, started = read_cpu_times(procfs), clock()
        except SourceError:
            return self.read()
        reading = self.read()
        sleep(max(0.0, sample_s - (clock() - started)))
        try:
            after, elapsed = read_cpu_times(procfs), clock() - started
        except SourceError:
            return reading
        ratios: list[AnySample] = []
        for s in reading.samples:
            if s.name != BUSY_COUNTER:
                continue
            try:
                cpu = int(s.labels.get("cpu", ""))
            except ValueError:
                continue
            if cpu not in before.busy or cpu not in after.busy:
                continue
            span = after.total[cpu] - before.total[cpu]
            span = span if span > 0 else elapsed  # a procfs whose clock stands still
            rise = after.busy[cpu] - before.busy[cpu]
            ratios.append(Sample(BUSY_RATIO, s.labels, min(1.0, max(0.0, rise / span))))
        return Reading((*reading.samples, *ratios), reading.at, reading.origin)

    def close(self) -> None:
        self._reader.close()
