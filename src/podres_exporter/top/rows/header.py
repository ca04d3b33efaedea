"""The header of a node in ``podres top``: what it has left, and how fresh the data is."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from podres_exporter.top.rows.samples import DRA_DEVICES, DRA_SHARED, Index, numa_key


@dataclass(frozen=True, slots=True)
class NumaCpus:
    """CPUs of one NUMA node per pool (``podres_node_cpus``) and allocatable
    (``podres_node_allocatable_cpus``)."""

    numa_node: str
    allocatable: int
    exclusive: int
    shared_free: int
    reserved: int


@dataclass(frozen=True, slots=True)
class ResourceCount:
    """Devices of one resource, summed over NUMA nodes (``podres_node_devices``,
    ``podres_node_allocatable_devices``).

    ``allocated``: every held device (the states ``allocated`` and
    ``allocated_unhealthy``); ``unallocated``: the state ``free``. ``allocatable`` and
    ``unallocated`` are None when the kubelet does not serve GetAllocatableResources
    (only held devices are known then).

    ``dra``: the DRA devices of one driver that containers use (``podres_dra_devices``,
    over its pools): ``allocated`` of them, ``shared`` used through several claims
    (``podres_dra_shared_devices``); how many the driver has is not known (None).
    """

    resource: str
    allocatable: int | None
    allocated: int
    unallocated: int | None
    allocated_unhealthy: int
    dra: bool = False
    shared: int = 0


@dataclass(frozen=True, slots=True)
class MemoryFree:
    """Free and allocatable bytes of one memory type on one NUMA node."""

    numa_node: str
    memory_type: str
    free: float
    allocatable: float


@dataclass(frozen=True, slots=True)
class NodeHeader:
    """What a node has left, and how fresh the data is."""

    node: str
    kubelet_up: bool | None
    age_s: float | None
    pods: int | None
    containers: int | None
    cpus: tuple[NumaCpus, ...]
    devices: tuple[ResourceCount, ...]
    memory: tuple[MemoryFree, ...]


def _dra_counts(idx: Index) -> tuple[ResourceCount, ...]:
    """DRA devices in use per driver, over its pools."""
    drivers: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, what in ((DRA_DEVICES, "allocated"), (DRA_SHARED, "shared")):
        for s in idx.get(name):
            drivers[s.labels.get("dra_driver", "")][what] += int(s.value)
    return tuple(
        ResourceCount(
            resource=driver,
            allocatable=None,
            allocated=st.get("allocated", 0),
            unallocated=None,
            allocated_unhealthy=0,
            dra=True,
            shared=st.get("shared", 0),
        )
        for driver, st in sorted(drivers.items())
    )


def header_of(node: str, idx: Index) -> NodeHeader:
    """The header of ``node`` from its samples."""
    cpus: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in idx.get("podres_node_cpus"):
        cpus[s.labels.get("numa_node", "")][s.labels.get("pool", "")] += int(s.value)
    for s in idx.get("podres_node_allocatable_cpus"):
        cpus[s.labels.get("numa_node", "")]["allocatable"] += int(s.value)
    numa_cpus = tuple(
        NumaCpus(
            numa_node=n,
            allocatable=p.get("allocatable", 0),
            exclusive=p.get("exclusive", 0),
            shared_free=p.get("shared_free", 0),
            reserved=p.get("reserved", 0),
        )
        for n, p in sorted(cpus.items(), key=lambda kv: numa_key(kv[0]))
    )
    devs: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in idx.get("podres_node_devices"):
        devs[s.labels.get("resource", "")][s.labels.get("state", "")] += int(s.value)
    for s in idx.get("podres_node_allocatable_devices"):
        devs[s.labels.get("resource", "")]["allocatable"] += int(s.value)
    counts = tuple(
        ResourceCount(
            resource=r,
            allocatable=st.get("allocatable"),
            allocated=st.get("allocated", 0) + st.get("allocated_unhealthy", 0),
            unallocated=st.get("free"),
            allocated_unhealthy=st.get("allocated_unhealthy", 0),
        )
        for r, st in sorted(devs.items())
    ) + _dra_counts(idx)
    mem: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for s in idx.get("podres_node_memory_bytes"):
        key = (s.labels.get("numa_node", ""), s.labels.get("memory_type", ""))
        mem[key][s.labels.get("state", "")] = s.value
    for s in idx.get("podres_node_allocatable_memory_bytes"):
        key = (s.labels.get("numa_node", ""), s.labels.get("memory_type", ""))
        mem[key]["allocatable"] = s.value
    memory = tuple(
        MemoryFree(numa_node=n, memory_type=t, free=st["free"], allocatable=st["allocatable"])
        for (n, t), st in sorted(
            mem.items(), key=lambda kv: (numa_key(kv[0][0]), kv[0][1] != "memory", kv[0][1])
        )
        if "free" in st and "allocatable" in st
    )
    up = idx.scalar("podres_kubelet_up")
    pods = idx.scalar("podres_pods")
    containers = idx.scalar("podres_containers")
    return NodeHeader(
        node=node,
        kubelet_up=None if up is None else up >= 1,
        age_s=idx.scalar("podres_snapshot_age_seconds"),
        pods=None if pods is None else int(pods),
        containers=None if containers is None else int(containers),
        cpus=numa_cpus,
        devices=counts,
        memory=memory,
    )
