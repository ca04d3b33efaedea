"""Scenarios for the simulated kubelet: the node, the kubelet's behaviour, the pods.

A scenario is plain, frozen data. It comes from a TOML file (``Scenario.load``), from
one of the files shipped in ``sim/scenarios/`` (``load_builtin``), or from Python
(the dataclasses below, their ``of``/``uniform`` helpers, ``Scenario.synthetic``).
Nothing here allocates anything: ``node.Node`` admits the pods.

The TOML schema (every key but ``node`` optional; unknown keys are errors)::

    name = "demo"                      # defaults to the file's stem
    description = "..."
    seed = 42                          # RNG seed: names, churn, List order

    [kubelet]                          # behaviour knobs, see KubeletBehaviour
    api = "v1"                         # "v1" (serves v1 + v1alpha1) | "v1alpha1"
    get_allocatable = "served"         # | "disabled" | "unimplemented"
    get = "disabled"                   # | "served" | "unimplemented"
    rate_limit = true                  # 100 qps, burst 10, shared by all methods
    device_grouping = "per_device"     # | "per_resource" (kubelet ~1.20)
    list_rejected = true               # List shows pods rejected at admission

    [churn]
    interval_s = 5.0                   # 0: no churn

    [device_plugins]                   # resources served by device plugins, see DevicePluginsSpec
    resources = ["example.com/vf"]     # their devices come from the plugins, not node.devices
    directory = "device-plugins"       # relative: beside the pod-resources socket
    resource_grace_s = 300.0           # a resource whose plugin went away is dropped after it
    retry_pending = true               # re-admit pods rejected for want of a plugin resource

    [node]
    name = "gpu-node-a1"
    numa_nodes = 2
    cpus_per_numa_node = 24            # node N holds CPUs N*24 .. N*24+23, or:
    # numa_cpus = ["0-11,24-35", "12-23,36-47"]
    reserved_cpus = "0,1,24,25"        # kernel range list, or an array of ints
    offline_cpus = []                  # present but offline: not allocatable, not in sysfs
    cpu_policy = "static"              # | "none"
    memory_policy = "static"           # | "none"

    [node.memory]                      # per NUMA node: one quantity for all, or one each
    memory = "120Gi"
    hugepages-1Gi = ["32Gi", "32Gi"]

    [[node.devices]]
    resource = "nvidia.com/gpu"
    ids = ["GPU-...", "GPU-..."]       # or id = "..."
    numa = 0                           # int, array (device spans nodes), absent: no topology
    healthy = true

    [[pods]]
    namespace = "ml-training"
    name = "llm-pretrain"
    naming = "statefulset"             # exact | deployment | generated | statefulset | static
    replicas = 2
    churn = false                      # step() may delete it and admit a replacement
    qos = "Guaranteed"                 # optional; derived from the requests otherwise

    [[pods.containers]]
    name = "trainer"
    kind = "app"                       # | "sidecar" (restartable init) | "init" (not listed)
    cpu = 8                            # cores: 8, 1.5, "500m"
    memory = "64Gi"
    hugepages-1Gi = "8Gi"
    devices = { "nvidia.com/gpu" = 2 }

    [[pods.containers.claims]]         # DRA claim, carried through to List
    name = "{pod}-gpu"                 # "{pod}" becomes the pod's name
    driver = "gpu.example.com"         # one device inline, or [[...claims.devices]]
    pool = "gpu-node-a1"
    device = "gpu-0"
    cdi_devices = ["k8s.gpu.example.com/gpu=gpu-0"]

Requests are requests equal to limits: a container with ``cpu`` and ``memory`` in a
pod whose every container has both is Guaranteed; under the static CPU policy its
integer CPUs are exclusive.

A pod asking for a ``device_plugins`` resource is admitted through the simulated
kubelet's device manager (GetPreferredAllocation and Allocate over gRPC to the plugin
that registered it); until a plugin has registered it, such pods are rejected.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, cast, get_args

from podres_exporter.cpulist import format_cpulist, parse_cpulist
from podres_exporter.errors import ScenarioError
from podres_exporter.model import ClaimDevice

__all__ = [
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
    "ScenarioError",
    "builtin_names",
    "extended_resource_problem",
    "format_cpu_list",
    "load_builtin",
    "parse_bytes",
    "parse_cpu_list",
    "parse_millicpu",
]

ApiMode = Literal["v1", "v1alpha1"]
RpcMode = Literal["served", "disabled", "unimplemented"]
DeviceGrouping = Literal["per_device", "per_resource"]
CpuPolicy = Literal["static", "none"]
MemoryPolicy = Literal["static", "none"]
ContainerKind = Literal["app", "sidecar", "init"]
QoS = Literal["Guaranteed", "Burstable", "BestEffort"]
Naming = Literal["exact", "deployment", "generated", "statefulset", "static"]

MEMORY_TYPE = "memory"
_HUGEPAGES = re.compile(r"^hugepages-\d+(Ki|Mi|Gi)$")


# --------------------------------------------------------------------------- quantities

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def parse_bytes(value: object) -> int:
    """A Kubernetes memory quantity (``"64Gi"``, ``"512M"``, ``1024``) in bytes."""
    if isinstance(value, bool):
        raise ValueError(f"expected a byte quantity, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a non-negative byte quantity, got {value}")
        return value
    if isinstance(value, str):
        m = _QUANTITY.match(value.strip())
        if m:
            number, suffix = m.group(1), m.group(2)
            scale = _BINARY.get(suffix or "", _DECIMAL.get(suffix or "", 1))
            amount = float(number) * scale if "." in number else int(number) * scale
            if amount == int(amount):
                return int(amount)
    raise ValueError(f"expected a byte quantity such as 64Gi or 512Mi, got {value!r}")


def parse_millicpu(value: object) -> int:
    """A Kubernetes CPU quantity (``2``, ``1.5``, ``"500m"``) in millicores."""
    if isinstance(value, bool):
        raise ValueError(f"expected a CPU quantity, got {value!r}")
    if isinstance(value, int | float):
        milli = round(float(value) * 1000)
        if milli < 0 or abs(milli - float(value) * 1000) > 1e-6:
            raise ValueError(f"expected a CPU quantity with at most 3 decimals, got {value!r}")
        return milli
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+m", text):
            return int(text[:-1])
        if re.fullmatch(r"\d+(\.\d{1,3})?", text):
            return parse_millicpu(float(text))
    raise ValueError(f"expected a CPU quantity such as 2, 1.5 or 500m, got {value!r}")


def parse_cpu_list(value: object) -> tuple[int, ...]:
    """A kernel CPU list (``"0-3,8,10-11"``) or an array of ints, sorted, unique."""
    if isinstance(value, list | tuple):
        cpus: set[int] = set()
        for item in value:
            if not isinstance(item, int) or isinstance(item, bool) or item < 0:
                raise ValueError(f"expected CPU ids (non-negative ints), got {item!r}")
            cpus.add(item)
        return tuple(sorted(cpus))
    if isinstance(value, str):
        return tuple(sorted(parse_cpulist(value)))
    raise ValueError(f"expected a CPU list string or an array of ints, got {value!r}")


format_cpu_list = format_cpulist


# Resource names: the rules of the kubelet's v1helper.IsExtendedResourceName.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def extended_resource_problem(name: str) -> str | None:  # noqa: PLR0911 - one rule each
    """Why ``name`` is not an extended resource name a device plugin may register
    (``domain/name``, the domain not ``kubernetes.io`` nor under it, not starting with
    ``requests.``, a valid qualified name), or None when it is one."""
    if "/" not in name:
        return "has no domain (expected domain/name)"
    if "kubernetes.io/" in name:
        return "is in the kubernetes.io namespace"
    if name.startswith("requests."):
        return "starts with requests."
    parts = f"requests.{name}".split("/")
    if len(parts) != 2:
        return "has more than one /"
    prefix, short = parts
    if len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
        return "has an invalid domain (expected a lowercase DNS subdomain)"
    if not short or len(short) > 63 or not _QUALIFIED_NAME.fullmatch(short):
        return "has an invalid name part (alphanumerics, '-', '_' or '.', at most 63)"
    return None


def _frozen_map(data: Mapping[str, int] | None) -> Mapping[str, int]:
    return MappingProxyType(dict(data or {}))


# --------------------------------------------------------------------------- the node


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One device a device plugin advertises.

    ``numa`` is the sorted tuple of NUMA nodes the device is attached to, or None when
    the plugin reports no topology.
    """

    resource: str
    id: str
    numa: tuple[int, ...] | None = None
    healthy: bool = True


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """The simulated node: CPUs per NUMA node, policies, memory and devices.

    ``memory`` maps a memory type (``memory``, ``hugepages-2Mi``, ``hugepages-1Gi``)
    to its allocatable bytes on each NUMA node, indexed by node id.
    """

    numa_cpus: tuple[tuple[int, ...], ...]
    name: str = "sim-node"
    reserved_cpus: tuple[int, ...] = ()
    offline_cpus: tuple[int, ...] = ()
    cpu_policy: CpuPolicy = "static"
    memory_policy: MemoryPolicy = "none"
    memory: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: MappingProxyType({}))
    devices: tuple[DeviceSpec, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "memory", MappingProxyType(dict(self.memory)))
        _validate_node(self, "<python>", "node")

    @classmethod
    def uniform(
        cls,
        numa_nodes: int = 1,
        cpus_per_numa_node: int = 4,
        *,
        name: str = "sim-node",
        reserved_cpus: Iterable[int] = (),
        offline_cpus: Iterable[int] = (),
        cpu_policy: CpuPolicy = "static",
        memory_policy: MemoryPolicy = "none",
        memory: Mapping[str, int | str] | None = None,
        devices: Iterable[DeviceSpec] = (),
    ) -> NodeSpec:
        """A node whose NUMA node N holds CPUs ``N*k .. N*k+k-1``, with the same memory on
        every NUMA node (``memory`` maps a type to a quantity)."""
        numa_cpus = tuple(
            tuple(range(n * cpus_per_numa_node, (n + 1) * cpus_per_numa_node))
            for n in range(numa_nodes)
        )
        mem = {t: (parse_bytes(q),) * numa_nodes for t, q in (memory or {}).items()}
        return cls(
            numa_cpus=numa_cpus,
            name=name,
            reserved_cpus=tuple(sorted(set(reserved_cpus))),
            offline_cpus=tuple(sorted(set(offline_cpus))),
            cpu_policy=cpu_policy,
            memory_policy=memory_policy,
            memory=mem,
            devices=tuple(devices),
        )

    @property
    def numa_nodes(self) -> int:
        """How many NUMA nodes the node has."""
        return len(self.numa_cpus)

    @property
    def cpus(self) -> tuple[int, ...]:
        """Every CPU of the node (online or not), sorted."""
        return tuple(sorted(c for cpus in self.numa_cpus for c in cpus))

    @property
    def online_cpus(self) -> tuple[int, ...]:
        """The CPUs that are online, sorted."""
        offline = set(self.offline_cpus)
        return tuple(c for c in self.cpus if c not in offline)

    @property
    def cpu_to_numa(self) -> Mapping[int, int]:
        """The NUMA node of every CPU."""
        return MappingProxyType({c: n for n, cpus in enumerate(self.numa_cpus) for c in cpus})

    @property
    def allocatable_cpus(self) -> tuple[int, ...]:
        """What GetAllocatableResources reports: online CPUs minus reserved under the
        static policy; nothing under ``none``."""
        if self.cpu_policy == "none":
            return ()
        reserved = set(self.reserved_cpus)
        return tuple(c for c in self.online_cpus if c not in reserved)

    def devices_of(self, resource: str) -> tuple[DeviceSpec, ...]:
        """The devices of one resource, in scenario order."""
        return tuple(d for d in self.devices if d.resource == resource)

    @property
    def resources(self) -> tuple[str, ...]:
        """The device resource names, in order of first appearance."""
        return tuple(dict.fromkeys(d.resource for d in self.devices))


