"""Our own frozen view of what the kubelet and the node report.

Nothing past ``sources/`` sees a protobuf message: the kubelet client turns every
wire message into these objects, and the pure core (accounting, collectors)
works on them alone. All collections are tuples or frozensets so a reading can
be shared between threads without copying.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple

# A NUMA placement: the sorted node ids a device or memory block is attached to,
# or None when the kubelet sent no topology at all. "Node 0" is (0,), never None.
NumaNodes = tuple[int, ...] | None


def numa_label(nodes: NumaNodes) -> str:
    """The ``numa_node`` label value for a placement.

    ``"0"`` for one node, ``"0,1"`` for a device or block that spans nodes (so a sum
    over the label never counts it twice), ``"none"`` when there is no topology.
    """
    if nodes is None:
        return "none"
    return ",".join(str(n) for n in nodes)


def device_key_order(keys: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(resource, device id) pairs in order: by resource, then id.

    Sorted as plain strings within each resource: comparing the pairs themselves is
    several times slower over a large node's 50,000 devices.
    """
    by_resource: dict[str, list[str]] = {}
    for resource, device_id in keys:
        ids = by_resource.get(resource)
        if ids is None:
            ids = by_resource[resource] = []
        ids.append(device_id)
    return [
        (resource, device_id)
        for resource, ids in sorted(by_resource.items())
        for device_id in sorted(ids)
    ]


class Holder(NamedTuple):
    """A container identity. ``container`` is empty for pod-level resources.

    A NamedTuple, not a dataclass: holders are hashed and sorted by the thousand,
    and tuples do both in C.
    """

    namespace: str
    pod: str
    container: str


class ApiVersion(StrEnum):
    """Which pod-resources API answered List."""

    V1 = "v1"
    V1ALPHA1 = "v1alpha1"


class Support(StrEnum):
    """Whether an optional kubelet RPC can be used."""

    UNKNOWN = "unknown"  # not tried yet
    SERVED = "served"
    DISABLED = "disabled"  # the RPC exists, its feature gate is off
    UNIMPLEMENTED = "unimplemented"  # the kubelet is too old to know it


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """One device id of one resource, with its NUMA placement."""

    resource: str
    device_id: str
    numa: NumaNodes


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    """Memory of one type (``memory``, ``hugepages-2Mi`` ...) in bytes, with placement."""

    memory_type: str
    size_bytes: int
    numa: NumaNodes


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One device of a dynamic-resource (DRA) claim."""

    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...] = ()
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class DynamicResource:
    """One DRA claim used by a container."""

    claim_namespace: str
    claim_name: str
    devices: tuple[ClaimDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerAlloc:
    """What one container holds.

    ``devices`` are aggregated per resource and de-duplicated, one entry per
    (resource, device id), sorted; a device reported on several NUMA nodes carries
    all of them in ``numa``.
    """

    name: str
    cpu_ids: frozenset[int] = frozenset()
    devices: tuple[DeviceRef, ...] = ()
    memory: tuple[MemoryBlock, ...] = ()
    dynamic_resources: tuple[DynamicResource, ...] = ()


@dataclass(frozen=True, slots=True)
class PodAlloc:
    """A pod and its containers, in the kubelet's order.

    ``cpu_ids`` and ``memory`` are pod-level resources (newer kubelets only).
    """

    namespace: str
    name: str
    containers: tuple[ContainerAlloc, ...] = ()
    cpu_ids: frozenset[int] = frozenset()
    memory: tuple[MemoryBlock, ...] = ()


@dataclass(frozen=True, slots=True)
class Allocatable:
    """The node's allocatable resources as the kubelet reports them.

    An empty ``cpu_ids`` means the kubelet runs CPU manager policy ``none``.
    ``devices`` lists only healthy devices.
    """

    cpu_ids: frozenset[int] = frozenset()
    devices: tuple[DeviceRef, ...] = ()
    memory: tuple[MemoryBlock, ...] = ()


@dataclass(frozen=True, slots=True)
class KubeletReading:
    """One complete, successful reading of the pod-resources API.

    ``allocatable`` is None when GetAllocatableResources cannot be used (too old a
    kubelet, or its feature gate off); ``allocatable_support`` says which.
    """

    api_version: ApiVersion
    pods: tuple[PodAlloc, ...]
    allocatable: Allocatable | None
    allocatable_support: Support
    taken_at: float  # unix time, seconds
    # What the answer listed beyond the client's limits, or more than once, per anomaly
    # kind (core/limits.py): left out of ``pods`` and ``allocatable``.
    dropped: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class PodLiveness:
    """What the node itself tells about which pods still run (no API-server rights needed).

    ``pod_uids``: the UIDs the kubelet's log layout names for each (namespace, pod), from
    the ``<namespace>_<pod>_<uid>`` directories of ``/var/log/pods``; None when that
    directory could not be read. ``live_uids``: the UIDs that still have a pod cgroup
    under ``kubepods``; None when no kubepods hierarchy could be found. The rule that
    turns these facts into running / finished / undecided is ``accounting.pod_state``.
    """

    pod_uids: Mapping[tuple[str, str], frozenset[str]] | None
    live_uids: frozenset[str] | None


NOTHING_CONTESTED = PodLiveness(MappingProxyType({}), frozenset())
"""The liveness given when no device or CPU is listed by several pods: nothing to ask,
so nothing is read (the accounting never consults it then)."""


@dataclass(frozen=True, slots=True)
class NodeTopology:
    """CPUs of the node and their NUMA nodes, read from sysfs.

    ``thread_siblings``: each online CPU's SMT siblings on its physical core, itself
    included (``thread_siblings_list``); empty where sysfs does not say.
    ``numa_distances``: each NUMA node's distance to every node, in node order
    (``node<N>/distance``); empty where sysfs does not say.
    """

    online_cpus: frozenset[int]
    cpu_to_numa: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    thread_siblings: Mapping[int, frozenset[int]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    numa_distances: Mapping[int, Mapping[int, int]] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def numa_of(self, cpu: int) -> int | None:
        """The NUMA node of ``cpu``, or None for a CPU the node does not know."""
        return self.cpu_to_numa.get(cpu)

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        """Every NUMA node that has an online CPU, sorted."""
        return tuple(
            sorted({self.cpu_to_numa[c] for c in self.online_cpus if c in self.cpu_to_numa})
        )


@dataclass(frozen=True, slots=True)
class RequestStats:
    """Cumulative kubelet request counters, copied into each Snapshot.

    ``counts`` maps (method, grpc status code name) to a count. ``duration_buckets``
    maps a method to cumulative bucket counts aligned with ``bucket_bounds``;
    ``duration_sum``/``duration_count`` per method.
    """

    bucket_bounds: tuple[float, ...] = ()
    counts: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    duration_buckets: Mapping[str, tuple[int, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    duration_sum: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    duration_count: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
