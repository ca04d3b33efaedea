"""The device manager's records: what plugins advertise and what containers get.

``PluginOptions`` and ``PluginDevice`` are what a plugin says (its options, one device
of its latest ListAndWatch list); ``RegistrationRecord`` one Register call;
``AllocationResult`` what one container got of one resource. Plain frozen data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "HEALTHY",
    "KUBELET_SOCKET",
    "UNHEALTHY",
    "VERSION",
    "AllocationResult",
    "ContainerMount",
    "DeviceNodeSpec",
    "PluginDevice",
    "PluginOptions",
    "RegistrationRecord",
]

VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


@dataclass(frozen=True, slots=True)
class PluginOptions:
    """A plugin's ``DevicePluginOptions``."""

    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """One device from a plugin's latest ``ListAndWatch`` message. ``health`` is the string
    as sent; ``numa`` the sorted NUMA nodes of its TopologyInfo, None when it has none."""

    id: str
    health: str = HEALTHY
    numa: tuple[int, ...] | None = None

    @property
    def healthy(self) -> bool:
        """Only the exact string ``Healthy`` is healthy."""
        return self.health == HEALTHY


@dataclass(frozen=True, slots=True)
class RegistrationRecord:
    """One ``Register`` call: ``result`` is ``"ok"`` or the error the plugin got.
    ``options`` are what the plugin's ``GetDevicePluginOptions`` answered (accepted
    registrations only: it answers before Register does); ``request_options`` what
    the RegisterRequest itself carried (None: none), which the kubelet does not use."""

    resource: str
    endpoint: str
    version: str
    result: str
    options: PluginOptions | None = None
    request_options: PluginOptions | None = None

    @property
    def ok(self) -> bool:
        """Whether the registration was accepted."""
        return self.result == "ok"


@dataclass(frozen=True, slots=True)
class ContainerMount:
    """A ``Mount`` of an AllocateResponse."""

    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class DeviceNodeSpec:
    """A ``DeviceSpec`` of an AllocateResponse (a device node for the container)."""

    container_path: str
    host_path: str
    permissions: str = ""


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """What one container got of one resource: the device ids (with the NUMA nodes the
    plugin advertised for each at allocation time) and ``container_responses[0]`` of
    the plugin's AllocateResponse as plain data. ``preferred`` is what
    GetPreferredAllocation answered, None when it was not called."""

    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...] = ()
    topology: Mapping[str, tuple[int, ...] | None] = field(
        default_factory=lambda: MappingProxyType({})
    )
    envs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    mounts: tuple[ContainerMount, ...] = ()
    devices: tuple[DeviceNodeSpec, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cdi_devices: tuple[str, ...] = ()
    preferred: tuple[str, ...] | None = None
