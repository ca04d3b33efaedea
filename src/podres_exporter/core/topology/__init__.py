"""The kubelet's NUMA admission (Topology, CPU, memory and device managers, v1.28) as a
pure function of the node's state and a pod's shape: ``admit``, ``apply``,
``count_fits``. No I/O; the exporter's facts and the simulated kubelet feed it.
"""

from __future__ import annotations

from podres_exporter.core.topology.admit import Assignment, admit, apply, assign, count_fits
from podres_exporter.core.topology.model import (
    CPU,
    MEMORY,
    MEMORY_TYPES,
    Container,
    CpuInfo,
    CpuPolicy,
    Decision,
    DeviceInfo,
    MemoryPolicy,
    NodeState,
    NumaMemory,
    Placement,
    Pod,
    Policies,
    QoS,
    Reason,
    Scope,
    Shortage,
    TopologyPolicy,
)
from podres_exporter.core.topology.qos import qos
from podres_exporter.core.topology.reading import NodeFacts, from_reading

__all__ = [
    "CPU",
    "MEMORY",
    "MEMORY_TYPES",
    "Assignment",
    "Container",
    "CpuInfo",
    "CpuPolicy",
    "Decision",
    "DeviceInfo",
    "MemoryPolicy",
    "NodeFacts",
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
    "admit",
    "apply",
    "assign",
    "count_fits",
    "from_reading",
    "qos",
]
