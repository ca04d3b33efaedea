"""What the kubelet's own files say: its configuration and its device manager's checkpoint.

Pure: the sources decode the files (YAML or JSON) and hand the data here, which turns it
into frozen objects or raises ValueError naming the key at fault.

**The configuration** (``KubeletConfiguration``, ``kubelet.config.k8s.io/v1beta1``): the
settings the kubelet admits pods with. A key the file leaves out has the kubelet's own
default (upstream ``pkg/kubelet/apis/config/v1beta1/defaults.go``, ``SetDefaults_
KubeletConfiguration``): CPU manager policy ``none``, memory manager policy ``None``,
Topology Manager policy ``none`` and scope ``container``, no options, no reserved CPUs.
Values are kept as the kubelet spells them (``single-numa-node``, ``static``, ``Static``).

**The checkpoint** (``<kubelet root>/device-plugins/kubelet_internal_checkpoint``, JSON;
upstream ``pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go``)::

    {"Data": {"PodDeviceEntries": [{"PodUID": ..., "ContainerName": ...,
                                    "ResourceName": ..., "DeviceIDs": {"0": ["id", ...]},
                                    "AllocResp": ...}],
              "RegisteredDevices": {"vendor.com/res": ["id", ...]}},
     "Checksum": ...}

``RegisteredDevices`` lists every device the kubelet knows of each resource, healthy or
not; ``DeviceIDs`` keys the devices of an allocation by NUMA node (``-1``: a device with
no topology; a checkpoint older than kubelet 1.20 has a plain list, NUMA unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from podres_exporter.core.cpulist import format_cpulist, parse_cpulist
from podres_exporter.core.model import NumaNodes

# Upstream defaults.go: what the kubelet uses for a key its configuration leaves out.
DEFAULT_TOPOLOGY_MANAGER_POLICY = "none"
DEFAULT_TOPOLOGY_MANAGER_SCOPE = "container"
DEFAULT_CPU_MANAGER_POLICY = "none"
DEFAULT_MEMORY_MANAGER_POLICY = "None"

_NO_TOPOLOGY = -1  # upstream devicemanager/pod_devices.go: nodeWithoutTopology


def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class KubeletConfig:
    """The admission settings of a kubelet's configuration file, defaults filled in."""

    topology_manager_policy: str = DEFAULT_TOPOLOGY_MANAGER_POLICY
    topology_manager_scope: str = DEFAULT_TOPOLOGY_MANAGER_SCOPE
    topology_manager_options: Mapping[str, str] = field(default_factory=_empty)
    cpu_manager_policy: str = DEFAULT_CPU_MANAGER_POLICY
    cpu_manager_options: Mapping[str, str] = field(default_factory=_empty)
    memory_manager_policy: str = DEFAULT_MEMORY_MANAGER_POLICY
    reserved_cpus: frozenset[int] = frozenset()

    def labels(self) -> dict[str, str]:
        """The ``podres_kubelet_config_info`` labels: options as sorted ``key=value``
        joined by ``,``, the reserved CPUs as a CPU list (``0,2-3``)."""
        return {
            "topology_manager_policy": self.topology_manager_policy,
            "topology_manager_scope": self.topology_manager_scope,
            "topology_manager_options": format_options(self.topology_manager_options),
            "cpu_manager_policy": self.cpu_manager_policy,
            "cpu_manager_options": format_options(self.cpu_manager_options),
            "memory_manager_policy": self.memory_manager_policy,
            "reserved_cpus": format_cpulist(self.reserved_cpus),
        }


def format_options(options: Mapping[str, str]) -> str:
    """``{"b": "1", "a": "x"}`` -> ``"a=x,b=1"``."""
    return ",".join(f"{k}={v}" for k, v in sorted(options.items()))


def _text(data: Mapping[str, Any], key: str, default: str) -> str:
    value = data.get(key)
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise ValueError(f"key {key!r}: expected a string, got {type(value).__name__}")
    return value


def _options(data: Mapping[str, Any], key: str) -> Mapping[str, str]:
    value = data.get(key)
    if value is None:
        return _empty()
    if not isinstance(value, Mapping):
        raise ValueError(f"key {key!r}: expected a map of option names to values")
    out: dict[str, str] = {}
    for name, v in value.items():
        if not isinstance(name, str) or isinstance(v, Mapping | list):
            raise ValueError(f"key {key!r}: option {name!r}: expected a name and a value")
        out[name] = str(v).lower() if isinstance(v, bool) else str(v)
    return MappingProxyType(out)


