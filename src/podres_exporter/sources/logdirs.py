"""The pod log directories as a pod-identity route: a UID per pod on every kubelet version.

The kubelet makes ``/var/log/pods/<namespace>_<pod>_<uid>/`` when a pod starts and
removes it when the pod is deleted (``--path.pod-logs``), so the names alone give each
pod's UID, with no API and no rights beyond reading the directory. Nothing else about
the pod (phase, owner, labels) is there.

The directory is listed when :meth:`LogDirSource.current` is asked (one ``listdir`` per
poll; a few milliseconds at 5,000 pods); the same names give the very same answer, so
what was derived from it is reused.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

import structlog

from podres_exporter.core.podmeta import PodDirectory, PodMeta, Route
from podres_exporter.sources.liveness import parse_pod_log_dirs

log = structlog.get_logger(__name__)


class LogDirSource:
    """A :class:`~podres_exporter.core.podmeta.PodDirectorySource` over ``/var/log/pods``.

    ``current`` is None while the directory has never been read (absent: the route is not
    there); once read, a failed listing serves the last answer marked stale, logged once.
    """

    def __init__(self, path: str | Path, *, wall_clock: Callable[[], float] = time.time) -> None:
        self._path = Path(path)
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._names: frozenset[str] | None = None
        self._last: PodDirectory | None = None
        self._failed = False

    def start(self) -> None:
        """Nothing runs in the background: the directory is listed when asked."""

    def stop(self) -> None:
        """Nothing to stop."""

    def current(self) -> PodDirectory | None:
        """The UIDs the directory names now (the same object while the names are)."""
        with self._lock:
            try:
                names = frozenset(os.listdir(self._path))
            except OSError as err:
                if self._last is None:
                    return None
                if not self._failed:
                    log.warning("pod_log_dirs_failed", path=str(self._path), error=str(err))
                    self._failed = True
                    self._last = _with(self._last, stale=True)
                return self._last
            if self._failed:
                log.info("pod_log_dirs_ok", path=str(self._path))
                self._failed = False
            if self._last is not None and names == self._names and not self._last.stale:
                return self._last
            self._names = names
            self._last = directory_of(names, self._wall())
            return self._last


def directory_of(names: frozenset[str], taken_at: float) -> PodDirectory:
    """The pods that log directory names give, by UID."""
    pods = {
        uid: PodMeta(namespace, pod, uid, Route.LOG_DIRS)
        for (namespace, pod), uids in parse_pod_log_dirs(names).items()
        for uid in uids
    }
    return PodDirectory(Route.LOG_DIRS, MappingProxyType(pods), taken_at=taken_at)


def _with(d: PodDirectory, *, stale: bool) -> PodDirectory:
    return PodDirectory(d.route, d.pods, d.synced, stale, d.taken_at)


__all__ = ["LogDirSource", "directory_of"]