def _validate_node(node: NodeSpec, source: str, key: str) -> None:
    if not node.numa_cpus:
        raise ScenarioError(source, f"{key}.numa_nodes", "a node needs at least one NUMA node")
    seen: dict[int, int] = {}
    for n, cpus in enumerate(node.numa_cpus):
        if not cpus:
            raise ScenarioError(source, f"{key}.numa_cpus[{n}]", "NUMA node has no CPUs")
        for c in cpus:
            if c in seen:
                raise ScenarioError(
                    source, f"{key}.numa_cpus[{n}]", f"CPU {c} is also on NUMA node {seen[c]}"
                )
            seen[c] = n
    for name in ("reserved_cpus", "offline_cpus"):
        unknown = sorted(set(getattr(node, name)) - set(seen))
        if unknown:
            raise ScenarioError(source, f"{key}.{name}", f"CPUs not on the node: {unknown}")
    if node.cpu_policy not in get_args(CpuPolicy):
        raise ScenarioError(
            source, f"{key}.cpu_policy", f"expected static|none, got {node.cpu_policy!r}"
        )
    if node.memory_policy not in get_args(MemoryPolicy):
        raise ScenarioError(
            source, f"{key}.memory_policy", f"expected static|none, got {node.memory_policy!r}"
        )
    for mtype, sizes in node.memory.items():
        if mtype != MEMORY_TYPE and not _HUGEPAGES.match(mtype):
            raise ScenarioError(
                source, f"{key}.memory.{mtype}", "memory types are memory or hugepages-<size>"
            )
        if len(sizes) != node.numa_nodes:
            raise ScenarioError(
                source,
                f"{key}.memory.{mtype}",
                f"expected one size per NUMA node ({node.numa_nodes}), got {len(sizes)}",
            )
    ids: set[tuple[str, str]] = set()
    for i, dev in enumerate(node.devices):
        where = f"{key}.devices[{i}]"
        if not dev.resource or "/" not in dev.resource:
            raise ScenarioError(
                source, f"{where}.resource", f"expected domain/name, got {dev.resource!r}"
            )
        if not dev.id:
            raise ScenarioError(source, f"{where}.id", "empty device id")
        if (dev.resource, dev.id) in ids:
            raise ScenarioError(
                source, f"{where}.id", f"duplicate device {dev.id!r} of {dev.resource}"
            )
        ids.add((dev.resource, dev.id))
        if dev.numa is not None:
            if not dev.numa or list(dev.numa) != sorted(set(dev.numa)):
                raise ScenarioError(source, f"{where}.numa", "expected sorted, unique NUMA ids")
            bad = [n for n in dev.numa if not 0 <= n < node.numa_nodes]
            if bad:
                raise ScenarioError(source, f"{where}.numa", f"no such NUMA node: {bad}")


