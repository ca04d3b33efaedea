"""A NodeView as plain JSON-able data (``podres snapshot``). Pure."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from podres_exporter.core.cpulist import format_cpulist
from podres_exporter.core.join import Held
from podres_exporter.core.model import MemoryBlock, PodAlloc, numa_label
from podres_exporter.core.view import NodeView


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _memory(blocks: tuple[MemoryBlock, ...]) -> list[dict[str, Any]]:
    return [
        {"memory_type": b.memory_type, "size_bytes": b.size_bytes, "numa_node": numa_label(b.numa)}
        for b in blocks
    ]


def _pod(pod: PodAlloc, numa_of: dict[int, str]) -> dict[str, Any]:
    containers = []
    for c in pod.containers:
        containers.append(
            {
                "name": c.name,
                "exclusive_cpus": format_cpulist(c.cpu_ids),
                "cpu_numa_nodes": sorted({numa_of.get(cpu, "none") for cpu in c.cpu_ids}),
                "devices": [
                    {
                        "resource": d.resource,
                        "device_id": d.device_id,
                        "numa_node": numa_label(d.numa),
                    }
                    for d in c.devices
                ],
                "memory": _memory(c.memory),
                "dynamic_resources": [
                    {
                        "claim_namespace": r.claim_namespace,
                        "claim_name": r.claim_name,
                        "devices": [
                            {
                                "driver": d.driver,
                                "pool": d.pool,
                                "device": d.device,
                                "cdi_devices": list(d.cdi_devices),
                            }
                            | ({"share_id": d.share_id} if d.share_id is not None else {})
                            for d in r.devices
                        ],
                    }
                    for r in c.dynamic_resources
                ],
            }
        )
    out: dict[str, Any] = {"namespace": pod.namespace, "name": pod.name, "containers": containers}
    if pod.cpu_ids or pod.memory:
        claimed = frozenset().union(*(c.cpu_ids for c in pod.containers))
        out["pod_level"] = {
            "exclusive_cpus": format_cpulist(pod.cpu_ids),
            "shared_pool_cpus": format_cpulist(pod.cpu_ids - claimed),
            "memory": _memory(pod.memory),
        }
    return out


def _with_allocatable(parts: Mapping[Any, int], whole: Mapping[Any, int]) -> dict[Any, int]:
    """The parts (keyed by place and state) with the allocatable whole beside them, as
    state ``allocatable``: the snapshot lists both under one place."""
    out = dict(parts)
    for key, n in whole.items():
        out[(*((key,) if isinstance(key, str) else key), "allocatable")] = n
    return out


def _nest(counts: Any, depth: int) -> dict[str, Any]:
    """{(a, b, c): n} -> {a: {b: {c: n}}} for ``depth`` key parts."""
    root: dict[str, Any] = {}
    for key, n in sorted(counts.items()):
        d = root
        for part in key[: depth - 1]:
            d = d.setdefault(part, {})
        d[key[depth - 1]] = n
    return root


def _holders(held: Held) -> list[str]:
    return [f"{h.namespace}/{h.pod}/{h.container}" for h in held.holders]


def _telemetry(view: NodeView) -> dict[str, Any]:
    """GPUs, network functions and device-id resolution, with their holders."""
    j, t = view.joined, view.snapshot.telemetry
    if j is None or t is None:
        return {}
    gpus = []
    for row in j.gpus:
        g = row.gpu
        gpus.append(
            {
                "uuid": g.uuid,
                "index": g.index,
                "model": g.name,
                "pci_bus_id": g.pci_bus_id,
                "numa_node": g.numa_node,
                "parent_uuid": g.parent_uuid,
                "healthy": g.healthy,
                "error": g.error,
                "holders": _holders(row.held),
                "utilization_gpu_ratio": g.utilization_gpu_ratio,
                "memory_used_bytes": g.memory_used_bytes,
                "memory_total_bytes": g.memory_total_bytes,
                "power_watts": g.power_watts,
                "temperature_celsius": g.temperature_celsius,
                "xid_errors_total": {str(k): v for k, v in sorted(g.xid_errors_total.items())},
                "processes": len(g.processes),
            }
        )
    return {
        "sources": {
            name: {
                "ok": s.ok,
                "stale": s.stale,
                "error": s.error,
                "duration_s": round(s.duration_s, 4),
            }
            for name, s in sorted(t.sources.items())
        },
        "nvml_available": t.gpus.available if t.gpus else None,
        "driver_version": t.gpus.driver_version if t.gpus else None,
        "gpus": gpus,
        "network_functions": [
            {
                "interface": n.net.interface,
                "pci_address": n.net.pci_address,
                "operstate": n.net.operstate,
                "holders": _holders(n.held),
            }
            for n in j.net
        ],
        "device_ids": [
            {
                "resource": r.resource,
                "device_id": r.device_id,
                "kind": r.kind.value,
                "physical_id": r.physical_id,
                "matched": r.matched,
            }
            for r in j.resolutions
        ],
        "numa_misaligned": [
            f"{h.namespace}/{h.pod}/{h.container}" for h, ok in j.numa_aligned if not ok
        ],
    }


def to_dict(view: NodeView, *, only: PodAlloc | None = None) -> dict[str, Any]:
    """The whole view: kubelet state, node accounting per NUMA node, and every pod.

    ``only``: list this pod alone (as read by Get); the node accounting stays whole.
    """
    snap, acc = view.snapshot, view.accounting
    reading = snap.reading
    kubelet: dict[str, Any] = {"up": snap.kubelet_up, "error": snap.kubelet_error}
    if reading is not None:
        kubelet |= {
            "api_version": reading.api_version.value,
            "get_allocatable": reading.allocatable_support.value,
            "read_at": _iso(reading.taken_at),
        }
    out: dict[str, Any] = {"taken_at": _iso(snap.taken_at), "kubelet": kubelet}
    topo = snap.topology
    numa_of = {cpu: str(n) for cpu, n in topo.cpu_to_numa.items()}
    node: dict[str, Any] = {
        "online_cpus": format_cpulist(topo.online_cpus),
        "numa_nodes": list(topo.numa_nodes),
    }
    if acc is not None and reading is not None:
        shared: dict[str, list[int]] = defaultdict(list)
        for a in acc.cpu_assignments:
            if a.pool == "shared_free":
                shared[a.numa].append(a.cpu)
        node |= {
            "cpu_basis": acc.cpu_basis,
            "cpus": _nest(_with_allocatable(acc.node_cpus, acc.allocatable_cpus), 2),
            "shared_free_cpus": {n: format_cpulist(c) for n, c in sorted(shared.items())},
            "devices": _nest(_with_allocatable(acc.node_devices, acc.allocatable_devices), 3),
            "memory_bytes": _nest(_with_allocatable(acc.node_memory, acc.allocatable_memory), 3),
            "pods": acc.pods,
            "containers": acc.containers,
            "anomalies": {k: v for k, v in acc.anomalies.items() if v},
        }
        if acc.dra_devices:
            dra = {(*k, "allocated"): n for k, n in acc.dra_devices.items()}
            dra |= {(*k, "shared"): n for k, n in acc.dra_shared_devices.items()}
            node["dra_devices"] = _nest(dra, 3)
        pods = (only,) if only is not None else reading.pods
        out["pods"] = [_pod(p, numa_of) for p in sorted(pods, key=lambda p: (p.namespace, p.name))]
    out["node"] = node
    telemetry = _telemetry(view)
    if telemetry:
        out["telemetry"] = telemetry
    return out
