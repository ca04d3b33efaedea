"""The kubelet's device manager, simulated: ``SimDeviceManager`` (``manager``) and its
rooms by job: ``registration`` (Register, ListAndWatch), ``admission``
(GetPreferredAllocation, Allocate, PreStartContainer, with the Topology Manager's
hint), ``checkpoint``, the ``state`` they share, the plugin ``endpoint`` and the
``records`` they exchange."""

from podres_sim.kubelet.devicemanager.admission import PRE_START_TIMEOUT_S
from podres_sim.kubelet.devicemanager.checkpoint import CHECKPOINT
from podres_sim.kubelet.devicemanager.endpoint import go_rpc_error
from podres_sim.kubelet.devicemanager.manager import SimDeviceManager
from podres_sim.kubelet.devicemanager.records import (
    HEALTHY,
    KUBELET_SOCKET,
    UNHEALTHY,
    VERSION,
    AllocationResult,
    ContainerMount,
    DeviceNodeSpec,
    PluginDevice,
    PluginOptions,
    RegistrationRecord,
)

__all__ = [
    "CHECKPOINT",
    "HEALTHY",
    "KUBELET_SOCKET",
    "PRE_START_TIMEOUT_S",
    "UNHEALTHY",
    "VERSION",
    "AllocationResult",
    "ContainerMount",
    "DeviceNodeSpec",
    "PluginDevice",
    "PluginOptions",
    "RegistrationRecord",
    "SimDeviceManager",
    "go_rpc_error",
]