# --------------------------------------------------------------------------- pods


# One device of a DRA claim, as ``ClaimResource`` reports it: the exporter's own model.
ClaimDeviceSpec = ClaimDevice


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """A DRA resource claim a container uses. ``{pod}`` in the name is replaced by the
    pod's name; ``namespace`` None means the pod's namespace."""

    name: str
    devices: tuple[ClaimDeviceSpec, ...] = ()
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """One container: its requests (equal to its limits) in canonical units."""

    name: str
    kind: ContainerKind = "app"
    cpu_m: int = 0
    memory: int = 0
    hugepages: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    devices: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    claims: tuple[ClaimSpec, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "hugepages", _frozen_map(self.hugepages))
        object.__setattr__(self, "devices", _frozen_map(self.devices))

    @classmethod
    def of(
        cls,
        name: str,
        *,
        cpu: int | float | str = 0,
        memory: int | str = 0,
        hugepages: Mapping[str, int | str] | None = None,
        devices: Mapping[str, int] | None = None,
        kind: ContainerKind = "app",
        claims: Iterable[ClaimSpec] = (),
    ) -> ContainerSpec:
        """Build a container from Kubernetes quantities (``cpu=2``, ``memory="4Gi"``,
        ``hugepages={"hugepages-1Gi": "2Gi"}``)."""
        return cls(
            name=name,
            kind=kind,
            cpu_m=parse_millicpu(cpu),
            memory=parse_bytes(memory),
            hugepages={t: parse_bytes(q) for t, q in (hugepages or {}).items()},
            devices=dict(devices or {}),
            claims=tuple(claims),
        )

    @property
    def listed(self) -> bool:
        """Whether List shows the container (ordinary init containers never appear)."""
        return self.kind != "init"

    def memory_requests(self) -> dict[str, int]:
        """What the memory manager pins for the container: type -> bytes."""
        out = {MEMORY_TYPE: self.memory} if self.memory else {}
        out.update({t: b for t, b in self.hugepages.items() if b})
        return out

    def exclusive_cpus(self, qos: QoS, cpu_policy: CpuPolicy) -> int:
        """How many exclusive CPUs the static CPU manager gives the container: its
        whole-number CPU request in a Guaranteed pod, else 0."""
        if cpu_policy != "static" or qos != "Guaranteed" or self.kind == "init":
            return 0
        if self.cpu_m <= 0 or self.cpu_m % 1000:
            return 0
        return self.cpu_m // 1000


