"""Devices per resource, NUMA node and state, and who holds each."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import RenderContext
from podres_exporter.collectors.families import HOLDER_LABELS, holder_values, info


class DevicesCollector:
    """``podres_node_devices`` and ``podres_container_device_info``."""

    name = "devices"
    default_enabled = True
    description = "device-plugin devices per resource and NUMA node, and their holders"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        acc = ctx.view.accounting
        if acc is None:
            return
        node = GaugeMetricFamily(
            "podres_node_devices",
            "Devices per resource, NUMA node and state: allocatable (healthy), allocated, "
            "unallocated (allocatable and free), "
            "allocated_unhealthy (held, no longer allocatable).",
            labels=["resource", "numa_node", "state"],
        )
        for (resource, numa, state), n in sorted(acc.node_devices.items()):
            node.add_metric([resource, numa, state], n)
        yield node
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
