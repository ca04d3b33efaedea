"""The simulated kubelet's side of the NUMA admission: its state as the rules read it
(``podres_exporter.core.topology.NodeState``) and a scenario pod as a pod shape.

The node has no SMT (every CPU its own core) and one socket per NUMA node. Init
containers are admitted (their exclusive CPUs and devices are reusable by the app
containers, as upstream), but what they hold afterwards is given back at once: the
pod-resources API does not list init containers, so nothing outside the kubelet could
see it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from podres_exporter.core.topology import (
    Container,
    CpuInfo,
    CpuPolicy,
    DeviceInfo,
    MemoryPolicy,
    NodeState,
    NumaMemory,
    Pod,
    Policies,
    Scope,
    TopologyPolicy,
    assign,
)
from podres_sim.kubelet.devicemanager import SimDeviceManager
from podres_sim.kubelet.pods import ClaimGrant, ContainerState, PodKey, PodState
from podres_sim.kubelet.pools import AdmissionFailure, Hold, Pools
from podres_sim.scenario import ContainerSpec, DeviceSpec, NodeSpec, PodSpec

__all__ = ["PluginWant", "SimView", "admit", "node_state", "pod_shape", "policies"]

#: A listed container's plugin devices still to allocate: its index, the counts per
#: resource, and the NUMA affinity to hint (None: any).
PluginWant = tuple[int, dict[str, int], tuple[int, ...] | None]


def policies(spec: NodeSpec) -> Policies:
    """The kubelet settings the scenario names."""
    return Policies(
        topology=TopologyPolicy(spec.topology_policy or "none"),
        scope=Scope(spec.topology_scope),
        cpu=CpuPolicy(spec.cpu_policy),
        memory=MemoryPolicy.STATIC if spec.memory_policy == "static" else MemoryPolicy.NONE,
    )


def node_state(
    spec: NodeSpec,
    pools: Pools,
    plugin_devices: Sequence[DeviceSpec],
    plugin_free: Mapping[str, Iterable[str]],
    pods: Iterable[PodState],
) -> NodeState:
    """The node as the admission rules see it: every online CPU, the free allocatable
    ones, every registered device (any health; the plugins' devices given apart), the
    free healthy ones, the pinnable memory and the memory manager's NUMA groups of the
    admitted pods."""
    offline = set(spec.offline_cpus)
    cpus = tuple(
        CpuInfo(c, c, n, n) for n, ids in enumerate(spec.numa_cpus) for c in ids if c not in offline
    )
    registered: dict[str, list[DeviceInfo]] = {}
    for d in (*pools.devices, *plugin_devices):
        registered.setdefault(d.resource, []).append(
            DeviceInfo(d.id, frozenset(d.numa or ()), d.healthy)
        )
    memory = {}
    if spec.memory_policy == "static":
        memory = {
            t: {n: NumaMemory(size, pools.free_mem[t][n]) for n, size in enumerate(sizes)}
            for t, sizes in spec.memory.items()
        }
    cells: dict[int, tuple[int, ...]] = {}
    assignments: dict[int, int] = {}
    for pod in pods:
        if pod.phase != "Running":
            continue
        blocks = [g for c in pod.containers for g in c.memory] + list(pod.memory)
        for g in blocks:
            for n in g.numa:
                assignments[n] = assignments.get(n, 0) + 1
                cells[n] = tuple(g.numa)
    return NodeState(
        policies=policies(spec),
        cpus=cpus,
        free_cpus=frozenset(pools.free_cpu_ids()),
        reserved_cpus=frozenset(spec.reserved_cpus),
        devices={r: tuple(ds) for r, ds in registered.items()},
        free_devices={
            r: frozenset(ids) for r, ids in {**pools.free_device_ids(), **plugin_free}.items()
        },
        memory=memory,
        numa_nodes=tuple(range(spec.numa_nodes)),
        memory_cells=cells,
        memory_assignments=assignments,
    )


def _container(c: ContainerSpec, guaranteed: bool) -> Container:
    requests: dict[str, int] = {}
    if c.cpu_m:
        requests["cpu"] = c.cpu_m
    if c.memory:
        requests["memory"] = c.memory
    requests.update({t: b for t, b in c.hugepages.items() if b})
    requests.update({r: n for r, n in c.devices.items() if n})
    limits = dict(requests)
    if not guaranteed:
        limits.pop("cpu", None)  # requests below limits: not Guaranteed
    return Container(c.name, requests, limits)


def pod_shape(spec: PodSpec) -> Pod:
    """The pod as the kubelet sees it: init containers apart, restartable sidecars then
    app containers (the order ``List`` shows), its scenario QoS kept."""
    guaranteed = spec.effective_qos == "Guaranteed"
    return Pod(
        f"{spec.namespace}/{spec.name}",
        tuple(_container(c, guaranteed) for c in spec.listed_containers),
        tuple(_container(c, guaranteed) for c in spec.containers if c.kind == "init"),
    )


@dataclass(frozen=True)
class SimView:
    """What the simulated kubelet holds, for one admission (its lock held)."""

    spec: NodeSpec
    pools: Pools
    dm: SimDeviceManager | None
    plugin: tuple[str, ...]
    pods: Mapping[PodKey, PodState]

    def state(self) -> NodeState:
        """The node as the admission rules read it; a plugin resource counts once its
        plugin registered devices (devicemanager ``isDevicePluginResource``)."""
        devices: list[DeviceSpec] = []
        free: dict[str, Iterable[str]] = {}
        if self.dm is not None:
            for r in self.plugin:
                registered = self.dm.devices(r)
                if registered:
                    devices.extend(DeviceSpec(r, d.id, d.numa, d.healthy) for d in registered)
                    free[r] = self.dm.free_devices(r)
        return node_state(self.spec, self.pools, devices, free, self.pods.values())


def admit(
    view: SimView, spec: PodSpec, name: str, hold: Hold
) -> tuple[list[ContainerState], list[PluginWant]]:
    """Admit a pod through ``podres_exporter.core.topology``: take what the rules chose
    for each listed container into ``hold``, and name the plugin devices still to
    allocate with their NUMA hint. Raises AdmissionFailure with the kubelet's reason
    (``TopologyAffinityError``, ``SMTAlignmentError``, ``UnexpectedAdmissionError``)."""
    decision, _, shares = assign(view.state(), pod_shape(spec))
    if not decision.admitted:
        raise AdmissionFailure(decision.message, decision.reason.value)
    by_name = {s.container: s for s in shares if not s.init}
    hints = {p.container: p.affinity for p in decision.placements}
    states: list[ContainerState] = []
    plugin: list[PluginWant] = []
    for i, c in enumerate(spec.listed_containers):
        share = by_name[c.name]
        own = {r: ids for r, ids in share.devices.items() if r not in view.plugin}
        grants = view.pools.take_exact(hold, share.cpus, own, {})
        wanted = c.memory_requests() if share.memory_numa else {}
        memory = view.pools.take_memory(wanted, share.memory_numa, hold)
        claims = ClaimGrant.of(c, spec.namespace, name)
        cpus = tuple(sorted(share.cpus))
        states.append(ContainerState(c.name, c.kind, cpus, tuple(grants), memory, claims))
        want = {r: n for r, n in c.devices.items() if n > 0 and r in view.plugin}
        if want:
            plugin.append((i, want, hints.get(c.name, hints.get(None))))
    return states, plugin