@dataclass(frozen=True, slots=True)
class PodSpec:
    """A pod template: ``replicas`` pods are admitted, named according to ``naming``.

    ``exact``: the name as is (one replica); ``deployment``: ``name-<hash>-<xxxxx>``;
    ``generated`` (DaemonSet, Job): ``name-<xxxxx>``; ``statefulset``: ``name-<ordinal>``;
    ``static``: ``name-<node name>``. ``churn`` lets ``Node.step`` replace its pods.
    """

    namespace: str
    name: str
    containers: tuple[ContainerSpec, ...] = ()
    replicas: int = 1
    naming: Naming = "exact"
    churn: bool = False
    qos: QoS | None = None

    @classmethod
    def of(
        cls,
        namespace: str,
        name: str,
        *containers: ContainerSpec,
        replicas: int = 1,
        naming: Naming | None = None,
        churn: bool = False,
        qos: QoS | None = None,
    ) -> PodSpec:
        """Build a pod template; ``naming`` defaults to ``deployment`` when there are
        several replicas or churn, else ``exact``."""
        if naming is None:
            naming = "deployment" if replicas > 1 or churn else "exact"
        return cls(namespace, name, tuple(containers), replicas, naming, churn, qos)

    @property
    def effective_qos(self) -> QoS:
        """The pod's QoS class: explicit, or derived from the containers' requests."""
        if self.qos is not None:
            return self.qos
        if not self.containers:
            return "BestEffort"
        if all(c.cpu_m > 0 and c.memory > 0 for c in self.containers):
            return "Guaranteed"
        if any(c.cpu_m > 0 or c.memory > 0 or c.hugepages for c in self.containers):
            return "Burstable"
        return "BestEffort"

    @property
    def listed_containers(self) -> tuple[ContainerSpec, ...]:
        """The containers List shows, in the kubelet's order: restartable sidecars first,
        then app containers, each in spec order."""
        sidecars = tuple(c for c in self.containers if c.kind == "sidecar")
        return sidecars + tuple(c for c in self.containers if c.kind == "app")


# --------------------------------------------------------------------------- scenario


@dataclass(frozen=True, slots=True)
class KubeletBehaviour:
    """The simulated kubelet's behaviour knobs (see ``SimKubelet.set_behaviour``)."""

    api: ApiMode = "v1"
    get_allocatable: RpcMode = "served"
    get: RpcMode = "served"
    rate_limit: bool = False
    device_grouping: DeviceGrouping = "per_device"
    list_rejected: bool = True

    def __post_init__(self) -> None:
        for name, allowed in (
            ("api", ApiMode),
            ("get_allocatable", RpcMode),
            ("get", RpcMode),
            ("device_grouping", DeviceGrouping),
        ):
            value = getattr(self, name)
            if value not in get_args(allowed):
                choices = "|".join(get_args(allowed))
                raise ValueError(f"kubelet.{name}: expected {choices}, got {value!r}")
        for name in ("rate_limit", "list_rejected"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"kubelet.{name}: expected true or false")


