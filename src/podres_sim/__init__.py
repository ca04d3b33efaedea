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

The package is in rooms by job, each with a face of its own: ``scenario`` (the records,
their checks, TOML, built-ins and generated nodes), ``kubelet`` (the pod-resources
server, the node's admission, the device manager), ``nvml`` (the pynvml fake and the
planner of a scenario's GPUs) and ``host`` (sysfs, procfs and the host beside the
kubelet). This module is the face the demo, the benchmark and the tests import.
"""

from podres_sim.host import write_sysfs
from podres_sim.kubelet import (
    GET_ALLOCATABLE_DISABLED,
    GET_DISABLED,
    RATE_LIMITED,
    V1_GET_ALLOCATABLE_METHOD,
    V1_GET_METHOD,
    V1_LIST_METHOD,
    V1ALPHA1_LIST_METHOD,
    ChurnEvent,
    ClaimGrant,
    ContainerState,
    DeviceGrant,
    MemoryGrant,
    Node,
    NodeSnapshot,
    PodState,
    SimKubelet,
    TokenBucket,
)
from podres_sim.kubelet.devicemanager import (
    AllocationResult,
    PluginDevice,
    PluginOptions,
    RegistrationRecord,
    SimDeviceManager,
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
    builtin_names,
    load_builtin,
    parse_scenario,
    read_scenario,
    resolve_scenario,
    synthetic_scenario,
)

__all__ = [
    "GET_ALLOCATABLE_DISABLED",
    "GET_DISABLED",
    "RATE_LIMITED",
    "V1ALPHA1_LIST_METHOD",
    "V1_GET_ALLOCATABLE_METHOD",
    "V1_GET_METHOD",
    "V1_LIST_METHOD",
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
    "RegistrationRecord",
    "Scenario",
    "SimDeviceManager",
    "SimKubelet",
    "TokenBucket",
    "builtin_names",
    "load_builtin",
    "parse_scenario",
    "read_scenario",
    "resolve_scenario",
    "synthetic_scenario",
    "write_sysfs",
]
