"""The facts the kubelet's NUMA admission decides with, and what it decides.

Pure data: the node's policies (Topology, CPU and memory manager settings of the
kubelet's configuration), its CPUs with their core, socket and NUMA node, the devices
registered per resource, the memory per type and NUMA node, the NUMA distances; a pod's
shape (containers and init containers with requests and limits); and the ``Decision``
that ``admit`` returns. Quantities are integers: ``cpu`` in millicores, ``memory`` and
``hugepages-*`` in bytes, every other (extended) resource in whole units.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "CPU",
    "MEMORY",
    "MEMORY_TYPES",
    "Container",
    "CpuInfo",
    "CpuPolicy",
    "Decision",
    "DeviceInfo",
    "MemoryPolicy",
    "NodeState",
    "NumaMemory",
    "Placement",
    "Pod",
    "Policies",
    "QoS",
    "Reason",
    "Scope",
    "Shortage",
    "TopologyPolicy",
]

CPU = "cpu"
MEMORY = "memory"
#: The memory types the memory manager's Static policy pins to NUMA nodes.
MEMORY_TYPES = (MEMORY, "hugepages-2Mi", "hugepages-1Gi")


class TopologyPolicy(enum.StrEnum):
    """``topologyManagerPolicy`` of the kubelet configuration."""

    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"


class Scope(enum.StrEnum):
    """``topologyManagerScope``: hints merged per container or for the whole pod."""

    CONTAINER = "container"
    POD = "pod"


class CpuPolicy(enum.StrEnum):
    """``cpuManagerPolicy``."""

    NONE = "none"
    STATIC = "static"


class MemoryPolicy(enum.StrEnum):
    """``memoryManagerPolicy`` (spelt with a capital, as the kubelet spells it)."""

    NONE = "None"
    STATIC = "Static"


class QoS(enum.StrEnum):
    """A pod's QoS class, derived as the kubelet derives it."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


class Reason(enum.StrEnum):
    """The kubelet's admission reason (``status.reason`` of a rejected pod)."""

    ADMITTED = ""
    TOPOLOGY_AFFINITY = "TopologyAffinityError"
    SMT_ALIGNMENT = "SMTAlignmentError"
    UNEXPECTED = "UnexpectedAdmissionError"


@dataclass(frozen=True, slots=True)
class Policies:
    """The kubelet's admission settings.

    ``max_allowable_numa_nodes`` (option ``max-allowable-numa-nodes``, default 8): a
    kubelet whose machine has more NUMA nodes refuses to start with any policy but
    ``none`` (topologymanager/policy_options.go); ``admit`` does not model a kubelet that
    did not start. ``align_by_socket`` and ``distribute_cpus_across_numa`` change only
    which CPUs are chosen, never the admission (cpumanager/policy_static.go).
    """

    topology: TopologyPolicy = TopologyPolicy.NONE
    scope: Scope = Scope.CONTAINER
    prefer_closest_numa_nodes: bool = False
    max_allowable_numa_nodes: int = 8
    cpu: CpuPolicy = CpuPolicy.NONE
    full_pcpus_only: bool = False
    distribute_cpus_across_numa: bool = False
    align_by_socket: bool = False
    memory: MemoryPolicy = MemoryPolicy.NONE


@dataclass(frozen=True, slots=True)
class CpuInfo:
    """One logical CPU: its id, physical core (unique on the node), socket and NUMA node."""

    id: int
    core: int
    socket: int
    numa: int


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One registered device; ``numa`` is empty for a device without topology."""

    id: str
    numa: frozenset[int] = frozenset()
    healthy: bool = True


@dataclass(frozen=True, slots=True)
class NumaMemory:
    """One memory type on one NUMA node: what the memory manager may pin, and what is free."""

    allocatable: int
    free: int


@dataclass(frozen=True)
class NodeState:
    """What the kubelet's managers hold when a pod arrives.

    ``cpus``: every online CPU; ``reserved_cpus``: the kubelet's reserved set (never
    exclusive); ``free_cpus``: the CPUs the static policy may still hand out (the shared
    pool less the reserved CPUs). ``devices``: every registered device per resource, any
    health; ``free_devices``: ids of the healthy devices no container holds.
    ``memory``: per type (``MEMORY_TYPES``) and NUMA node. ``distances``: the NUMA
    distance table (``distances[a][b]``). ``numa_nodes`` defaults to the NUMA nodes of
    the CPUs. ``memory_cells`` / ``memory_assignments``: the memory manager's machine
    state per NUMA node (memorymanager/state ``NUMANodeState.Cells`` and
    ``NumberOfAssignments``): the group of NUMA nodes its pinned memory is shared with
    (absent: the node alone) and how many memory blocks use it (absent: none).
    """

    policies: Policies
    cpus: tuple[CpuInfo, ...]
    free_cpus: frozenset[int]
    reserved_cpus: frozenset[int] = frozenset()
    devices: Mapping[str, tuple[DeviceInfo, ...]] = field(default_factory=dict)
    free_devices: Mapping[str, frozenset[str]] = field(default_factory=dict)
    memory: Mapping[str, Mapping[int, NumaMemory]] = field(default_factory=dict)
    distances: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    numa_nodes: tuple[int, ...] = ()
    memory_cells: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    memory_assignments: Mapping[int, int] = field(default_factory=dict)

    def nodes(self) -> tuple[int, ...]:
        """The NUMA node ids, ascending."""
        if self.numa_nodes:
            return tuple(sorted(self.numa_nodes))
        return tuple(sorted({c.numa for c in self.cpus}))


@dataclass(frozen=True, slots=True)
class Container:
    """One container's requests and limits (see the module docstring for units)."""

    name: str
    requests: Mapping[str, int] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)

    def request(self, resource: str) -> int:
        """The effective request: the request, else the limit (the API server's default)."""
        if resource in self.requests:
            return self.requests[resource]
        return self.limits.get(resource, 0)


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod's shape: its app containers and init containers, in order."""

    name: str
    containers: tuple[Container, ...]
    init_containers: tuple[Container, ...] = ()


@dataclass(frozen=True, slots=True)
class Placement:
    """The NUMA affinity the Topology Manager chose for one container (``container``
    ``None``: for the whole pod under scope ``pod``). ``affinity`` ``None``: no
    preference (any NUMA node)."""

    container: str | None
    init: bool
    affinity: tuple[int, ...] | None
    preferred: bool


@dataclass(frozen=True, slots=True)
class Shortage:
    """Why a pod was refused: ``resource`` short on ``numa_nodes`` (all NUMA nodes for a
    plain shortage) under ``policy``; ``requested`` and ``available`` in the resource's
    unit (``available`` is the most any NUMA mask the policy accepts could give)."""

    resource: str
    numa_nodes: tuple[int, ...]
    policy: TopologyPolicy
    requested: int
    available: int


@dataclass(frozen=True, slots=True)
class Decision:
    """``admit``'s answer: admitted or the kubelet's ``reason`` and ``message``, the
    placements made so far, the container that failed and the shortage behind it."""

    admitted: bool
    reason: Reason
    message: str
    placements: tuple[Placement, ...] = ()
    container: str | None = None
    shortage: Shortage | None = None
