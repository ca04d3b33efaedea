"""The pod-identity routes the settings give, and their answers merged once per poll.

:func:`build_directory_sources` is the one place that decides which routes run: the
pod log directories always (a UID per pod on every kubelet version), the kubelet's Pods
API where its socket is (detected under the kubelet's root, beside the pod-resources
socket), the API server only when asked for (``--pod-identity.apiserver``:
:mod:`~podres_exporter.sources.apiserver`). :class:`IdentityReader` starts them, asks
each for its current answer at every poll and merges them
(:func:`~podres_exporter.core.podidentity.merge`); the same answers give the very same
:class:`~podres_exporter.core.podidentity.PodIdentity`, so the collectors reuse their
families on a quiet node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import structlog

from podres_exporter.core.accounting import contested
from podres_exporter.core.model import NOTHING_CONTESTED, KubeletReading, PodLiveness
from podres_exporter.core.podidentity import PodIdentity, merge
from podres_exporter.core.podlabels import Allowlist
from podres_exporter.core.podmeta import PodDirectory, PodDirectorySource, Route
from podres_exporter.sources.apiserver import ApiServerPods
from podres_exporter.sources.apiserver_wire import ApiServer
from podres_exporter.sources.logdirs import LogDirSource
from podres_exporter.sources.podsapi import PodsApiSource

log = structlog.get_logger(__name__)

PODS_API_SOCKET = Path("pods-api", "pods-api.sock")
"""Where the kubelet serves its Pods API (KEP-4188), under its root directory."""


def pods_api_socket(kubelet_socket: str) -> Path:
    """The Pods API socket of the kubelet whose pod-resources socket is ``kubelet_socket``:
    ``<root>/pod-resources/kubelet.sock`` -> ``<root>/pods-api/pods-api.sock``, the
    kubelet's layout. A socket in a directory of another name (a kubelet that is not one,
    such as several simulated ones side by side) has a directory of its own beside it:
    ``<dir>/<socket stem>-pods-api/pods-api.sock``. The simulated kubelet serves there."""
    socket = Path(kubelet_socket)
    parent = socket.parent
    if parent.name == "pod-resources":
        return parent.parent / PODS_API_SOCKET
    return parent / f"{socket.stem}-pods-api" / PODS_API_SOCKET.name


class DirectorySettings(Protocol):
    """What the routes are built from: the exporter's settings give these."""

    @property
    def kubelet_socket(self) -> str: ...

    @property
    def path_pod_logs(self) -> str: ...

    @property
    def kubelet_pods_api_socket(self) -> str | None: ...

    @property
    def node_name(self) -> str: ...

    @property
    def pod_identity_apiserver(self) -> ApiServer | None: ...


def pods_api_path(settings: DirectorySettings) -> Path:
    """The Pods API socket: as set, else found beside the pod-resources socket."""
    if settings.kubelet_pods_api_socket:
        return Path(settings.kubelet_pods_api_socket)
    return pods_api_socket(settings.kubelet_socket)


def build_directory_sources(settings: DirectorySettings) -> dict[Route, PodDirectorySource]:
    """Every route's reader for this node (none is started yet)."""
    sources: dict[Route, PodDirectorySource] = {}
    sources[Route.PODS_API] = PodsApiSource(str(pods_api_path(settings)))
    sources[Route.LOG_DIRS] = LogDirSource(settings.path_pod_logs)
    server = settings.pod_identity_apiserver
    if server is not None:  # the opt-in route: --pod-identity.apiserver
        sources[Route.APISERVER] = ApiServerPods(server, settings.node_name)
    return sources


def liveness_of(
    reading: KubeletReading,
    identity: PodIdentity | None,
    read: Callable[[], PodLiveness] | None,
) -> PodLiveness | None:
    """Which listed pods still run: the trees (``read``) are read only when some device
    or CPU is listed by several pods (a kubelet before 1.34 listing a finished pod), never
    on most nodes; the pods' phases, where a route gives them, settle them first."""
    if not contested(reading):
        return NOTHING_CONTESTED if read is not None else None
    phases = identity.phases if identity is not None and identity.phases else None
    if read is None:
        return None if phases is None else PodLiveness(None, None, phases)
    liveness = read()
    return liveness if phases is None else replace(liveness, phases=phases)


class IdentityReader:
    """The routes' readers, started together; :meth:`read` merges their answers."""

    def __init__(self, sources: Mapping[Route, PodDirectorySource], allow: Allowlist) -> None:
        self._sources = dict(sources)
        self._allow = allow
        self._last: tuple[tuple[PodDirectory | None, ...], PodIdentity] | None = None
        self._started = False

    @property
    def routes(self) -> Iterable[Route]:
        """The routes read."""
        return tuple(self._sources)

    def start(self) -> None:
        """Start every route's reader (each returns at once)."""
        if self._started:
            return
        self._started = True
        for route, source in self._sources.items():
            try:
                source.start()
            except Exception as err:  # noqa: BLE001 - one route must not keep the others off
                log.error("pod_identity_route_failed", route=str(route), error=repr(err))

    def read(self) -> PodIdentity:
        """Every route's current answer, merged (the last merge while they are the same)."""
        answers: dict[Route, PodDirectory | None] = {}
        for route, source in self._sources.items():
            try:
                answers[route] = source.current()
            except Exception as err:  # noqa: BLE001 - a route's failure is no answer
                log.error("pod_identity_route_failed", route=str(route), error=repr(err))
                answers[route] = None
        key = tuple(answers.values())
        last = self._last
        if (
            last is not None
            and len(last[0]) == len(key)
            and all(a is b for a, b in zip(last[0], key, strict=True))
        ):
            return last[1]
        identity = merge(answers, self._allow)
        self._last = (key, identity)
        return identity

    def stop(self) -> None:
        """Stop every route's reader and wait for it."""
        for source in self._sources.values():
            try:
                source.stop()
            except Exception as err:  # noqa: BLE001 - stopping the others matters more
                log.error("pod_identity_route_stop_failed", error=repr(err))


__all__ = [
    "PODS_API_SOCKET",
    "DirectorySettings",
    "IdentityReader",
    "build_directory_sources",
    "liveness_of",
    "pods_api_socket",
]
