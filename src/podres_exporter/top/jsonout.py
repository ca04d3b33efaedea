"""``podres top -o json``: the rows of one reading as a JSON document. Pure.

One object per node: its header numbers, how many of its containers have no row
(``containers_unplaced``: nothing placed), then its container and device rows, filtered
and sorted by :func:`~.selection.select` as the table shows them. DRA devices are among
the devices, with ``"dra": true``; a DRA device's resource is its driver, its id
``pool/device``.
"""

from __future__ import annotations

from typing import Any

from podres_exporter.core.model import Holder
from podres_exporter.top.rows import ContainerRow, DeviceRow, NodeHeader, TopData
from podres_exporter.top.selection import Options, select


def to_json(data: TopData, options: Options) -> dict[str, Any]:
    """``-o json``: every node's header and its rows, filtered and sorted as shown."""
    containers, devices = select(data, options)
    out_nodes = [
        {
            **_header_json(n.header),
            "containers_unplaced": n.unplaced,
            "containers": [_container_json(r) for r in containers if r.node == n.header.node],
            "devices": [_device_json(d) for d in devices if d.node == n.header.node],
        }
        for n in data.nodes
    ]
    return {
        "source": data.source,
        "view": options.view,
        "sort": options.sort_key,
        "filters": dict(options.filters()),
        "notice": data.notice,
        "nodes": out_nodes,
    }


def _header_json(h: NodeHeader) -> dict[str, Any]:
    return {
        "node": h.node,
        "kubelet_up": h.kubelet_up,
        "age_seconds": h.age_s,
        "pods": h.pods,
        "containers_total": h.containers,
        "cpus": [
            {
                "numa_node": c.numa_node,
                "allocatable": c.allocatable,
                "exclusive": c.exclusive,
                "shared_free": c.shared_free,
                "reserved": c.reserved,
            }
            for c in h.cpus
        ],
        "device_counts": [
            {
                "resource": d.resource,
                "allocatable": d.allocatable,
                "allocated": d.allocated,
                "unallocated": d.unallocated,
                "allocated_unhealthy": d.allocated_unhealthy,
                "dra": d.dra,
                "shared": d.shared,
            }
            for d in h.devices
        ],
        "memory": [
            {
                "numa_node": m.numa_node,
                "memory_type": m.memory_type,
                "free_bytes": m.free,
                "allocatable_bytes": m.allocatable,
            }
            for m in h.memory
        ],
    }


def _container_json(r: ContainerRow) -> dict[str, Any]:
    return {
        "namespace": r.namespace,
        "pod": r.pod,
        "container": r.container,
        "owner": r.owner or None,
        "cpus": r.cpulist,
        "cpu_ids": list(r.cpus),
        "busy_ratio": r.busy,
        "numa_nodes": list(r.numa_nodes),
        "numa_aligned": r.aligned,
        "devices": [
            {
                "resource": d.resource,
                "device_id": d.device_id,
                "numa_node": d.numa_node,
                "dra": d.dra,
            }
            for d in r.devices
        ],
        "dra_claims": list(r.claims),
        "memory_bytes": dict(r.memory),
        "gpu_utilization_ratio": r.gpu_util,
        "gpu_memory_used_bytes": r.gpu_mem_used,
        "gpu_memory_total_bytes": r.gpu_mem_total,
        "gpu_shared": r.gpu_shared,
    }


def _device_json(d: DeviceRow) -> dict[str, Any]:
    return {
        "resource": d.resource,
        "device_id": d.device_id,
        "numa_node": d.numa_node,
        "state": d.state,
        "healthy": d.healthy,
        "holders": [_holder_json(x) for x in d.holders],
        "physical_id": d.physical_id,
        "utilization_ratio": d.util,
        "memory_used_bytes": d.mem_used,
        "memory_total_bytes": d.mem_total,
        "dra": d.dra,
        "dra_claims": list(d.claims),
    }


def _holder_json(h: Holder) -> dict[str, str]:
    return {"namespace": h.namespace, "pod": h.pod, "container": h.container}
