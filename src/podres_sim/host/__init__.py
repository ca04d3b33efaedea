"""The simulated node's host: what the exporter and the device plugin read besides the
kubelet and NVML.

``topology`` writes the CPU and NUMA files of sysfs; ``devtree`` the device tree (PCI
functions with their net, InfiniBand and DRM classes); ``simhost`` composes them, with
procfs, the kubelet's log names, pod cgroups and the scenario's fake NVML, into a host
that follows a simulated kubelet's pods.
"""

from podres_sim.host.simhost import SimHost, container_id, pod_uid, scenario_nvml
from podres_sim.host.topology import write_sysfs

__all__ = ["SimHost", "container_id", "pod_uid", "scenario_nvml", "write_sysfs"]
