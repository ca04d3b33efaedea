"""Pure accounting: who holds what, and what is still free, per NUMA node.

Input: one :class:`~podres_exporter.core.model.KubeletReading` and the node's
:class:`~podres_exporter.core.model.NodeTopology`. Output: an :class:`Accounting` of
plain rows that the collectors, ``podres snapshot`` and ``podres top`` render.
No I/O, no clocks, no logging: every function here is deterministic.

One room per thing accounted, each saying its rules: :mod:`.cpus` (the CPU pools),
:mod:`.devices` (device states per resource), :mod:`.memory` (pinned memory),
:mod:`.claims` (DRA), :mod:`.pods` (pod-level pools), and :mod:`.holders` (who holds,
and which of several listing pods still runs). This face puts them together.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podres_exporter.core.accounting.claims import HeldClaim, dra_devices, held_claims
from podres_exporter.core.accounting.cpus import (
    CPU_POOLS,
    CpuAssignment,
    HolderCount,
    account_cpus,
)
from podres_exporter.core.accounting.devices import (
    DEVICE_STATES,
    DeviceState,
    HeldDevice,
    account_devices,
)
from podres_exporter.core.accounting.holders import (
    LIVENESS_ANOMALY,
    POD_STATES,
    contested,
    pod_state,
)
from podres_exporter.core.accounting.memory import MEMORY_STATES, HeldMemory, account_memory
from podres_exporter.core.accounting.pods import PodCount, PodMemory, pod_pools
from podres_exporter.core.limits import ANSWER_ANOMALIES
from podres_exporter.core.model import Holder, KubeletReading, NodeTopology, PodLiveness

# Anomalies: odd data that we keep serving, counted per snapshot.
ANOMALIES = (
    "cpu_not_online",  # an exclusive or allocatable CPU that is not online
    "cpu_listed_by_several_containers",
    "device_held_by_several_containers",
    "empty_device_id",
    "empty_name",  # an empty namespace, pod, container or resource name
    "memory_overcommitted",  # allocated above allocatable on a NUMA node
    # What the kubelet's answer listed beyond the client's limits, or twice (core/limits.py)
    *ANSWER_ANOMALIES,
)
# Reported only when liveness facts were given: a device or CPU listed by several pods


@dataclass(frozen=True, slots=True)
class Accounting:
    """Everything the exporter says about allocation, as plain sorted rows.

    ``node_cpus`` maps (numa label, pool) to a count, ``node_devices`` maps
    (resource, numa label, state) to a count, ``node_memory`` maps
    (numa label, memory type, state) to bytes: parts that add up to a whole.
    The allocatable wholes are apart: ``allocatable_cpus`` per numa label,
    ``allocatable_devices`` per (resource, numa label), ``allocatable_memory``
    per (numa label, memory type).
    """

    cpu_basis: str  # "allocatable", "online", or "unknown" (v1alpha1: no CPU data)
    node_cpus: Mapping[tuple[str, str], int]
    cpu_assignments: tuple[CpuAssignment, ...]
    container_cpus: tuple[HolderCount, ...]
    node_devices: Mapping[tuple[str, str, str], int]
    container_devices: tuple[HeldDevice, ...]
    device_states: tuple[DeviceState, ...]
    node_memory: Mapping[tuple[str, str, str], int]
    container_memory: tuple[HeldMemory, ...]
    claims: tuple[HeldClaim, ...]
    allocatable_cpus: Mapping[str, int]
    allocatable_devices: Mapping[tuple[str, str], int]
    allocatable_memory: Mapping[tuple[str, str], int]
    pods: int
    containers: int
    anomalies: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # Pod-level resources: one row per pod with a pod-level CPU set and NUMA node of it.
    pod_shared_cpus: tuple[PodCount, ...] = ()
    pod_shared_memory: tuple[PodMemory, ...] = ()
    # DRA per (driver, pool): distinct devices used, and those of them shared.
    dra_devices: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    dra_shared_devices: Mapping[tuple[str, str], int] = field(
        default_factory=lambda: MappingProxyType({})
    )


def account(
    reading: KubeletReading, topology: NodeTopology, liveness: PodLiveness | None = None
) -> Accounting:
    """The whole accounting of one reading on one node.

    ``liveness``: what the node tells about which pods still run, to settle devices and
    CPUs listed by several pods (None: not known, every holder counts, as before).
    """
    anomalies: Counter[str] = Counter(reading.dropped)
    anomalies["empty_name"] += sum(
        1
        for pod in reading.pods
        for name in (pod.namespace, pod.name, *(c.name for c in pod.containers))
        if not name
    )
    states: dict[tuple[str, str], str] = {}
    basis, node_cpus, allocatable_cpus, assignments, container_cpus = account_cpus(
        reading, topology, anomalies, liveness, states
    )
    node_devices, allocatable_devices, container_devices, device_states = account_devices(
        reading, anomalies, liveness, states
    )
    node_memory, allocatable_memory, container_memory = account_memory(reading, anomalies)
    dra_used, dra_shared = dra_devices(reading.pods)
    pod_cpus, pod_memory = pod_pools(reading.pods, topology)
    kinds = ANOMALIES if liveness is None else (*ANOMALIES, LIVENESS_ANOMALY)
    return Accounting(
        cpu_basis=basis,
        node_cpus=MappingProxyType(node_cpus),
        cpu_assignments=tuple(assignments),
        container_cpus=tuple(container_cpus),
        node_devices=MappingProxyType(node_devices),
        container_devices=tuple(container_devices),
        device_states=tuple(device_states),
        node_memory=MappingProxyType(node_memory),
        container_memory=tuple(container_memory),
        claims=tuple(held_claims(reading.pods)),
        allocatable_cpus=MappingProxyType(allocatable_cpus),
        allocatable_devices=MappingProxyType(allocatable_devices),
        allocatable_memory=MappingProxyType(allocatable_memory),
        pods=len(reading.pods),
        containers=sum(len(p.containers) for p in reading.pods),
        anomalies=MappingProxyType({k: anomalies.get(k, 0) for k in kinds}),
        pod_shared_cpus=tuple(pod_cpus),
        pod_shared_memory=tuple(pod_memory),
        dra_devices=MappingProxyType(dra_used),
        dra_shared_devices=MappingProxyType(dra_shared),
    )


__all__ = [
    "ANOMALIES",
    "CPU_POOLS",
    "DEVICE_STATES",
    "LIVENESS_ANOMALY",
    "MEMORY_STATES",
    "POD_STATES",
    "Accounting",
    "CpuAssignment",
    "DeviceState",
    "HeldClaim",
    "HeldDevice",
    "HeldMemory",
    "Holder",
    "HolderCount",
    "PodCount",
    "PodMemory",
    "account",
    "contested",
    "pod_state",
]
