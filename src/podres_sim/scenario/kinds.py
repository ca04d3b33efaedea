"""The scenario's vocabulary: the closed sets of values its records and the TOML file
take (API mode, RPC modes, policies, container kinds, QoS classes, naming rules).

The checks and the TOML parser read these with ``typing.get_args``; the records use
them as field types.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "MEMORY_TYPE",
    "ApiMode",
    "ContainerKind",
    "CpuPolicy",
    "DeviceGrouping",
    "MemoryPolicy",
    "Naming",
    "QoS",
    "RpcMode",
    "TopologyPolicyName",
    "TopologyScope",
]

ApiMode = Literal["v1", "v1alpha1"]
RpcMode = Literal["served", "disabled", "unimplemented"]
DeviceGrouping = Literal["per_device", "per_resource"]
CpuPolicy = Literal["static", "none"]
MemoryPolicy = Literal["static", "none"]
TopologyPolicyName = Literal["none", "best-effort", "restricted", "single-numa-node"]
TopologyScope = Literal["container", "pod"]
ContainerKind = Literal["app", "sidecar", "init"]
QoS = Literal["Guaranteed", "Burstable", "BestEffort"]
Naming = Literal["exact", "deployment", "generated", "statefulset", "static"]

MEMORY_TYPE = "memory"
