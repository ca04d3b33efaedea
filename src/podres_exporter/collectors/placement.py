"""NUMA alignment per container, idle held devices, and how device ids resolved."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, view
from podres_exporter.collectors.families import (
    HOLDER_LABELS,
    family,
    holder_values,
    info,
    labelled,
)
from podres_exporter.core.identity import LABELS as IDENTITY_LABELS
from podres_exporter.core.join import Resolution
from podres_exporter.core.view import NodeView

_RESOLUTION_LABELS = ("resource", "device_id", "id_kind", *IDENTITY_LABELS, "matched")


def _resolution(r: Resolution) -> list[str]:
    return [
        r.resource,
        r.device_id,
        r.kind.value,
        *r.identity.values(),
        "true" if r.matched else "false",
    ]


def _unmatched(resolutions: Iterable[Resolution]) -> Metric:
    """Per resource that has device ids, how many of them matched no telemetry device."""
    resources: set[str] = set()
    unmatched: Counter[str] = Counter()
    for r in resolutions:
        resources.add(r.resource)
        unmatched[r.resource] += 0 if r.matched else 1
    return labelled(
        "podres_device_ids_unmatched",
        "Device ids of a resource that matched no telemetry device (exported as allocation "
        "only): an unknown id shape, or hardware no source reads.",
        ["resource"],
        [((resource,), unmatched[resource]) for resource in sorted(resources)],
    )


class _Resolved:
    """The resolution families of the last ``Joined.resolutions`` seen, by identity: a
    join with the same kubelet state and devices hands on the same tuple (one series per
    kubelet device id: the largest families of a big node), and the same families then
    let the writer reuse their text."""

    last: tuple[tuple[Resolution, ...], tuple[Metric, Metric]] | None = None

    @classmethod
    def families(cls, resolutions: tuple[Resolution, ...]) -> tuple[Metric, Metric]:
        last = cls.last
        if last is not None and last[0] is resolutions:
            return last[1]
        out = (
            info(
                "podres_device_resolution",
                "One series per kubelet device id: how it was read (id_kind), the identity of "
                "the physical device it names, and whether telemetry was found for it.",
                _RESOLUTION_LABELS,
                resolutions,
                _resolution,
            ),
            _unmatched(resolutions),
        )
        cls.last = (resolutions, out)
        return out


def _families(v: NodeView) -> Iterator[Metric]:
    joined = v.joined
    if joined is None:
        return
    yield family(
        "podres_container_numa_aligned",
        "1 when the container's exclusive CPUs, devices and pinned memory sit on the same "
        "NUMA node(s), 0 when they straddle.",
        list(HOLDER_LABELS),
        joined.numa_aligned,
        lambda a: holder_values(a[0]),
        lambda a: a[1],
    )
    now = v.snapshot.taken_at
    yield family(
        "podres_held_device_idle_seconds",
        "How long a device held by one container has shown no utilisation (GPU, amdgpu); "
        "counted from when the exporter first saw it idle.",
        ["resource", "device_id", *IDENTITY_LABELS, *HOLDER_LABELS],
        joined.idle,
        lambda d: [d.resource, d.device_id, *d.identity.values(), *holder_values(d.holder)],
        lambda d: max(0.0, now - d.idle_since),
    )
    yield from _Resolved.families(joined.resolutions)


COLLECTOR: Final = PartCollector(
    "placement",
    "NUMA alignment per container, idle held devices, device-id resolution",
    view,
    _families,
)