def kubelet_config(data: object) -> KubeletConfig:
    """The admission settings of a decoded ``KubeletConfiguration``; ValueError naming
    the key when one has the wrong shape (an empty file is all defaults)."""
    if data is None:
        return KubeletConfig()
    if not isinstance(data, Mapping):
        raise ValueError("expected a KubeletConfiguration (a map of keys to values)")
    kind = data.get("kind")
    if kind not in {None, "KubeletConfiguration"}:
        raise ValueError(f"key 'kind': expected KubeletConfiguration, got {kind!r}")
    reserved = _text(data, "reservedSystemCPUs", "")
    try:
        cpus = parse_cpulist(reserved)
    except ValueError as err:
        raise ValueError(f"key 'reservedSystemCPUs': {err}") from None
    return KubeletConfig(
        topology_manager_policy=_text(
            data, "topologyManagerPolicy", DEFAULT_TOPOLOGY_MANAGER_POLICY
        ),
        topology_manager_scope=_text(data, "topologyManagerScope", DEFAULT_TOPOLOGY_MANAGER_SCOPE),
        topology_manager_options=_options(data, "topologyManagerPolicyOptions"),
        cpu_manager_policy=_text(data, "cpuManagerPolicy", DEFAULT_CPU_MANAGER_POLICY),
        cpu_manager_options=_options(data, "cpuManagerPolicyOptions"),
        memory_manager_policy=_text(data, "memoryManagerPolicy", DEFAULT_MEMORY_MANAGER_POLICY),
        reserved_cpus=cpus,
    )


@dataclass(frozen=True, slots=True)
class DeviceCheckpoint:
    """What the device manager's checkpoint says: every registered device per resource
    (``registered``: resource -> sorted ids) and the NUMA placement of each allocated
    device it records (``allocated_numa``: (resource, id) -> nodes; None: no topology)."""

    registered: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    allocated_numa: Mapping[tuple[str, str], NumaNodes] = field(
        default_factory=lambda: MappingProxyType({})
    )


def _ids(value: object, where: str) -> list[str]:
    if type(value) is not list or any(type(i) is not str for i in value):
        raise ValueError(f"{where}: expected a list of device ids")
    return value


def _entry_numa(entry: object, at: int, numa: dict[tuple[str, str], set[int] | None]) -> None:
    """Record the NUMA node of each device of one ``PodDeviceEntries`` item."""
    where = f"Data.PodDeviceEntries[{at}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected an object")
    resource = entry.get("ResourceName")
    if not isinstance(resource, str):
        raise ValueError(f"{where}.ResourceName: expected a string")
    by_numa = entry.get("DeviceIDs")
    if isinstance(by_numa, list):  # before kubelet 1.20: no NUMA recorded
        _ids(by_numa, f"{where}.DeviceIDs")
        return
    if not isinstance(by_numa, dict):
        raise ValueError(f"{where}.DeviceIDs: expected a map of NUMA nodes to device ids")
    for key, ids in by_numa.items():
        try:
            node = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"{where}.DeviceIDs: NUMA node {key!r} is not a number") from None
        for device in _ids(ids, f"{where}.DeviceIDs[{key}]"):
            nodes = numa.setdefault((resource, device), set())
            if node == _NO_TOPOLOGY or nodes is None:
                numa[(resource, device)] = None
            else:
                nodes.add(node)


def device_checkpoint(data: object) -> DeviceCheckpoint:
    """The registered devices and recorded placements of a decoded checkpoint (JSON:
    dicts, lists and strings); ValueError naming the part that has the wrong shape."""
    if not isinstance(data, dict) or not isinstance(data.get("Data"), dict):
        raise ValueError("expected an object with a 'Data' object")
    body = data["Data"]
    registered_data = body.get("RegisteredDevices")
    if registered_data is None:
        registered_data = {}
    if not isinstance(registered_data, dict):
        raise ValueError("Data.RegisteredDevices: expected a map of resources to device ids")
    registered = {
        str(resource): tuple(sorted(set(_ids(ids, f"Data.RegisteredDevices[{resource!r}]"))))
        for resource, ids in registered_data.items()
    }
    entries = body.get("PodDeviceEntries")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise ValueError("Data.PodDeviceEntries: expected a list")
    numa: dict[tuple[str, str], set[int] | None] = {}
    for at, entry in enumerate(entries):
        _entry_numa(entry, at, numa)
    return DeviceCheckpoint(
        registered=MappingProxyType(registered),
        allocated_numa=MappingProxyType(
            {k: None if v is None else tuple(sorted(v)) for k, v in numa.items()}
        ),
    )
