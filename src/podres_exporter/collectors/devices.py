"""Devices per resource, NUMA node and state, and who holds each.

``podres_node_devices``, ``podres_node_allocatable_devices``, ``podres_node_device_info`` and
``podres_container_device_info``. A device id that names an NVIDIA GPU or MIG device carries
its identity labels (``uuid``, ``gpu``, ``gpu_instance``, ``compute_instance``: see
:mod:`podres_exporter.core.identity`) once the join has resolved it, so one selector finds
the holders of GPU 3.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, RenderContext
from podres_exporter.collectors.families import HOLDER_LABELS, holder_values, info, labelled
from podres_exporter.core.accounting import Accounting
from podres_exporter.core.identity import GPU_LABELS, NONE
from podres_exporter.core.join import Resolution


@dataclass(frozen=True, slots=True, eq=False)
class _Part:
    """What the collector reads: the accounting, and the join's resolutions (for the GPU
    identity of each id; empty before the first telemetry read)."""

    acc: Accounting
    resolutions: tuple[Resolution, ...]


class _Last:
    """The last part handed out: the same accounting and resolutions give the very same
    part, so the registry reuses the families."""

    part: _Part | None = None


def _part(ctx: RenderContext) -> _Part | None:
    acc = ctx.view.accounting
    if acc is None:
        return None
    joined = ctx.view.joined
    resolutions = joined.resolutions if joined is not None else ()
    last = _Last.part
    if last is not None and last.acc is acc and last.resolutions is resolutions:
        return last
    _Last.part = _Part(acc, resolutions)
    return _Last.part


def _families(part: _Part) -> Iterator[Metric]:
    acc = part.acc
    gpu_of = {(r.resource, r.device_id): r.identity for r in part.resolutions}
    yield labelled(
        "podres_node_devices",
        "Devices per resource, NUMA node and state: free (allocatable, held by nobody), "
        "allocated (held, allocatable), allocated_unhealthy (held, no longer allocatable); "
        "the states add up to every device the kubelet knows.",
        ["resource", "numa_node", "state"],
        sorted(acc.node_devices.items()),
    )
    if acc.allocatable_devices:
        yield labelled(
            "podres_node_allocatable_devices",
            "Healthy devices the kubelet can hand out, per resource and NUMA node "
            "(free + allocated).",
            ["resource", "numa_node"],
            sorted(acc.allocatable_devices.items()),
        )
    yield info(
        "podres_node_device",
        "One series per device id the kubelet reports: free (allocatable, held by nobody), "
        "allocated, or allocated_unhealthy (held, no longer allocatable); with the GPU "
        "identity of a GPU or MIG device.",
        ["resource", "device_id", "numa_node", "state", *GPU_LABELS],
        acc.device_states,
        lambda s: [
            s.resource,
            s.device_id,
            s.numa,
            s.state,
            *gpu_of.get((s.resource, s.device_id), NONE).gpu_values(),
        ],
    )
    yield info(
        "podres_container_device",
        "One series per device held by a container, with the GPU identity of a GPU or MIG device.",
        [*HOLDER_LABELS, "resource", "device_id", "numa_node", *GPU_LABELS],
        acc.container_devices,
        lambda d: [
            *holder_values(d.holder),
            d.resource,
            d.device_id,
            d.numa,
            *gpu_of.get((d.resource, d.device_id), NONE).gpu_values(),
        ],
    )


COLLECTOR: Final = PartCollector(
    "devices",
    "device-plugin devices per resource and NUMA node, and their holders",
    _part,
    _families,
)
