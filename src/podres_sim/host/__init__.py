"""The simulated node's host: what the exporter and the device plugin read besides the
kubelet and NVML.

``topology`` writes the CPU and NUMA files of sysfs; ``devtree`` the device tree (PCI
functions with their net, InfiniBand and DRM classes) from ``hardware``'s specs, which
``layout`` derives from a scenario; ``counters`` moves a written tree's counters;
``simhost`` composes them, with procfs, the kubelet's log names, pod cgroups and the
scenario's fake NVML, into a host that follows a simulated kubelet's pods.
"""

from podres_sim.host.counters import bump_counters
from podres_sim.host.devtree import interface_name, write_device_tree
from podres_sim.host.hardware import (
    VF_LINK,
    Aer,
    AmdGpu,
    DeviceTreeSpec,
    IbPort,
    InfinibandHca,
    IntelGpu,
    NetStats,
    NicPf,
    NicVf,
    NvidiaGpu,
    PcieLink,
    VirtualNic,
)
from podres_sim.host.layout import devices_for_scenario
from podres_sim.host.simhost import SimHost, container_id, pod_uid, scenario_nvml
from podres_sim.host.topology import write_sysfs

__all__ = [
    "VF_LINK",
    "Aer",
    "AmdGpu",
    "DeviceTreeSpec",
    "IbPort",
    "InfinibandHca",
    "IntelGpu",
    "NetStats",
    "NicPf",
    "NicVf",
    "NvidiaGpu",
    "PcieLink",
    "SimHost",
    "VirtualNic",
    "bump_counters",
    "container_id",
    "devices_for_scenario",
    "interface_name",
    "pod_uid",
    "scenario_nvml",
    "write_device_tree",
    "write_sysfs",
]
