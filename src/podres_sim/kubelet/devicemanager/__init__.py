"""The kubelet's device manager, simulated (see ``manager``)."""

from podres_sim.kubelet.devicemanager.manager import (
    CHECKPOINT,
    HEALTHY,
    KUBELET_SOCKET,
    PRE_START_TIMEOUT_S,
    UNHEALTHY,
    VERSION,
    AllocationResult,
    ContainerMount,
    DeviceNodeSpec,
    PluginDevice,
    PluginOptions,
    RegistrationRecord,
    SimDeviceManager,
    go_rpc_error,
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
