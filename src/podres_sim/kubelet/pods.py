"""The simulated kubelet's records of pods and what they hold: the containers' CPUs,
devices, memory and DRA claims, the pod's phase, a snapshot of the node, one churn step.
Plain frozen data; ``Node`` makes them and the server turns them into messages.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Literal

from podres_sim.scenario import (
    ClaimDeviceSpec,
    ContainerKind,
    ContainerSpec,
    DeviceSpec,
    PodSpec,
    QoS,
)

__all__ = [
    "ChurnEvent",
    "ClaimGrant",
    "ContainerState",
    "DeviceGrant",
    "MemoryGrant",
    "NodeSnapshot",
    "PodKey",
    "PodState",
]

PodKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    """One device held by a container; ``numa`` None: the device has no topology."""

    resource: str
    device_id: str
    numa: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class MemoryGrant:
    """Memory of one type pinned to a group of NUMA nodes (or allocatable on one)."""

    memory_type: str
    size: int
    numa: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ClaimGrant:
    """A DRA claim of a container, with the pod's name filled in."""

    name: str
    namespace: str
    devices: tuple[ClaimDeviceSpec, ...]

    @classmethod
    def of(cls, c: ContainerSpec, namespace: str, pod_name: str) -> tuple[ClaimGrant, ...]:
        """A container's DRA claims, with the pod's name filled in."""
        return tuple(
            cls(cl.name.replace("{pod}", pod_name), cl.namespace or namespace, cl.devices)
            for cl in c.claims
        )


@dataclass(frozen=True, slots=True)
class ContainerState:
    """What one container holds; everything empty for a shared, device-less container."""

    name: str
    kind: ContainerKind = "app"
    cpu_ids: tuple[int, ...] = ()
    devices: tuple[DeviceGrant, ...] = ()
    memory: tuple[MemoryGrant, ...] = ()
    claims: tuple[ClaimGrant, ...] = ()

    @property
    def empty(self) -> bool:
        """True when the container holds nothing at all."""
        return not (self.cpu_ids or self.devices or self.memory or self.claims)


@dataclass(frozen=True, slots=True)
class PodState:
    """An admitted (Running), rejected (Failed) or finished (Succeeded) pod, with its
    containers in the kubelet's order: restartable sidecars first, then app containers.
    ``cpu_ids`` and ``memory``: its pod-level resources (empty without them). ``uid``:
    this incarnation's UID, new for each pod admitted, kept when the pod's state is
    replaced (finished); not compared."""

    namespace: str
    name: str
    spec: PodSpec
    containers: tuple[ContainerState, ...]
    phase: Literal["Running", "Failed", "Succeeded"] = "Running"
    reason: str = ""
    message: str = ""
    cpu_ids: tuple[int, ...] = ()
    memory: tuple[MemoryGrant, ...] = ()
    uid: str = field(default_factory=lambda: str(uuid.uuid4()), compare=False)

    @property
    def key(self) -> PodKey:
        """``(namespace, name)``."""
        return (self.namespace, self.name)

    @property
    def admitted(self) -> bool:
        """False for a pod rejected at admission (True for a finished one)."""
        return self.phase != "Failed"

    @property
    def active(self) -> bool:
        """True for a running pod (what List shows from 1.34)."""
        return self.phase == "Running"

    @property
    def qos(self) -> QoS:
        """The pod's QoS class."""
        return self.spec.effective_qos


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """A consistent view of the node, taken under its lock.

    ``allocatable_cpus`` is empty under CPU policy ``none``; ``healthy_devices`` are
    the devices GetAllocatableResources reports; ``allocatable_memory`` has one block
    per NUMA node per type under the static memory manager, else nothing.
    ``generation`` increases with every change.
    """

    pods: tuple[PodState, ...]
    allocatable_cpus: tuple[int, ...]
    healthy_devices: tuple[DeviceSpec, ...]
    allocatable_memory: tuple[MemoryGrant, ...]
    generation: int


@dataclass(frozen=True, slots=True)
class ChurnEvent:
    """One churn step: the pod deleted and its replacement."""

    removed: PodState
    added: PodState
