"""A simulated kubelet that speaks the real pod-resources gRPC API on a unix socket.

The built-in demo (``podres demo``) and the test-suite use it. A ``Scenario`` (a TOML
file or Python data) describes the node (NUMA nodes, CPUs, reserved CPUs, CPU and
memory manager policies, memory, devices), the kubelet's behaviour and the pods; a
``Node`` admits the pods the way the kubelet's CPU, memory and device managers do;
``SimKubelet`` serves the node over gRPC. ``write_sysfs`` writes the matching CPU and
NUMA files for the exporter's ``--path.sysfs``.

    from podres_sim import SimKubelet

    with SimKubelet("demo", "/tmp/podres/kubelet.sock") as kubelet:
        kubelet.start_churn(5.0)
        ...

``SimDeviceManager`` is the kubelet's device manager: device plugins register with it
over the real ``v1beta1`` protocol. A scenario with ``[device_plugins]`` gets one
(``SimKubelet.device_manager``), and its pods asking for those resources are admitted
through the registered plugins (GetPreferredAllocation, Allocate).
"""

from podres_sim.devicemanager import (
    AllocationResult,
    PluginDevice,
    PluginOptions,
    RegistrationRecord,
    SimDeviceManager,
)
from podres_sim.node import (
    ChurnEvent,
    ClaimGrant,
    ContainerState,
    DeviceGrant,
    MemoryGrant,
    Node,
    NodeSnapshot,
    PodState,
)
from podres_sim.scenario import (
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
from podres_sim.scenario_toml import builtin_names, load_builtin, resolve_scenario
from podres_sim.server import (
    GET_ALLOCATABLE_DISABLED,
    GET_DISABLED,
    RATE_LIMITED,
    V1_GET_ALLOCATABLE_METHOD,
    V1_GET_METHOD,
    V1_LIST_METHOD,
    V1ALPHA1_LIST_METHOD,
    SimKubelet,
    TokenBucket,
)
from podres_sim.sysfs import write_sysfs

__all__ = [
    "GET_ALLOCATABLE_DISABLED",
    "GET_DISABLED",
    "RATE_LIMITED",
    "V1ALPHA1_LIST_METHOD",
    "V1_GET_ALLOCATABLE_METHOD",
    "V1_GET_METHOD",
    "V1_LIST_METHOD",
    "AdmissionError",
    "AllocationResult",
    "ChurnEvent",
    "ClaimDeviceSpec",
    "ClaimGrant",
    "ClaimSpec",
    "ContainerSpec",
    "ContainerState",
    "DeviceGrant",
    "DevicePluginsSpec",
    "DeviceSpec",
    "KubeletBehaviour",
    "MemoryGrant",
    "Node",
    "NodeSnapshot",
    "NodeSpec",
    "PluginDevice",
    "PluginOptions",
    "PodSpec",
    "PodState",
    "PreStartError",
    "RegistrationRecord",
    "Scenario",
    "SimDeviceManager",
    "SimKubelet",
    "TokenBucket",
    "builtin_names",
    "load_builtin",
    "resolve_scenario",
    "write_sysfs",
]
