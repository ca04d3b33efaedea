"""The scenario a simulated node runs: its records, where they come from, their checks.

``records`` holds the frozen data (node, kubelet behaviour, pods) and ``kinds`` its
vocabulary; ``check`` holds the rules the records keep when they are built. The
loaders sit above them: ``parse`` (TOML), ``synthetic`` (generated big nodes) and
``builtin`` (the shipped scenarios and the references ``--scenario`` takes).
"""

from podres_sim.scenario.builtin import builtin_names, load_builtin, resolve_scenario
from podres_sim.scenario.kinds import (
    MEMORY_TYPE,
    ApiMode,
    ContainerKind,
    CpuPolicy,
    DeviceGrouping,
    MemoryPolicy,
    Naming,
    QoS,
    RpcMode,
)
from podres_sim.scenario.parse import parse_scenario, read_scenario, scenario_from_dict
from podres_sim.scenario.records import (
    ClaimDeviceSpec,
    ClaimSpec,
    ContainerSpec,
    DevicePluginsSpec,
    DeviceSpec,
    KubeletBehaviour,
    NodeSpec,
    PodSpec,
    Scenario,
)
from podres_sim.scenario.synthetic import synthetic_scenario

__all__ = [
    "MEMORY_TYPE",
    "ApiMode",
    "ClaimDeviceSpec",
    "ClaimSpec",
    "ContainerKind",
    "ContainerSpec",
    "CpuPolicy",
    "DeviceGrouping",
    "DevicePluginsSpec",
    "DeviceSpec",
    "KubeletBehaviour",
    "MemoryPolicy",
    "Naming",
    "NodeSpec",
    "PodSpec",
    "QoS",
    "RpcMode",
    "Scenario",
    "builtin_names",
    "load_builtin",
    "parse_scenario",
    "read_scenario",
    "resolve_scenario",
    "scenario_from_dict",
    "synthetic_scenario",
]
