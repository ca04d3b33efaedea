"""Every route's pods merged into one answer per pod: what the collectors serve. Pure.

Routes rank by what they say: the kubelet's Pods API and the API server give the whole
pod (UID, phase, QoS class, owners, labels, device health), the log directories
(``/var/log/pods/<namespace>_<pod>_<uid>``) the UID alone, on every kubelet version.
For each UID the richest route that knows it wins for everything. While a richer route
holds the whole node (synced, not stale) it is the node's list of pods: a log directory
it does not know is a deleted pod's, not yet removed, and is not served. Otherwise (no
richer route, or one still syncing or down) a pod only the log directories know is
served with its UID and nothing else.

One series per pod name: a pod re-created under the same name is a new UID, and while
the node still knows the old incarnation (a pod force-deleted, an old log directory not
yet removed) both UIDs are known. The **current** one is served: the one of the richest
route (a UID only the log directories still name, where a richer route knows the pod,
is a deleted incarnation's), then one that has not finished (phase neither
``Succeeded`` nor ``Failed``), then the greater UID (the log directories alone cannot
tell which is newer). So a join
``on (namespace, pod)`` never meets two series of one pod, and the ``uid`` label says
which incarnation it is; the old UID's series goes as the new one comes.

The phases of every incarnation are kept per pod name to settle a device or CPU that
several pods list (``accounting.pod_state``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podres_exporter.core.model import Holder
from podres_exporter.core.owners import Owner, owner_of
from podres_exporter.core.podlabels import MAX_LABEL_NAMES, NOTHING, Allowlist, choose
from podres_exporter.core.podmeta import PodDirectory, PodMeta, Route
from podres_exporter.core.printable import cut

# The routes from the richest: the first that knows a UID wins.
RANK = (Route.PODS_API, Route.APISERVER, Route.LOG_DIRS)
FINISHED = frozenset({"Succeeded", "Failed"})
MAX_TEXT = 256  # a UID, phase or owner name from a peer: far beyond what Kubernetes allows
_Pair = tuple[str, str]
_Labels = tuple[_Pair, ...]


@dataclass(frozen=True, slots=True)
class PodRow:
    """One pod as served: its current incarnation, with its workload and chosen labels."""

    namespace: str
    pod: str
    uid: str
    route: Route
    phase: str = ""
    qos_class: str = ""
    owner: Owner | None = None
    labels: tuple[tuple[str, str], ...] = ()  # (label name, value), sorted by name


@dataclass(frozen=True, slots=True)
class HealthRow:
    """One device of a container with the health the kubelet gives it (KEP-4680)."""

    holder: Holder
    resource: str
    device_id: str
    health: str


@dataclass(frozen=True, slots=True)
class RouteState:
    """How one route fares: whether it answered and is whole, and how many pods it knows."""

    route: Route
    available: bool  # False: the route is not served on this node (or not configured)
    synced: bool = False
    stale: bool = False
    taken_at: float = 0.0
    pods: int = 0


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """Every pod's identity on the node, merged over the routes, sorted by (namespace, pod).

    ``labels_allowed``: whether ``--pod-labels`` allows any label (else no
    ``podres_pod_labels_info`` at all); ``label_names``: the served label names of every
    pod, sorted (its columns); ``labels_dropped``: allowed labels left out by the bounds;
    ``phases``: every incarnation's phase per (namespace, pod), where a route gives one.
    """

    pods: tuple[PodRow, ...] = ()
    labels_allowed: bool = False
    label_names: tuple[str, ...] = ()
    labels_dropped: int = 0
    health: tuple[HealthRow, ...] = ()
    routes: tuple[RouteState, ...] = ()
    phases: Mapping[tuple[str, str], frozenset[str]] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def owner(self, namespace: str, pod: str) -> Owner | None:
        """The workload of a pod by name (None: no controller, or the pod not known)."""
        return self.by_name().get((namespace, pod))

    def by_name(self) -> Mapping[tuple[str, str], Owner | None]:
        """Each known pod's workload by (namespace, pod)."""
        return {(r.namespace, r.pod): r.owner for r in self.pods}


NOBODY = PodIdentity()


def _current(metas: list[PodMeta]) -> PodMeta:
    """The incarnation served for a pod name (see the module's docstring)."""
    return min(
        metas,
        key=lambda m: (RANK.index(m.route), m.phase in FINISHED, _neg(m.uid)),
    )


