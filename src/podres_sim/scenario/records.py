"""The scenario schema: the simulated node, the kubelet's behaviour, the pods.

A scenario is plain, frozen data. It comes from a TOML file (``scenario.parse``), from
one of the files the package ships (``scenario.builtin``), from the generators of big
nodes (``scenario.synthetic``), or from Python (the dataclasses below and their
``of``/``uniform`` helpers). Building one validates it (``scenario.check``). Nothing
here allocates anything: ``kubelet.node.Node`` admits the pods.

Requests are requests equal to limits: a container with ``cpu`` and ``memory`` in a
pod whose every container has both is Guaranteed; under the static CPU policy its
integer CPUs are exclusive.

A pod asking for a ``device_plugins`` resource is admitted through the simulated
kubelet's device manager (GetPreferredAllocation and Allocate over gRPC to the plugin
that registered it); until a plugin has registered it, such pods are rejected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podres_exporter.core.kube import parse_bytes, parse_millicpu
from podres_exporter.core.model import ClaimDevice
from podres_sim.scenario.check import (
    check_device_plugins,
    check_kubelet,
    check_node,
    check_scenario,
)
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
    TopologyPolicyName,
    TopologyScope,
)

__all__ = [
    "ClaimDeviceSpec",
    "ClaimSpec",
    "ContainerSpec",
    "DevicePluginsSpec",
    "DeviceSpec",
    "KubeletBehaviour",
    "NodeSpec",
    "PodSpec",
    "Scenario",
]


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

    ``topology_policy`` / ``topology_scope``: the kubelet's Topology Manager; set, the
    node admits every pod through ``podres_exporter.core.topology`` (the kubelet's NUMA
    admission, refusing with ``TopologyAffinityError``); None keeps the simple allocator
    (first NUMA node that holds the container, else spill).
    """

    numa_cpus: tuple[tuple[int, ...], ...]
    name: str = "sim-node"
    reserved_cpus: tuple[int, ...] = ()
    offline_cpus: tuple[int, ...] = ()
    cpu_policy: CpuPolicy = "static"
    memory_policy: MemoryPolicy = "none"
    memory: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: MappingProxyType({}))
    devices: tuple[DeviceSpec, ...] = ()
    # SMT threads per physical core: a core is that many consecutive CPUs of a NUMA node's
    # list (the host's thread_siblings_list).
    threads_per_core: int = 1
    topology_policy: TopologyPolicyName | None = None
    topology_scope: TopologyScope = "container"

    def __post_init__(self) -> None:
        object.__setattr__(self, "memory", MappingProxyType(dict(self.memory)))
        check_node(self, "<python>", "node")

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
        topology_policy: TopologyPolicyName | None = None,
        topology_scope: TopologyScope = "container",
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
            topology_policy=topology_policy,
            topology_scope=topology_scope,
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

    ``cpu_m`` and ``memory``: pod-level resources (``spec.resources``; Topology Manager
    scope ``pod``): a Guaranteed pod's whole-number pod-level CPUs are its exclusive
    budget, holding its exclusive containers' CPUs and its private shared pool.
    ``finished``: the pod ran and finished (a completed Job); its resources are given
    back at once, but a kubelet before 1.34 still lists it with them (see
    ``KubeletBehaviour.list_active_only``).

    ``labels`` and ``owner`` are what the kubelet's Pods API shows of it: its labels (the
    controllers' own, such as ``pod-template-hash``, are added), and the kind of its
    controlling owner: "" derives it from ``naming`` (``deployment``: the ReplicaSet
    ``name-<hash>``; ``statefulset``: StatefulSet; ``generated``: DaemonSet; ``static``:
    the Node; ``exact``: none), ``"none"`` is a bare pod, any other kind (``Job``) is
    owned by that kind named ``name``.
    """

    namespace: str
    name: str
    containers: tuple[ContainerSpec, ...] = ()
    replicas: int = 1
    naming: Naming = "exact"
    churn: bool = False
    qos: QoS | None = None
    cpu_m: int = 0
    memory: int = 0
    finished: bool = False
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    owner: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))

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
        cpu: int | float | str = 0,
        memory: int | str = 0,
        finished: bool = False,
        labels: Mapping[str, str] | None = None,
        owner: str = "",
    ) -> PodSpec:
        """Build a pod template; ``naming`` defaults to ``deployment`` when there are
        several replicas or churn, else ``exact``. ``cpu`` and ``memory``: pod-level
        resources, as Kubernetes quantities."""
        if naming is None:
            naming = "deployment" if replicas > 1 or churn else "exact"
        return cls(
            namespace,
            name,
            tuple(containers),
            replicas,
            naming,
            churn,
            qos,
            parse_millicpu(cpu),
            parse_bytes(memory),
            finished,
            dict(labels or {}),
            owner,
        )

    def pod_exclusive_cpus(self, cpu_policy: CpuPolicy) -> int:
        """The pod-level exclusive CPU budget: whole pod-level CPUs of a Guaranteed pod
        under the static policy, else 0."""
        if cpu_policy != "static" or self.effective_qos != "Guaranteed":
            return 0
        if self.cpu_m <= 0 or self.cpu_m % 1000:
            return 0
        return self.cpu_m // 1000

    @property
    def effective_qos(self) -> QoS:
        """The pod's QoS class: explicit, or derived from the containers' requests."""
        if self.qos is not None:
            return self.qos
        if self.cpu_m > 0 and self.memory > 0:
            return "Guaranteed"  # pod-level requests equal to limits
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
    """The simulated kubelet's behaviour knobs (see ``SimKubelet.set_behaviour``).

    Version knobs: ``get`` (``KubeletPodResourcesGet``: off before 1.34);
    ``list_active_only`` (``KubeletPodResourcesListUseActivePods``, 1.34: List and Get
    show only active pods; off, finished pods are listed with the resources they gave
    back); ``pod_level_resources`` (``PodLevelResourceManagers``, 1.36 alpha: the
    pod-level ``cpu_ids`` and ``memory`` of pods with pod-level resources);
    ``dra_share_ids`` (1.35: a claim device's ``share_id``); ``pods_api`` (``PodsAPI``,
    KEP-4188: alpha 1.36, on by default 1.37: the Pods API on its own socket, see
    ``kubelet.podsapi``). :meth:`of_version` sets them as a kubelet of that minor version
    does by default.
    """

    api: ApiMode = "v1"
    get_allocatable: RpcMode = "served"
    get: RpcMode = "served"
    rate_limit: bool = False
    device_grouping: DeviceGrouping = "per_device"
    list_rejected: bool = True
    list_active_only: bool = True
    pod_level_resources: bool = False
    dra_share_ids: bool = True
    pods_api: bool = False

    def __post_init__(self) -> None:
        check_kubelet(self)

    @classmethod
    def of_version(
        cls, minor: int, *, pod_level_gate: bool = False, pods_api_gate: bool = False
    ) -> KubeletBehaviour:
        """The defaults of kubelet ``1.<minor>`` (1.28 to 1.37); ``pod_level_gate``
        switches ``PodLevelResourceManagers`` on (it exists from 1.36, off by default),
        ``pods_api_gate`` switches ``PodsAPI`` on in 1.36 (on by default from 1.37)."""
        if not 28 <= minor <= 37:  # noqa: PLR2004 - the versions the table covers
            raise ValueError(f"kubelet 1.{minor}: expected a minor version from 28 to 37")
        active = minor >= 34  # noqa: PLR2004 - KubeletPodResourcesListUseActivePods on
        return cls(
            get="served" if active else "disabled",
            list_active_only=active,
            list_rejected=not active,
            pod_level_resources=pod_level_gate and minor >= 36,  # noqa: PLR2004
            dra_share_ids=minor >= 35,  # noqa: PLR2004 - consumable capacity
            pods_api=minor >= 37 or (pods_api_gate and minor >= 36),  # noqa: PLR2004
        )


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
        check_device_plugins(self)


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
        check_scenario(self, self.source)

    @property
    def plugin_resources(self) -> tuple[str, ...]:
        """The resources whose devices come from device plugins (``[device_plugins]``)."""
        return self.device_plugins.resources if self.device_plugins else ()

    @property
    def pod_count(self) -> int:
        """How many pods the scenario admits (replicas included)."""
        return sum(p.replicas for p in self.pods)
