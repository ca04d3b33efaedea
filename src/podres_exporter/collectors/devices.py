"""Devices per resource, NUMA node and state, and who holds each."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import HOLDER_LABELS, RenderContext, holder_values


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
        states = InfoMetricFamily(
            "podres_node_device",
            "One series per device id the kubelet reports: free (allocatable, held by nobody), "
            "allocated, or allocated_unhealthy (held, no longer allocatable).",
            labels=["resource", "device_id", "numa_node", "state"],
        )
        for s in acc.device_states:
            states.add_metric([s.resource, s.device_id, s.numa, s.state], {})
        yield states
        info = InfoMetricFamily(
            "podres_container_device",
            "One series per device held by a container.",
            labels=[*HOLDER_LABELS, "resource", "device_id", "numa_node"],
        )
        for d in acc.container_devices:
            info.add_metric([*holder_values(d.holder), d.resource, d.device_id, d.numa], {})
        yield info
