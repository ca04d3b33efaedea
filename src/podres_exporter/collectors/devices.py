"""Devices per resource, NUMA node and state, and who holds each.

``podres_node_devices``, ``podres_node_allocatable_devices``, ``podres_node_device_info`` and
``podres_container_device_info``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, accounting
from podres_exporter.collectors.families import HOLDER_LABELS, holder_values, info, labelled
from podres_exporter.core.accounting import Accounting


def _families(acc: Accounting) -> Iterator[Metric]:
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
        "allocated, or allocated_unhealthy (held, no longer allocatable).",
        ["resource", "device_id", "numa_node", "state"],
        acc.device_states,
        lambda s: [s.resource, s.device_id, s.numa, s.state],
    )
    yield info(
        "podres_container_device",
        "One series per device held by a container.",
        [*HOLDER_LABELS, "resource", "device_id", "numa_node"],
        acc.container_devices,
        lambda d: [*holder_values(d.holder), d.resource, d.device_id, d.numa],
    )


COLLECTOR: Final = PartCollector(
    "devices",
    "device-plugin devices per resource and NUMA node, and their holders",
    accounting,
    _families,
)
