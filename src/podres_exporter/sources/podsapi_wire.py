"""A pod from the kubelet's Pods API, made into our :class:`~podres_exporter.core.podmeta.PodMeta`.

The Pods API sends each pod as the bytes of a ``v1.Pod``; we parse them with the minimal
proto of the fields we read (``proto/k8s/api/core/v1/pod.proto``: what else the pod holds,
its spec and environment included, is skipped unread) and keep, within
:class:`PodsApiLimits`, what a pod's identity needs: namespace, name, UID, phase, QoS
class, owner references, labels and each container's ``allocatedResourcesStatus``.

A pod comes from the API server through the kubelet, so it was validated there; we still
take none of it on trust. Every string is escaped (``core.printable``) and cut to the
length Kubernetes allows for its kind; every repeated field is taken up to
its limit (sorted first where the wire order is arbitrary, so the same pod keeps the same
part); what is left out is counted per kind for the caller to log. Bytes that are no pod
raise :class:`PodDecodeError`.

Memory: a pod keeps no protobuf object and none of its bytes, only the
:class:`~podres_exporter.core.podmeta.PodMeta` built from them. The strings that repeat
from pod to pod (namespaces, label keys and values, owner kinds and names, phases, QoS
classes, container and resource names, healths) are interned, so 5,000 pods of the same
few keys hold each once (``bench/podsapi_memory.py`` measures it; CPython frees an
interned string with its last user, so a hostile pod's strings go with it).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

from google.protobuf.message import DecodeError

from podres_exporter._generated.k8s.api.core.v1 import pod_pb2
from podres_exporter.core.limits import DEFAULT_LIMITS
from podres_exporter.core.podmeta import OwnerRef, PodMeta, ResourceHealth, Route
from podres_exporter.core.printable import cut, printable

__all__ = [
    "LABELS_OVER_LIMIT",
    "NOT_UTF8",
    "OWNERS_OVER_LIMIT",
    "STATUSES_OVER_LIMIT",
    "TEXT_CUT",
    "PodDecodeError",
    "PodsApiLimits",
    "deleted_uid",
    "pod_meta",
]

_T = TypeVar("_T")

# What a decoded pod left out, per kind (the caller counts and logs them).
LABELS_OVER_LIMIT = "labels_over_limit"
OWNERS_OVER_LIMIT = "owners_over_limit"
STATUSES_OVER_LIMIT = "statuses_over_limit"
TEXT_CUT = "text_cut"
NOT_UTF8 = "not_utf8"


class PodDecodeError(ValueError):
    """Bytes that are no ``v1.Pod``, or a pod without a UID."""


@dataclass(frozen=True, slots=True)
class PodsApiLimits:
    """How much of the Pods API the exporter keeps. Counts, except where said.

    ``message_bytes``: the largest gRPC message received (one watch event, one pod): the
    API server stores no object over ~1.5 MiB, so 4 MiB holds any real pod.
    ``pods``: pods held at once (as the pod-resources answer's limit).
    ``labels``: labels of one pod (the first by key); real pods have a few dozen.
    ``owners``: owner references of one pod.
    ``containers``: container statuses of one pod (init containers included), and
    ``resources`` resources of one container's status, ``devices`` devices of one.
    ``name``: characters of a name, a UID, a kind, a phase, a health; ``label_key`` and
    ``label_value`` of a label's key and value (Kubernetes allows 317 and 63; a longer
    one is cut, its length said).
    """

    message_bytes: int = 4 * 1024 * 1024
    pods: int = DEFAULT_LIMITS.pods
    labels: int = 256
    owners: int = 16
    containers: int = DEFAULT_LIMITS.containers
    resources: int = 64
    devices: int = DEFAULT_LIMITS.devices
    name: int = 253
    label_key: int = 317
    label_value: int = 63


DEFAULT_PODS_API_LIMITS = PodsApiLimits()


class _Cutter:
    """Escapes and cuts strings, counting what it cut or left out."""

    def __init__(self, limits: PodsApiLimits) -> None:
        self.limits = limits
        self.dropped: Counter[str] = Counter()

    def text(self, raw: object, limit: int | None = None) -> str:
        """``raw`` escaped and cut. A proto2 string that is not UTF-8 comes as bytes:
        its odd bytes are shown as escapes."""
        return self._text(raw, limit)

    def shared(self, raw: object, limit: int | None = None) -> str:
        """:meth:`text`, interned: for a string that many pods carry alike."""
        return sys.intern(self._text(raw, limit))

    def _text(self, raw: object, limit: int | None) -> str:
        if isinstance(raw, bytes):
            self.dropped[NOT_UTF8] += 1
            value = raw.decode("utf-8", "backslashreplace")
        else:
            value = str(raw)
        most = self.limits.name if limit is None else limit
        if len(value) > most:
            self.dropped[TEXT_CUT] += 1
            value = cut(value, most)
        return printable(value)

    def take(self, items: Sequence[_T], most: int, kind: str) -> Sequence[_T]:
        if len(items) > most:
            self.dropped[kind] += len(items) - most
            return items[:most]
        return items


def _parse(data: bytes) -> pod_pb2.Pod:
    try:
        return pod_pb2.Pod.FromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise PodDecodeError(f"not a v1.Pod ({len(data)} bytes): {exc}") from exc


def deleted_uid(data: bytes, limits: PodsApiLimits = DEFAULT_PODS_API_LIMITS) -> str:
    """The UID of the pod of a DELETED event (it carries name, namespace and UID alone),
    escaped and cut as :func:`pod_meta` gives it."""
    uid = _parse(data).metadata.uid
    if not uid:
        raise PodDecodeError("a deleted pod without a UID")
    return _Cutter(limits).text(uid)


def _sort_key(key: object) -> str:
    return key.decode("utf-8", "backslashreplace") if isinstance(key, bytes) else str(key)


def _labels(c: _Cutter, labels: Mapping[str, str]) -> Mapping[str, str]:
    ordered = sorted(labels.items(), key=lambda kv: _sort_key(kv[0]))
    kept = c.take(ordered, c.limits.labels, LABELS_OVER_LIMIT)
    return MappingProxyType(
        {c.shared(k, c.limits.label_key): c.shared(v, c.limits.label_value) for k, v in kept}
    )


def _owners(c: _Cutter, refs: Sequence[pod_pb2.OwnerReference]) -> tuple[OwnerRef, ...]:
    kept = c.take(refs, c.limits.owners, OWNERS_OVER_LIMIT)
    return tuple(
        OwnerRef(kind=c.shared(r.kind), name=c.shared(r.name), controller=r.controller)
        for r in kept
    )


def _health(
    c: _Cutter, statuses: Sequence[pod_pb2.ContainerStatus]
) -> Mapping[str, tuple[ResourceHealth, ...]]:
    kept = c.take(statuses, c.limits.containers, STATUSES_OVER_LIMIT)
    out: dict[str, tuple[ResourceHealth, ...]] = {}
    for status in kept:
        if not status.allocatedResourcesStatus:
            continue
        entries: list[ResourceHealth] = []
        resources = c.take(status.allocatedResourcesStatus, c.limits.resources, STATUSES_OVER_LIMIT)
        for resource in resources:
            name = c.shared(resource.name)
            devices = c.take(resource.resources, c.limits.devices, STATUSES_OVER_LIMIT)
            entries.extend(
                ResourceHealth(name, c.text(d.resourceID), c.shared(d.health)) for d in devices
            )
        out[c.shared(status.name)] = tuple(entries)
    return MappingProxyType(out)


def pod_meta(
    data: bytes, limits: PodsApiLimits = DEFAULT_PODS_API_LIMITS
) -> tuple[PodMeta, Mapping[str, int]]:
    """The pod in ``data`` and what was left out of it, per kind (only kinds > 0).
    PodDecodeError for bytes that are no pod, or a pod without a UID."""
    pod = _parse(data)
    c = _Cutter(limits)
    meta, status = pod.metadata, pod.status
    if not meta.uid:
        raise PodDecodeError("a pod without a UID")
    statuses = list(status.initContainerStatuses) + list(status.containerStatuses)
    result = PodMeta(
        namespace=c.shared(meta.namespace),
        name=c.text(meta.name),
        uid=c.text(meta.uid),
        route=Route.PODS_API,
        phase=c.shared(status.phase),
        qos_class=c.shared(status.qosClass),
        owners=_owners(c, meta.ownerReferences),
        labels=_labels(c, meta.labels),
        resource_health=_health(c, statuses),
    )
    return result, MappingProxyType({k: v for k, v in c.dropped.items() if v})
