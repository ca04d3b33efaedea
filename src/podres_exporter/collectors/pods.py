"""Whose each pod is: its identity, chosen labels and device health, and how each route fares.

``podres_pod_info`` (one series per pod: UID, phase, QoS class, workload and
controlling owner), ``podres_pod_labels_info`` (one series per pod with the labels
``--pod-labels`` allows, as ``label_<key>``), ``podres_container_device_health_info``
(a held device the kubelet does not call Healthy, per container, KEP-4680), and per route
``podres_pod_identity_source_*``. Identity is served on these series alone, never
stamped on every series: the join ``* on (namespace, pod) group_left (owner_kind,
owner_name) podres_pod_info`` brings it onto any series of ours (docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, RenderContext
from podres_exporter.collectors.families import (
    HOLDER_LABELS,
    RowFamily,
    Table,
    holder_values,
    info,
    labelled,
    per_row,
)
from podres_exporter.core.identity import LABELS as DEVICE_LABELS
from podres_exporter.core.identity import DeviceIdentity, of_resolved
from podres_exporter.core.ids import resolve
from podres_exporter.core.join import Resolution
from podres_exporter.core.model import KubeletReading
from podres_exporter.core.podidentity import HealthRow, PodIdentity, PodRow, RouteState
from podres_exporter.core.podmeta import Route

POD_LABELS = ("namespace", "pod", "uid")
INFO_LABELS = (
    *POD_LABELS,
    "phase",
    "qos_class",
    "owner_kind",
    "owner_name",
    "controller_kind",
    "controller_name",
)


@dataclass(frozen=True, slots=True, eq=False)
class _Part:
    """What the collector reads: the pods' identity, and the join's resolutions (the
    identity of each held device id; empty before the first telemetry read)."""

    identity: PodIdentity
    resolutions: tuple[Resolution, ...]


class _Last:
    """The last part handed out: the same identity and resolutions give the very same
    part, so the registry reuses the families."""

    part: _Part | None = None


def _listed_only(identity: PodIdentity, reading: KubeletReading | None) -> PodIdentity:
    """``identity`` without the pods only a log directory names that the kubelet does not
    list: the kubelet removes a pod's log directory a while after the pod is gone (its
    container GC, about a minute), and such a directory is a departed pod's. A richer
    route's pods are the kubelet's own and stay."""
    if reading is None or all(r.route is not Route.LOG_DIRS for r in identity.pods):
        return identity
    listed = {(p.namespace, p.name) for p in reading.pods}
    pods = tuple(
        r for r in identity.pods if r.route is not Route.LOG_DIRS or (r.namespace, r.pod) in listed
    )
    return identity if len(pods) == len(identity.pods) else replace(identity, pods=pods)


def _part(ctx: RenderContext) -> _Part | None:
    identity = ctx.view.snapshot.identity
    if identity is None:
        return None
    identity = _listed_only(identity, ctx.view.snapshot.reading)
    joined = ctx.view.joined
    resolutions = joined.resolutions if joined is not None else ()
    last = _Last.part
    if last is not None and last.identity == identity and last.resolutions is resolutions:
        return last
    _Last.part = _Part(identity, resolutions)
    return _Last.part


def _sparse(fam: Metric, first: int) -> Metric:
    """``fam`` with its labels from position ``first`` on left out where empty."""
    assert isinstance(fam, RowFamily)
    fam.sparse = tuple(sorted({*fam.sparse, *range(first, len(fam.labels))}))
    return fam


def _info_values(r: PodRow) -> list[str]:
    o = r.owner
    owner = [o.kind, o.name, o.controller_kind, o.controller_name] if o else ["", "", "", ""]
    return [r.namespace, r.pod, r.uid, r.phase, r.qos_class, *owner]


def _label_values(names: Sequence[str]) -> Callable[[PodRow], list[str]]:
    at = {n: i for i, n in enumerate(names)}

    def values(r: PodRow) -> list[str]:
        out = [r.namespace, r.pod, r.uid, *([""] * len(names))]
        for n, v in r.labels:
            i = at.get(n)
            if i is not None:
                out[3 + i] = v
        return out

    return values


_ROUTES: Final[Table[RouteState]] = Table(
    ("route",),
    lambda s: [str(s.route)],
    (
        per_row(
            "podres_pod_identity_source_up",
            "1 when the route answers now (its socket or directory there, its last read good).",
            lambda s: s.available and not s.stale,
        ),
        per_row(
            "podres_pod_identity_source_synced",
            "1 when the route's answer holds the whole node (the Pods API after its initial "
            "sync, a watch after its first list).",
            lambda s: s.available and s.synced,
        ),
        per_row(
            "podres_pod_identity_source_stale",
            "1 when the route's answer served is the last good one, kept while it is down.",
            lambda s: s.stale,
        ),
        per_row(
            "podres_pod_identity_source_pods",
            "Pods the route's served answer knows, every incarnation (UID) once.",
            lambda s: s.pods if s.available else None,
        ),
        per_row(
            "podres_pod_identity_source_last_success_timestamp_seconds",
            "Unix time of the route's served answer.",
            lambda s: s.taken_at if s.available and s.taken_at else None,
        ),
    ),
)


# The kubelet's word for a healthy device (KEP-4680's ResourceHealthStatus).
HEALTHY = "Healthy"


def _health_identity(part: _Part) -> dict[tuple[str, str], DeviceIdentity]:
    return {(r.resource, r.device_id): r.identity for r in part.resolutions}


def _health_values(
    known: dict[tuple[str, str], DeviceIdentity],
) -> Callable[[HealthRow], list[str]]:
    def values(h: HealthRow) -> list[str]:
        ident = known.get((h.resource, h.device_id))
        if ident is None:
            ident = known[(h.resource, h.device_id)] = of_resolved(resolve(h.resource, h.device_id))
        return [*holder_values(h.holder), h.resource, h.device_id, *ident.values(), h.health]

    return values


def _families(part: _Part) -> Iterator[Metric]:
    identity = part.identity
    yield _sparse(
        info(
            "podres_pod",
            "One series per pod: its current UID, phase, QoS class, workload (owner_kind, "
            "owner_name: a ReplicaSet resolved to its Deployment where the pod proves it) and "
            "controlling owner as the pod lists it.",
            INFO_LABELS,
            identity.pods,
            _info_values,
        ),
        3,
    )
    if identity.labels_allowed:
        names = identity.label_names
        yield _sparse(
            info(
                "podres_pod_labels",
                "One series per pod with the pod labels --pod-labels allows, as label_<key>.",
                [*POD_LABELS, *names],
                identity.pods,
                _label_values(names),
            ),
            3,
        )
        yield labelled(
            "podres_pod_labels_dropped",
            "Allowed pod labels left out by the bounds (64 a pod, 256 names a node, keys "
            "longer than Kubernetes allows).",
            [],
            [((), identity.labels_dropped)],
        )
    if identity.health:
        # Only the devices the kubelet does not call Healthy: a series for every healthy held
        # device would repeat podres_container_device_info (at 5,000 pods of 10 devices,
        # 50,000 series, some 80 % of the pods collector's text, 14.5 MiB a format).
        yield info(
            "podres_container_device_health",
            "One series per device a container holds that the kubelet does not call Healthy "
            "(Unhealthy, Unknown; KEP-4680), with the device's identity.",
            [*HOLDER_LABELS, "resource", "device_id", *DEVICE_LABELS, "health"],
            [h for h in identity.health if h.health != HEALTHY],
            _health_values(_health_identity(part)),
        )
    yield from _ROUTES.render(identity.routes)


COLLECTOR: Final = PartCollector(
    "pods",
    "whose each pod is (UID, phase, owner, allowed labels), its devices' health, and the "
    "pod-identity routes",
    _part,
    _families,
)