def _neg(text: str) -> tuple[int, ...]:
    """A key that sorts strings in reverse (the greater UID first)."""
    return tuple(-ord(c) for c in text)


def _shared(labels: _Labels, pairs: dict[_Pair, _Pair]) -> _Labels:
    """``labels`` made of the ``(name, value)`` pairs that another pod of this merge
    already has: at 5,000 pods of the same few label values the merged identity holds
    each pair once (2.1 of its 9.0 MiB at ``bench/podsapi_memory.py``'s 5,000 pods)."""
    return tuple([pairs.setdefault(p, p) for p in labels])


def _row(meta: PodMeta, allow: Allowlist, pairs: dict[_Pair, _Pair]) -> tuple[PodRow, int]:
    chosen = choose(meta.labels, allow)
    owner = owner_of(meta)
    if owner is not None:
        owner = Owner(*(cut(t, MAX_TEXT) for t in (
            owner.kind, owner.name, owner.controller_kind, owner.controller_name
        )))  # fmt: skip
    row = PodRow(
        meta.namespace,
        meta.name,
        cut(meta.uid, MAX_TEXT),
        meta.route,
        cut(meta.phase, MAX_TEXT),
        cut(meta.qos_class, MAX_TEXT),
        owner,
        _shared(chosen.labels, pairs),
    )
    return row, chosen.dropped


def _health(meta: PodMeta) -> Iterable[HealthRow]:
    for container, entries in sorted(meta.resource_health.items()):
        holder = Holder(meta.namespace, meta.name, container)
        for e in entries:
            yield HealthRow(holder, e.resource, e.device_id, cut(e.health, MAX_TEXT))


def _state(route: Route, d: PodDirectory | None) -> RouteState:
    if d is None:
        return RouteState(route, available=False)
    return RouteState(route, True, d.synced, d.stale, d.taken_at, len(d.pods))


def merge(
    directories: Mapping[Route, PodDirectory | None], allow: Allowlist = NOTHING
) -> PodIdentity:
    """The node's pods from every route's current answer (None: the route not there)."""
    by_uid: dict[str, PodMeta] = {}
    whole = any(
        d is not None and d.synced and not d.stale
        for r, d in directories.items()
        if r is not Route.LOG_DIRS
    )
    for route in RANK:
        d = directories.get(route)
        if d is None or (whole and route is Route.LOG_DIRS):
            continue
        for uid, meta in d.pods.items():
            by_uid.setdefault(uid, meta)
    by_name: dict[tuple[str, str], list[PodMeta]] = {}
    for meta in by_uid.values():
        by_name.setdefault((meta.namespace, meta.name), []).append(meta)
    rows: list[PodRow] = []
    health: list[HealthRow] = []
    dropped = 0
    pairs: dict[_Pair, _Pair] = {}
    for key in sorted(by_name):
        meta = _current(by_name[key])
        row, lost = _row(meta, allow, pairs)
        rows.append(row)
        dropped += lost
        health.extend(_health(meta))
    names = sorted({n for r in rows for n, _ in r.labels})
    if len(names) > MAX_LABEL_NAMES:
        kept = frozenset(names[:MAX_LABEL_NAMES])
        dropped += sum(1 for r in rows for n, _ in r.labels if n not in kept)
        rows = [_keep(r, kept) for r in rows]
        names = names[:MAX_LABEL_NAMES]
    phases = {key: frozenset(m.phase for m in metas if m.phase) for key, metas in by_name.items()}
    return PodIdentity(
        pods=tuple(rows),
        labels_allowed=not allow.empty,
        label_names=tuple(names),
        labels_dropped=dropped,
        health=tuple(health),
        routes=tuple(_state(r, directories.get(r)) for r in RANK if r in directories),
        phases=MappingProxyType({k: v for k, v in phases.items() if v}),
    )


def _keep(row: PodRow, names: frozenset[str]) -> PodRow:
    labels = tuple((n, v) for n, v in row.labels if n in names)
    if len(labels) == len(row.labels):
        return row
    return PodRow(
        row.namespace, row.pod, row.uid, row.route, row.phase, row.qos_class, row.owner, labels
    )


__all__ = [
    "FINISHED",
    "NOBODY",
    "RANK",
    "HealthRow",
    "PodIdentity",
    "PodRow",
    "RouteState",
    "merge",
]