@dataclass(frozen=True, slots=True)
class DevicePluginsSpec:
    """Resources whose devices come from device plugins registered with the simulated
    kubelet's device manager (``sim.devicemanager``), not from ``node.devices``.

    ``directory`` is the device-plugins directory (the plugins' sockets and the
    manager's ``kubelet.sock``); a relative one is relative to the directory of the
    pod-resources socket. ``resource_grace_s``: how long a resource whose plugin went
    away is kept, all devices unhealthy (5 minutes on a kubelet). ``retry_pending``: a
    pod rejected for want of a plugin resource is admitted again whenever that
    resource's allocatable count grows, e.g. when its plugin registers (a real kubelet
    never does that; a controller would create a new pod).
    """

    resources: tuple[str, ...] = ()
    directory: str = "device-plugins"
    resource_grace_s: float = 300.0
    retry_pending: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", tuple(self.resources))
        seen: set[str] = set()
        for r in self.resources:
            if not isinstance(r, str):
                raise ValueError(f"device_plugins.resources: expected strings, got {r!r}")
            problem = extended_resource_problem(r)
            if problem is not None:
                raise ValueError(
                    f"device_plugins.resources: {r!r} is not an extended resource name: {problem}"
                )
            if r in seen:
                raise ValueError(f"device_plugins.resources: {r!r} is listed twice")
            seen.add(r)
        if not isinstance(self.directory, str) or not self.directory:
            raise ValueError("device_plugins.directory: expected a non-empty path")
        grace = self.resource_grace_s
        if isinstance(grace, bool) or not isinstance(grace, int | float) or grace < 0:
            raise ValueError(
                f"device_plugins.resource_grace_s: expected seconds >= 0, got {grace!r}"
            )
        if not isinstance(self.retry_pending, bool):
            raise ValueError("device_plugins.retry_pending: expected true or false")


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole simulated node: hardware, kubelet behaviour, pods and churn."""

    node: NodeSpec
    pods: tuple[PodSpec, ...] = ()
    kubelet: KubeletBehaviour = field(default_factory=KubeletBehaviour)
    seed: int = 0
    churn_interval_s: float = 0.0
    name: str = "scenario"
    description: str = ""
    source: str = "<python>"
    device_plugins: DevicePluginsSpec | None = None

    def __post_init__(self) -> None:
        _validate_pods(self, self.source)

    @property
    def plugin_resources(self) -> tuple[str, ...]:
        """The resources whose devices come from device plugins (``[device_plugins]``)."""
        return self.device_plugins.resources if self.device_plugins else ()

    # ---- loaders

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """Load a scenario from a TOML file; raise ScenarioError naming the file and key."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ScenarioError(str(p), "", f"cannot read: {exc.strerror or exc}") from exc
        return cls.loads(text, source=str(p), default_name=p.stem)

    @classmethod
    def loads(
        cls, text: str, *, source: str = "<string>", default_name: str = "scenario"
    ) -> Scenario:
        """Load a scenario from TOML text; ``source`` names it in error messages."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ScenarioError(source, "", f"invalid TOML: {exc}") from exc
        return cls.from_dict(data, source=source, default_name=default_name)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, source: str = "<dict>", default_name: str = "scenario"
    ) -> Scenario:
        """Build a scenario from parsed TOML data (see the module docstring for the schema)."""
        return _Parser(source).scenario(data, default_name)

    @classmethod
    def synthetic(
        cls,
        pods: int = 20000,
        *,
        devices_per_pod: int = 2,
        sidecars: int = 2,
        numa_nodes: int = 2,
        cpus_per_numa_node: int = 64,
        resource: str = "example.com/synthetic-accelerator",
        exclusive_every: int = 0,
        seed: int = 0,
        kubelet: KubeletBehaviour | None = None,
    ) -> Scenario:
        """A big node for load and size tests.

        ``pods`` pods, each with an app container holding ``devices_per_pod`` devices
        of ``resource`` (the node has exactly enough, spread over the NUMA nodes, with
        GPU-UUID-like ids) and ``sidecars`` shared-pool containers. With
        ``exclusive_every`` N > 0, every Nth pod is Guaranteed and asks one exclusive
        CPU. With the defaults, 20000 pods make a List response of about 5 MiB, over a
        client's default 4 MiB receive limit.
        """
        total = pods * devices_per_pod
        devices = tuple(
            DeviceSpec(resource, _synthetic_uuid(i), (i % numa_nodes,)) for i in range(total)
        )
        node = NodeSpec.uniform(
            numa_nodes,
            cpus_per_numa_node,
            name="synthetic-node",
            reserved_cpus=(0,),
            devices=devices,
        )
        helpers = tuple(
            ContainerSpec.of(f"sidecar-proxy-{k}", cpu="100m", memory="64Mi", kind="app")
            for k in range(sidecars)
        )
        want = {resource: devices_per_pod} if devices_per_pod else {}
        pinned = pods // exclusive_every if exclusive_every else 0
        specs = [
            PodSpec.of(
                "synthetic-load",
                "inference-fleet",
                ContainerSpec.of("inference-server", cpu="500m", devices=want),
                *helpers,
                replicas=pods - pinned,
                naming="deployment",
            )
        ]
        if pinned:
            specs.append(
                PodSpec.of(
                    "synthetic-load",
                    "pinned-fleet",
                    ContainerSpec.of("inference-server", cpu=1, memory="1Gi", devices=want),
                    *helpers,
                    replicas=pinned,
                    naming="deployment",
                    qos="Guaranteed",
                )
            )
        return cls(
            node=node,
            pods=tuple(s for s in specs if s.replicas > 0),
            kubelet=kubelet or KubeletBehaviour(),
            seed=seed,
            name=f"synthetic-{pods}",
            description=f"{pods} synthetic pods",
        )

    @property
    def pod_count(self) -> int:
        """How many pods the scenario admits (replicas included)."""
        return sum(p.replicas for p in self.pods)


def _synthetic_uuid(i: int) -> str:
    h = hashlib.blake2b(i.to_bytes(8, "big"), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _validate_pods(scenario: Scenario, source: str) -> None:
    node = scenario.node
    if scenario.churn_interval_s < 0:
        raise ScenarioError(source, "churn.interval_s", "must not be negative")
    both = sorted(set(scenario.plugin_resources) & set(node.resources))
    if both:
        raise ScenarioError(
            source, "device_plugins.resources", f"also in node.devices: {', '.join(both)}"
        )
    exact: set[tuple[str, str]] = set()
    for i, pod in enumerate(scenario.pods):
        where = f"pods[{i}]"
        if not pod.namespace:
            raise ScenarioError(source, f"{where}.namespace", "empty namespace")
        if not pod.name:
            raise ScenarioError(source, f"{where}.name", "empty name")
        if pod.replicas < 1:
            raise ScenarioError(source, f"{where}.replicas", "must be at least 1")
        if pod.naming not in get_args(Naming):
            raise ScenarioError(source, f"{where}.naming", f"unknown naming {pod.naming!r}")
        if pod.naming in ("exact", "static") and pod.replicas != 1:
            raise ScenarioError(
                source, f"{where}.replicas", f"naming {pod.naming!r} allows one replica only"
            )
        if pod.qos is not None and pod.qos not in get_args(QoS):
            raise ScenarioError(source, f"{where}.qos", f"unknown QoS class {pod.qos!r}")
        if pod.naming in ("exact", "static"):
            name = pod.name if pod.naming == "exact" else f"{pod.name}-{node.name}"
            if (pod.namespace, name) in exact:
                raise ScenarioError(
                    source, f"{where}.name", f"duplicate pod {pod.namespace}/{name}"
                )
            exact.add((pod.namespace, name))
        names: set[str] = set()
        for j, c in enumerate(pod.containers):
            cw = f"{where}.containers[{j}]"
            if not c.name:
                raise ScenarioError(source, f"{cw}.name", "empty container name")
            if c.name in names:
                raise ScenarioError(source, f"{cw}.name", f"duplicate container {c.name!r}")
            names.add(c.name)
            if c.kind not in get_args(ContainerKind):
                raise ScenarioError(source, f"{cw}.kind", f"unknown kind {c.kind!r}")
            if c.cpu_m < 0 or c.memory < 0:
                raise ScenarioError(source, cw, "negative request")
            for mtype in c.hugepages:
                if not _HUGEPAGES.match(mtype):
                    raise ScenarioError(source, f"{cw}.{mtype}", "expected hugepages-<size>")
            for res, count in c.devices.items():
                if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                    raise ScenarioError(source, f"{cw}.devices.{res}", "expected a device count")
                if "/" not in res:
                    raise ScenarioError(source, f"{cw}.devices.{res}", "expected domain/name")


# --------------------------------------------------------------------------- TOML parsing

_TOP_KEYS = {"name", "description", "seed", "kubelet", "churn", "device_plugins", "node", "pods"}
_NODE_KEYS = {
    "name",
    "numa_nodes",
    "cpus_per_numa_node",
    "numa_cpus",
    "reserved_cpus",
    "offline_cpus",
    "cpu_policy",
    "memory_policy",
    "memory",
    "devices",
}
_DEVICE_KEYS = {"resource", "id", "ids", "numa", "healthy"}
_POD_KEYS = {"namespace", "name", "replicas", "naming", "churn", "qos", "containers"}
_CONTAINER_KEYS = {"name", "kind", "cpu", "memory", "devices", "claims"}
_CLAIM_KEYS = {
    "name",
    "namespace",
    "devices",
    "driver",
    "pool",
    "device",
    "cdi_devices",
    "share_id",
}
_CLAIM_DEVICE_KEYS = {"driver", "pool", "device", "cdi_devices", "share_id"}


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, problem: str) -> ScenarioError:
        return ScenarioError(self.source, key, problem)

    def table(self, value: object, key: str, allowed: set[str] | None) -> Mapping[str, Any]:
        """Check that ``value`` is a table whose keys are all in ``allowed`` (None: any)."""
        if not isinstance(value, Mapping):
            raise self.fail(key, f"expected a table, got {type(value).__name__}")
        for k in value:
            if allowed is not None and k not in allowed:
                raise self.fail(f"{key}.{k}" if key else k, "unknown key")
        return cast("Mapping[str, Any]", value)

    def string(
        self, data: Mapping[str, Any], key: str, where: str, default: str | None = None
    ) -> str:
        value = data.get(key, default)
        if value is None:
            raise self.fail(f"{where}.{key}" if where else key, "required key is missing")
        if not isinstance(value, str):
            raise self.fail(f"{where}.{key}" if where else key, f"expected a string, got {value!r}")
        return value

    def integer(self, data: Mapping[str, Any], key: str, where: str, default: int) -> int:
        value = data.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(
                f"{where}.{key}" if where else key, f"expected an integer, got {value!r}"
            )
        return value

    def boolean(self, data: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(
                f"{where}.{key}" if where else key, f"expected true or false, got {value!r}"
            )
        return value

    def choice(
        self, data: Mapping[str, Any], key: str, where: str, default: str, allowed: object
    ) -> Any:
        value = self.string(data, key, where, default)
        choices = get_args(allowed)
        if value not in choices:
            raise self.fail(f"{where}.{key}", f"expected {'|'.join(choices)}, got {value!r}")
        return value

    def guarded(self, key: str, fn: Any, value: object) -> Any:
        try:
            return fn(value)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from exc

    # ---- sections

    def scenario(self, data: Mapping[str, Any], default_name: str) -> Scenario:
        data = self.table(data, "", _TOP_KEYS)
        if "node" not in data:
            raise self.fail("node", "required table is missing")
        kubelet = self.kubelet(data.get("kubelet", {}))
        churn = self.table(data.get("churn", {}), "churn", {"interval_s"})
        interval = churn.get("interval_s", 0.0)
        if isinstance(interval, bool) or not isinstance(interval, int | float) or interval < 0:
            raise self.fail("churn.interval_s", f"expected seconds >= 0, got {interval!r}")
        node = self.node(data["node"])
        pods_data = data.get("pods", [])
        if not isinstance(pods_data, list):
            raise self.fail("pods", "expected an array of tables ([[pods]])")
        pods = tuple(self.pod(p, f"pods[{i}]") for i, p in enumerate(pods_data))
        return Scenario(
            node=node,
            pods=pods,
            kubelet=kubelet,
            seed=self.integer(data, "seed", "", 0),
            churn_interval_s=float(interval),
            name=self.string(data, "name", "", default_name),
            description=self.string(data, "description", "", ""),
            source=self.source,
            device_plugins=(
                self.device_plugins(data["device_plugins"]) if "device_plugins" in data else None
            ),
        )

    def device_plugins(self, value: object) -> DevicePluginsSpec:
        fields = set(DevicePluginsSpec.__dataclass_fields__)
        data = dict(self.table(value, "device_plugins", fields))
        resources = data.get("resources", [])
        if not isinstance(resources, list):
            raise self.fail("device_plugins.resources", "expected an array of resource names")
        data["resources"] = tuple(resources)
        try:
            return DevicePluginsSpec(**data)
        except ValueError as exc:
            key, _, problem = str(exc).partition(": ")
            raise self.fail(key, problem) from exc

    def kubelet(self, value: object) -> KubeletBehaviour:
        fields = set(KubeletBehaviour.__dataclass_fields__)
        data = self.table(value, "kubelet", fields)
        try:
            return KubeletBehaviour(**data)
        except (TypeError, ValueError) as exc:
            text = str(exc)
            key = text.split(":", 1)[0] if text.startswith("kubelet.") else "kubelet"
            raise self.fail(key, text.split(": ", 1)[-1]) from exc

    def node(self, value: object) -> NodeSpec:
        data = self.table(value, "node", _NODE_KEYS)
        if "numa_cpus" in data:
            if "cpus_per_numa_node" in data or "numa_nodes" in data:
                raise self.fail("node.numa_cpus", "give numa_cpus OR numa_nodes/cpus_per_numa_node")
            raw = data["numa_cpus"]
            if not isinstance(raw, list) or not raw:
                raise self.fail(
                    "node.numa_cpus", "expected an array with one CPU list per NUMA node"
                )
            numa_cpus = tuple(
                self.guarded(f"node.numa_cpus[{i}]", parse_cpu_list, v) for i, v in enumerate(raw)
            )
        else:
            n = self.integer(data, "numa_nodes", "node", 1)
            if n < 1:
                raise self.fail("node.numa_nodes", "must be at least 1")
            if "cpus_per_numa_node" not in data:
                raise self.fail("node.cpus_per_numa_node", "required key is missing")
            k = self.integer(data, "cpus_per_numa_node", "node", 0)
            if k < 1:
                raise self.fail("node.cpus_per_numa_node", "must be at least 1")
            numa_cpus = tuple(tuple(range(i * k, (i + 1) * k)) for i in range(n))
        numa_nodes = len(numa_cpus)
        memory: dict[str, tuple[int, ...]] = {}
        for mtype, q in self.table(data.get("memory", {}), "node.memory", None).items():
            key = f"node.memory.{mtype}"
            if isinstance(q, list):
                memory[mtype] = tuple(
                    self.guarded(f"{key}[{i}]", parse_bytes, v) for i, v in enumerate(q)
                )
            else:
                memory[mtype] = (self.guarded(key, parse_bytes, q),) * numa_nodes
        devices_data = data.get("devices", [])
        if not isinstance(devices_data, list):
            raise self.fail("node.devices", "expected an array of tables ([[node.devices]])")
        devices: list[DeviceSpec] = []
        seen: set[tuple[str, str]] = set()
        for i, d in enumerate(devices_data):
            where = f"node.devices[{i}]"
            for dev in self.devices(d, where, numa_nodes):
                if (dev.resource, dev.id) in seen:
                    key = f"{where}.{'ids' if 'ids' in d else 'id'}"
                    raise self.fail(key, f"duplicate device {dev.id!r} of {dev.resource}")
                seen.add((dev.resource, dev.id))
                devices.append(dev)
        try:
            return NodeSpec(
                numa_cpus=numa_cpus,
                name=self.string(data, "name", "node", "sim-node"),
                reserved_cpus=self.guarded(
                    "node.reserved_cpus", parse_cpu_list, data.get("reserved_cpus", [])
                ),
                offline_cpus=self.guarded(
                    "node.offline_cpus", parse_cpu_list, data.get("offline_cpus", [])
                ),
                cpu_policy=self.choice(data, "cpu_policy", "node", "static", CpuPolicy),
                memory_policy=self.choice(data, "memory_policy", "node", "none", MemoryPolicy),
                memory=memory,
                devices=tuple(devices),
            )
        except ScenarioError as exc:
            if exc.source != "<python>":
                raise
            raise self.fail(exc.key, exc.problem) from None

    def devices(self, value: object, where: str, numa_nodes: int) -> list[DeviceSpec]:
        data = self.table(value, where, _DEVICE_KEYS)
        resource = self.string(data, "resource", where)
        if "/" not in resource:
            raise self.fail(f"{where}.resource", f"expected domain/name, got {resource!r}")
        if ("id" in data) == ("ids" in data):
            raise self.fail(f"{where}.id", "give exactly one of id or ids")
        ids = data.get("ids", [data.get("id")])
        if not isinstance(ids, list) or not all(isinstance(x, str) and x for x in ids):
            raise self.fail(f"{where}.ids", "expected non-empty device id strings")
        numa: tuple[int, ...] | None = None
        if "numa" in data:
            raw = data["numa"]
            items = raw if isinstance(raw, list) else [raw]
            if not items or not all(isinstance(x, int) and not isinstance(x, bool) for x in items):
                raise self.fail(
                    f"{where}.numa", f"expected a NUMA node id or an array of them, got {raw!r}"
                )
            numa = tuple(sorted(set(items)))
            bad = [n for n in numa if not 0 <= n < numa_nodes]
            if bad:
                raise self.fail(f"{where}.numa", f"no such NUMA node: {bad}")
        healthy = self.boolean(data, "healthy", where, True)
        return [DeviceSpec(resource, i, numa, healthy) for i in ids]

    def pod(self, value: object, where: str) -> PodSpec:
        data = self.table(value, where, _POD_KEYS)
        replicas = self.integer(data, "replicas", where, 1)
        churn = self.boolean(data, "churn", where, False)
        default_naming = "deployment" if replicas > 1 or churn else "exact"
        naming = self.choice(data, "naming", where, default_naming, Naming)
        qos = self.choice(data, "qos", where, "", QoS) if "qos" in data else None
        containers_data = data.get("containers", [])
        if not isinstance(containers_data, list):
            raise self.fail(f"{where}.containers", "expected an array of tables")
        containers = tuple(
            self.container(c, f"{where}.containers[{j}]") for j, c in enumerate(containers_data)
        )
        return PodSpec(
            namespace=self.string(data, "namespace", where),
            name=self.string(data, "name", where),
            containers=containers,
            replicas=replicas,
            naming=naming,
            churn=churn,
            qos=qos,
        )

    def container(self, value: object, where: str) -> ContainerSpec:
        if isinstance(value, Mapping):
            extra = [k for k in value if k not in _CONTAINER_KEYS and not _HUGEPAGES.match(str(k))]
            if extra:
                raise self.fail(f"{where}.{extra[0]}", "unknown key")
        data = self.table(value, where, None)
        devices_raw = self.table(data.get("devices", {}), f"{where}.devices", None)
        devices: dict[str, int] = {}
        for res, count in devices_raw.items():
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise self.fail(f"{where}.devices.{res}", f"expected a device count, got {count!r}")
            devices[res] = count
        claims_data = data.get("claims", [])
        if not isinstance(claims_data, list):
            raise self.fail(f"{where}.claims", "expected an array of tables")
        return ContainerSpec(
            name=self.string(data, "name", where),
            kind=self.choice(data, "kind", where, "app", ContainerKind),
            cpu_m=self.guarded(f"{where}.cpu", parse_millicpu, data.get("cpu", 0)),
            memory=self.guarded(f"{where}.memory", parse_bytes, data.get("memory", 0)),
            hugepages={
                k: self.guarded(f"{where}.{k}", parse_bytes, v)
                for k, v in data.items()
                if _HUGEPAGES.match(k)
            },
            devices=devices,
            claims=tuple(self.claim(c, f"{where}.claims[{k}]") for k, c in enumerate(claims_data)),
        )

    def claim(self, value: object, where: str) -> ClaimSpec:
        data = self.table(value, where, _CLAIM_KEYS)
        inline = {k: v for k, v in data.items() if k in _CLAIM_DEVICE_KEYS}
        if inline and "devices" in data:
            raise self.fail(f"{where}.devices", "give devices OR one inline driver/pool/device")
        raw_devices = data.get("devices", [inline] if inline else [])
        if not isinstance(raw_devices, list):
            raise self.fail(f"{where}.devices", "expected an array of tables")
        devices = tuple(
            self.claim_device(d, f"{where}.devices[{i}]" if "devices" in data else where)
            for i, d in enumerate(raw_devices)
        )
        namespace = data.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise self.fail(f"{where}.namespace", f"expected a string, got {namespace!r}")
        return ClaimSpec(
            name=self.string(data, "name", where), devices=devices, namespace=namespace
        )

    def claim_device(self, value: object, where: str) -> ClaimDeviceSpec:
        data = self.table(value, where, _CLAIM_DEVICE_KEYS)
        cdi = data.get("cdi_devices", [])
        if not isinstance(cdi, list) or not all(isinstance(x, str) and "=" in x for x in cdi):
            raise self.fail(
                f"{where}.cdi_devices", "expected CDI names such as vendor.com/class=name"
            )
        share = data.get("share_id")
        if share is not None and not isinstance(share, str):
            raise self.fail(f"{where}.share_id", f"expected a string, got {share!r}")
        return ClaimDeviceSpec(
            driver=self.string(data, "driver", where),
            pool=self.string(data, "pool", where),
            device=self.string(data, "device", where),
            cdi_devices=tuple(cdi),
            share_id=share,
        )


# --------------------------------------------------------------------------- built-ins


def _builtin_root() -> Any:
    return resources.files("podres_exporter.sim").joinpath("scenarios")


def builtin_names() -> tuple[str, ...]:
    """The names of the scenarios shipped with the package (``demo``, ``minimal`` ...)."""
    root = _builtin_root()
    return tuple(sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml")))


def load_builtin(name: str) -> Scenario:
    """Load a shipped scenario by name (``"demo"`` -> ``sim/scenarios/demo.toml``)."""
    if name not in builtin_names():
        raise ScenarioError(
            f"{name}.toml", "", f"no built-in scenario {name!r}; have {', '.join(builtin_names())}"
        )
    res = _builtin_root().joinpath(f"{name}.toml")
    return Scenario.loads(res.read_text(encoding="utf-8"), source=f"{name}.toml", default_name=name)
