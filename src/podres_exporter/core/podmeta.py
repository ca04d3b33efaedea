"""Whose a pod is: its identity as a source on the node (or the API server) reads it. Pure.

A :class:`PodMeta` is what one route says of one pod incarnation: the kubelet's Pods API
(KEP-4188) says everything below; the pod log directories say only the UID; the opt-in
API-server watch says everything the pod object holds. A :class:`PodDirectory` is one
route's current answer for the node: every pod it knows, keyed by UID (a pod re-created
under the same name is a new UID, so two entries may share a namespace and name).

The sources in ``sources/`` fill these; ``core/`` turns them into the owner, the allowed
labels and the phase the collectors serve.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol


class Route(StrEnum):
    """Where a pod's identity was read."""

    PODS_API = "pods-api"  # the kubelet's v1alpha1.Pods service on its own unix socket
    LOG_DIRS = "log-dirs"  # /var/log/pods/<namespace>_<pod>_<uid>: the UID alone
    APISERVER = "apiserver"  # the opt-in node-scoped watch on the API server


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """One of a pod's ``metadata.ownerReferences``, as the pod carries it."""

    kind: str
    name: str
    controller: bool = False


@dataclass(frozen=True, slots=True)
class ResourceHealth:
    """One entry of a container's ``status.allocatedResourcesStatus`` (KEP-4680).

    ``resource`` is the resource name (``nvidia.com/gpu``, or ``claim:<claim>/<request>``
    for DRA), ``device_id`` the ``resourceID``, ``health`` one of ``Healthy``,
    ``Unhealthy``, ``Unknown`` as the kubelet says it.
    """

    resource: str
    device_id: str
    health: str


def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


def _no_health() -> Mapping[str, tuple[ResourceHealth, ...]]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodMeta:
    """One pod incarnation as a route read it; a field the route does not give is empty."""

    namespace: str
    name: str
    uid: str
    route: Route
    phase: str = ""  # Pending, Running, Succeeded, Failed, Unknown
    qos_class: str = ""  # Guaranteed, Burstable, BestEffort
    owners: tuple[OwnerRef, ...] = ()
    labels: Mapping[str, str] = field(default_factory=_empty)
    # container name -> its allocatedResourcesStatus entries
    resource_health: Mapping[str, tuple[ResourceHealth, ...]] = field(default_factory=_no_health)


@dataclass(frozen=True, slots=True)
class PodDirectory:
    """One route's current answer: every pod it knows on the node, by UID.

    ``synced`` is False while the route has not yet said it holds the whole node (the Pods
    API before ``INITIAL_SYNC_COMPLETE``, a watch before its first list); ``stale`` is True
    when the answer is the last good one kept while the route is down; ``taken_at`` is the
    unix time of the answer.
    """

    route: Route
    pods: Mapping[str, PodMeta] = field(default_factory=lambda: MappingProxyType({}))
    synced: bool = True
    stale: bool = False
    taken_at: float = 0.0


class PodDirectorySource(Protocol):
    """A route's reader, run in the background by the exporter.

    ``start`` begins reading (a thread of its own; it returns at once), ``stop`` ends it
    and waits for it, ``current`` is the latest answer: None while the route is not
    available on this node (the socket absent, the gate off, not configured), else the
    last good :class:`PodDirectory` (``stale`` once the route has failed since).
    """

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def current(self) -> PodDirectory | None: ...
