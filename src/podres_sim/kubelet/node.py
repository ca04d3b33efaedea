"""The simulated node's state and its admission allocator (pure Python, no gRPC).

``Node`` holds what a kubelet's CPU, memory and device managers hold: the free
allocatable CPUs per NUMA node, the free healthy devices per resource and NUMA
placement, the free pinnable memory per NUMA node and type, and the admitted pods.

A node whose ``NodeSpec`` names a Topology Manager policy admits every pod through the
kubelet's own NUMA rules instead (``podres_exporter.core.topology``, via ``topology.py``):
what they refuse is rejected with their reason (``TopologyAffinityError`` ...), what they
admit gets the CPUs, devices and memory they chose. Without one, admitting a pod
allocates the way the kubelet does, simplified:

* a container of a Guaranteed pod that asks a whole number of CPUs gets that many
  exclusive CPUs under the static CPU policy, from the allocatable pool (never a
  reserved CPU, never a CPU given to another container); shared-pool containers get
  none (the 1.23+ semantics of ``cpu_ids``);
* devices come from the free HEALTHY devices of the resource;
* under the static memory manager, a container of a Guaranteed pod gets its
  ``memory`` and ``hugepages-*`` requests pinned to NUMA nodes;
* all of a container's resources are taken from ONE NUMA node when one can hold
  them all (the lowest such node, as the topology manager's hint merge prefers);
  otherwise they spill over several nodes;
* a pod with pod-level resources (Topology Manager scope ``pod``) gets a pod-level
  exclusive CPU budget: its exclusive containers' CPUs plus, near them, the CPUs of its
  private shared pool (where its other containers run); likewise its pod-level memory
  holds its containers' pinned memory plus the rest, pinned with them;
* a pod marked ``finished`` is admitted, then finishes at once: what it held is given
  back (the next pod may get the same devices), but it keeps its containers' stale
  resources, as the kubelet before 1.34 lists them (Succeeded);
* a pod that cannot be admitted is kept, like a pod rejected at admission (phase
  Failed, reason ``UnexpectedAdmissionError``), with its containers and EMPTY
  resources; whatever its earlier containers got is given back.

Removing a pod frees its resources. ``step`` is one step of churn: a random pod of a
template marked ``churn`` is deleted and a replacement admitted under a new name.
Every public method takes the node's lock, so a Node can be shared between threads.

Plugin resources (``Scenario.device_plugins``, or ``attach_device_manager``) are not
in ``NodeSpec.devices``: their devices come from the device plugins registered with a
``devicemanager.SimDeviceManager``, and a container asking for them is admitted
through it (GetPreferredAllocation and Allocate over gRPC, with the NUMA node chosen
for the container's CPUs as the topology hint). The node's lock is NOT held during
those calls: such a pod is staged under the lock, allocated from the plugins without
it, then recorded under it again. Without a device manager, or when the resource has
no plugin or Allocate fails, the pod is rejected like any other. ``retry_rejected``
admits such pods again. GetAllocatableResources's devices include the plugins'
healthy devices; List shows the ids the plugin allocated, with its topology.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import structlog

from podres_exporter.core.errors import AdmissionError, PreStartError
from podres_sim.kubelet import topology
from podres_sim.kubelet.devicemanager import SimDeviceManager
from podres_sim.kubelet.pods import (
    ChurnEvent,
    ClaimGrant,
    ContainerState,
    DeviceGrant,
    MemoryGrant,
    NodeSnapshot,
    PodKey,
    PodState,
)
from podres_sim.kubelet.pools import AdmissionFailure, Hold, NumaKey, Pools
from podres_sim.scenario import (
    MEMORY_TYPE,
    ContainerSpec,
    DeviceSpec,
    NodeSpec,
    PodSpec,
    QoS,
    Scenario,
)

__all__ = ["Node"]

log = structlog.get_logger("podres_sim")


# The alphabet Kubernetes uses for generated name suffixes (no vowels, no 0/1/3).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_ADMISSION_ERROR = "UnexpectedAdmissionError"


@dataclass(slots=True)
class _Staged:
    """A pod that asks for plugin devices, between its two admission steps: what it got
    under the node's lock, and what the device manager still has to give it."""

    spec: PodSpec
    name: str
    hold: Hold
    containers: list[ContainerState]
    plugin: list[tuple[int, dict[str, int], int | tuple[int, ...] | None]]  # index, needs, hint
    failure: tuple[str, str] | None = None  # reason, message
    pod_level: tuple[tuple[int, ...], tuple[MemoryGrant, ...]] = ((), ())

    @property
    def key(self) -> PodKey:
        return (self.spec.namespace, self.name)


class Node:
    """The node's resources and pods; see the module docstring."""

    def __init__(
        self,
        spec: NodeSpec,
        *,
        seed: int = 0,
        plugin_resources: Iterable[str] = (),
        device_manager: SimDeviceManager | None = None,
    ) -> None:
        self._spec = spec
        self._plugin: tuple[str, ...] = tuple(dict.fromkeys(plugin_resources))
        self._dm = device_manager
        self._admitting: dict[PodKey, bool] = {}  # staged pods; True: a rejected one, again
        self._cancelled: set[PodKey] = set()  # removed while being admitted
        self._plugin_free: dict[str, dict[NumaKey, int]] = {}  # while staging
        self._plugin_cache: tuple[int, tuple[str, ...], tuple[DeviceSpec, ...]] | None = None
        self._seed = seed
        self._lock = threading.RLock()
        self._rng = random.Random(seed)
        self._generation = 0
        self._pools = Pools(spec)
        self._healthy_cache: tuple[DeviceSpec, ...] | None = None
        self._pods: dict[PodKey, PodState] = {}
        self._holds: dict[PodKey, Hold] = {}
        self._prefixes: dict[tuple[str, str, str], str] = {}
        self._needs_cache: dict[
            tuple[int, str, bool], tuple[ContainerSpec, tuple[int, dict[str, int], dict[str, int]]]
        ] = {}

    @classmethod
    def from_scenario(
        cls, scenario: Scenario, *, device_manager: SimDeviceManager | None = None
    ) -> Node:
        """A node with every pod of the scenario admitted, in scenario order (pods asking
        for plugin resources through ``device_manager``)."""
        node = cls(
            scenario.node,
            seed=scenario.seed,
            plugin_resources=scenario.plugin_resources,
            device_manager=device_manager,
        )
        for spec in scenario.pods:
            for _ in range(spec.replicas):
                pod = node.admit(spec)
                if spec.finished:
                    node.finish(pod.namespace, pod.name)
        return node

    # ------------------------------------------------------------------ queries

    @property
    def spec(self) -> NodeSpec:
        """The node's hardware and policies (device health as in the scenario)."""
        return self._spec

    @property
    def plugin_resources(self) -> tuple[str, ...]:
        """The resources whose devices come from device plugins."""
        with self._lock:
            return self._plugin

    @property
    def device_manager(self) -> SimDeviceManager | None:
        """The device manager plugin resources are admitted through, if any."""
        with self._lock:
            return self._dm

    def attach_device_manager(
        self, device_manager: SimDeviceManager | None, resources: Iterable[str] = ()
    ) -> None:
        """Admit plugin resources through ``device_manager`` from now on (None: detach),
        and treat ``resources`` as plugin resources too."""
        with self._lock:
            self._dm = device_manager
            self._plugin = tuple(dict.fromkeys((*self._plugin, *resources)))
            self._needs_cache.clear()
            self._plugin_cache = None
            self._generation += 1

    def note_devices_changed(self) -> None:
        """The device manager's devices changed: bump the generation."""
        with self._lock:
            self._generation += 1

    @staticmethod
    def pod_key(namespace: str, name: str) -> str:
        """The key a pod's plugin allocations are kept under in the device manager."""
        return f"{namespace}/{name}"

    @property
    def generation(self) -> int:
        """A counter that increases with every change of the node."""
        with self._lock:
            return self._generation

    def snapshot(self) -> NodeSnapshot:
        """A consistent view of pods and allocatable resources."""
        with self._lock:
            if self._healthy_cache is None:
                self._healthy_cache = tuple(d for d in self._pools.devices if d.healthy)
            memory: tuple[MemoryGrant, ...] = ()
            if self._spec.memory_policy == "static":
                memory = tuple(
                    MemoryGrant(t, size, (n,))
                    for t, sizes in self._spec.memory.items()
                    for n, size in enumerate(sizes)
                )
            return NodeSnapshot(
                pods=tuple(self._pods.values()),
                allocatable_cpus=self._spec.allocatable_cpus,
                healthy_devices=self._healthy_cache + self._plugin_devices(),
                allocatable_memory=memory,
                generation=self._generation,
            )

    @property
    def pods(self) -> tuple[PodState, ...]:
        """Every pod, admitted or rejected, in admission order (a consistent copy)."""
        with self._lock:
            return tuple(self._pods.values())

    def pod(self, namespace: str, name: str) -> PodState | None:
        """One pod, or None."""
        with self._lock:
            return self._pods.get((namespace, name))

    def free_cpus(self) -> frozenset[int]:
        """Allocatable CPUs that no container holds exclusively."""
        with self._lock:
            return frozenset(c for heap in self._pools.free_cpus for c in heap)

    def free_devices(self, resource: str) -> frozenset[str]:
        """Healthy devices of ``resource`` that no container holds."""
        with self._lock:
            if resource in self._plugin:
                return self._dm.free_devices(resource) if self._dm else frozenset()
            buckets = self._pools.free_dev.get(resource, {})
            return frozenset(self._pools.devices[i].id for heap in buckets.values() for i in heap)

    def free_memory(self) -> dict[str, tuple[int, ...]]:
        """Pinnable memory left per type, per NUMA node."""
        with self._lock:
            return {t: tuple(v) for t, v in self._pools.free_mem.items()}

    def device_healthy(self, resource: str, device_id: str) -> bool:
        """Whether a device is healthy now; KeyError for an unknown device."""
        with self._lock:
            if resource in self._plugin:
                dm = self._dm.devices(resource) if self._dm else ()
                found = [d.healthy for d in dm if d.id == device_id]
                if not found:
                    raise KeyError((resource, device_id))
                return found[0]
            return self._pools.devices[self._pools.dev_index[(resource, device_id)]].healthy

    # ------------------------------------------------------------------ changes

    def admit(self, spec: PodSpec, *, name: str | None = None) -> PodState:
        """Admit one pod of ``spec`` (named by its naming rule unless ``name`` is given).

        Returns the pod, Running or (rejected) Failed. Raises ValueError when a pod of
        that name already exists. A pod asking for plugin resources is allocated by the
        device manager without the node's lock held.
        """
        with self._lock:
            if name is None:
                name = self._new_name(spec, self._rng)
            if (spec.namespace, name) in self._pods or (spec.namespace, name) in self._admitting:
                raise ValueError(f"pod {spec.namespace}/{name} already exists")
            if not self._asks_plugin(spec):
                return self._admit(spec, name)
            staged = self._stage(spec, name, retry=False)
        return self._finish(staged)

    def retry_rejected(self, resources: Iterable[str] | None = None) -> tuple[PodState, ...]:
        """Admit again, under their names, the rejected pods that ask for a plugin resource
        (of ``resources``, default all); return what became of them. A pod that fails
        again stays rejected. (A kubelet never does this; see DevicePluginsSpec.)"""
        with self._lock:
            wanted = set(self._plugin) if resources is None else set(self._plugin) & set(resources)
            keys = [
                k
                for k, p in self._pods.items()
                if not p.admitted and k not in self._admitting and self._asks_plugin(p.spec, wanted)
            ]
        out: list[PodState] = []
        for key in keys:
            with self._lock:
                pod = self._pods.get(key)
                if pod is None or pod.admitted or key in self._admitting:
                    continue
                staged = self._stage(pod.spec, pod.name, retry=True)
            out.append(self._finish(staged))
        return tuple(out)

    def remove(self, namespace: str, name: str) -> PodState | None:
        """Delete a pod and free what it held; return it, or None if there is none."""
        with self._lock:
            if (namespace, name) in self._admitting:
                self._cancelled.add((namespace, name))
            state = self._pods.pop((namespace, name), None)
            if state is None:
                return None
            hold = self._holds.pop((namespace, name), None)
            if hold is not None:
                self._release(hold)
            self._generation += 1
            return state

    def finish(self, namespace: str, name: str) -> PodState | None:
        """A running pod finishes: what it held is given back, and it stays, Succeeded,
        with its containers' (now stale) resources. None: no such running pod."""
        with self._lock:
            state = self._pods.get((namespace, name))
            if state is None or not state.active:
                return None
            hold = self._holds.pop((namespace, name), None)
            if hold is not None:
                self._release(hold)
            state = replace(state, phase="Succeeded", reason="Completed")
            self._pods[(namespace, name)] = state
            self._generation += 1
            return state

    def step(self, rng: random.Random) -> ChurnEvent | None:
        """Delete a random pod of a churn template and admit a replacement with a new
        name (a StatefulSet pod comes back under its own name). None: nothing churns."""
        with self._lock:
            candidates = [
                k for k, p in self._pods.items() if p.spec.churn and k not in self._admitting
            ]
            if not candidates:
                return None
            key = rng.choice(candidates)
            removed = self.remove(*key)
            assert removed is not None
            spec = removed.spec
            name = removed.name if spec.naming in ("statefulset", "static", "exact") else None
            if name is None:
                name = self._new_name(spec, rng)
            if not self._asks_plugin(spec):
                return ChurnEvent(removed=removed, added=self._admit(spec, name))
            staged = self._stage(spec, name, retry=False)
        return ChurnEvent(removed=removed, added=self._finish(staged))

    def set_device_health(self, resource: str, device_id: str, healthy: bool) -> None:
        """Mark a device healthy or not (KeyError if unknown). An unhealthy device
        leaves the allocatable list and is not handed out; a container holding it
        keeps it."""
        with self._lock:
            i = self._pools.dev_index[(resource, device_id)]
            dev = self._pools.devices[i]
            if dev.healthy == healthy:
                return
            self._pools.devices[i] = replace(dev, healthy=healthy)
            self._healthy_cache = None
            heap = self._pools.free_dev[resource].setdefault(dev.numa, [])
            if healthy and i in self._pools.parked:
                self._pools.parked.discard(i)
                heapq.heappush(heap, i)
            elif not healthy and i in heap:
                heap.remove(i)
                heapq.heapify(heap)
                self._pools.parked.add(i)
            self._generation += 1

    # ------------------------------------------------------------------ internals

    def _new_name(self, spec: PodSpec, rng: random.Random) -> str:
        if spec.naming == "exact":
            return spec.name
        if spec.naming == "static":
            return f"{spec.name}-{self._spec.name}"
        if spec.naming == "statefulset":
            ordinal = 0
            while self._taken((spec.namespace, f"{spec.name}-{ordinal}")):
                ordinal += 1
            return f"{spec.name}-{ordinal}"
        prefix = self._prefixes.get((spec.namespace, spec.name, spec.naming))
        if prefix is None:
            prefix = spec.name
            if spec.naming == "deployment":  # name-<pod-template-hash>-<suffix>
                seed = f"{self._seed}/{spec.namespace}/{spec.name}".encode()
                digest = hashlib.sha256(seed).digest()
                prefix += "-" + "".join(
                    _NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:10]
                )
            self._prefixes[(spec.namespace, spec.name, spec.naming)] = prefix
        while True:
            name = f"{prefix}-{''.join(rng.choices(_NAME_ALPHABET, k=5))}"
            if not self._taken((spec.namespace, name)):
                return name

    def _taken(self, key: PodKey) -> bool:
        return key in self._pods or key in self._admitting

    def _asks_plugin(self, spec: PodSpec, resources: Iterable[str] | None = None) -> bool:
        wanted = self._plugin if resources is None else tuple(resources)
        return any(c.devices.get(r, 0) > 0 for c in spec.listed_containers for r in wanted)

    def _plugin_devices(self) -> tuple[DeviceSpec, ...]:
        """The healthy devices of the plugin resources (lock held)."""
        dm = self._dm
        if dm is None or not self._plugin:
            return ()
        version = dm.version
        cached = self._plugin_cache
        if cached is not None and cached[0] == version and cached[1] == self._plugin:
            return cached[2]
        devices = tuple(
            DeviceSpec(r, d.id, d.numa, True)
            for r in self._plugin
            for d in dm.devices(r)
            if d.healthy
        )
        self._plugin_cache = (version, self._plugin, devices)
        return devices

    def _stage(self, spec: PodSpec, name: str, *, retry: bool) -> _Staged:
        """Step one of admitting a pod that asks for plugin devices (lock held): take its
        CPUs, memory and node devices, and note what the device manager is to give."""
        self._admitting[(spec.namespace, name)] = retry
        qos = spec.effective_qos
        pinned = self._spec.memory_policy == "static" and qos == "Guaranteed"
        staged = _Staged(spec, name, Hold(), [], [])
        dm = self._dm
        self._plugin_free = {}
        if dm is not None:
            for r in self._plugin:
                free = dm.free_devices(r)
                counts: dict[NumaKey, int] = {}
                for d in dm.devices(r):
                    if d.id in free:
                        counts[d.numa] = counts.get(d.numa, 0) + 1
                self._plugin_free[r] = counts
        try:
            if self._spec.topology_policy is not None:
                states, plugin = self._core_admit(spec, name, staged.hold)
                staged.containers.extend(states)
                staged.plugin.extend(plugin)
            for i, c in enumerate(() if staged.containers else spec.listed_containers):
                state, hint = self._allocate(
                    c,
                    qos=qos,
                    pinned=pinned,
                    hold=staged.hold,
                    namespace=spec.namespace,
                    pod_name=name,
                )
                staged.containers.append(state)
                want = {r: n for r, n in c.devices.items() if n > 0 and r in self._plugin}
                if want:
                    staged.plugin.append((i, want, hint))
            staged.pod_level = self._pod_level(spec, staged.containers, qos, pinned, staged.hold)
        except AdmissionFailure as exc:
            self._release(staged.hold)
            staged.failure = (exc.reason, str(exc))
        finally:
            self._plugin_free = {}
        return staged

    def _finish(self, staged: _Staged) -> PodState:
        """Step two (NO lock held): allocate the plugin devices through the device
        manager, run PreStartContainer, then record the pod under the lock."""
        spec, name, key = staged.spec, staged.name, staged.key
        pod_key = self.pod_key(spec.namespace, name)
        dm = self._dm
        failure = staged.failure
        grants: dict[int, list[DeviceGrant]] = {}
        if failure is None:
            try:
                for i, want, hint in staged.plugin:
                    container = staged.containers[i].name
                    for resource, count in want.items():
                        if dm is None:
                            raise AdmissionError(
                                f"Node didn't have enough resource: {resource}, requested: "
                                f"{count}, used: 0, capacity: 0",
                                reason=f"OutOf{resource}",
                            )
                        got = dm.allocate(pod_key, container, resource, count, numa_hint=hint)
                        grants.setdefault(i, []).extend(
                            DeviceGrant(resource, d, got.topology.get(d)) for d in got.device_ids
                        )
            except AdmissionError as exc:
                if dm is not None:
                    dm.release(pod_key)
                failure = (exc.reason, exc.pod_message)
        if failure is None and dm is not None:
            for i, _, _ in staged.plugin:
                try:
                    dm.pre_start(pod_key, staged.containers[i].name)
                except PreStartError as exc:  # the container would not start; still admitted
                    log.warning("sim_pre_start_failed", pod=pod_key, error=str(exc))
        with self._lock:
            self._admitting.pop(key, None)
            cancelled = key in self._cancelled
            self._cancelled.discard(key)
            if failure is None and not cancelled:
                containers = tuple(
                    replace(c, devices=c.devices + tuple(grants[i])) if i in grants else c
                    for i, c in enumerate(staged.containers)
                )
                cpu_ids, memory = staged.pod_level
                state = PodState(
                    spec.namespace, name, spec, containers, cpu_ids=cpu_ids, memory=memory
                )
                staged.hold.plugin_pod = pod_key
                self._holds[key] = staged.hold
            else:
                self._release(staged.hold)
                if dm is not None and failure is None:
                    dm.release(pod_key)  # deleted while being admitted
                reason, message = failure or (_ADMISSION_ERROR, "pod deleted during admission")
                state = PodState(
                    namespace=spec.namespace,
                    name=name,
                    spec=spec,
                    containers=tuple(
                        ContainerState(c.name, c.kind) for c in spec.listed_containers
                    ),
                    phase="Failed",
                    reason=reason,
                    message=message,
                )
            if not cancelled:
                self._pods[key] = state
                self._generation += 1
        return state

    def _admit(self, spec: PodSpec, name: str) -> PodState:
        qos = spec.effective_qos
        pinned = self._spec.memory_policy == "static" and qos == "Guaranteed"
        hold = Hold()
        containers: list[ContainerState] = []
        try:
            if self._spec.topology_policy is not None:
                containers = self._core_admit(spec, name, hold)[0]
            for c in () if self._spec.topology_policy is not None else spec.listed_containers:
                containers.append(
                    self._allocate(
                        c,
                        qos=qos,
                        pinned=pinned,
                        hold=hold,
                        namespace=spec.namespace,
                        pod_name=name,
                    )[0]
                )
            cpu_ids, memory = self._pod_level(spec, containers, qos, pinned, hold)
        except AdmissionFailure as exc:
            self._release(hold)
            state = PodState(
                namespace=spec.namespace,
                name=name,
                spec=spec,
                containers=tuple(ContainerState(c.name, c.kind) for c in spec.listed_containers),
                phase="Failed",
                reason=exc.reason,
                message=str(exc),
            )
        else:
            state = PodState(
                spec.namespace, name, spec, tuple(containers), cpu_ids=cpu_ids, memory=memory
            )
            self._holds[state.key] = hold
        self._pods[state.key] = state
        self._generation += 1
        return state

    def _core_admit(
        self, spec: PodSpec, name: str, hold: Hold
    ) -> tuple[list[ContainerState], list[topology.PluginWant]]:
        """Admit a pod through the kubelet's NUMA admission (lock held); see
        ``topology.admit``."""
        view = topology.SimView(self._spec, self._pools, self._dm, self._plugin, self._pods)
        return topology.admit(view, spec, name, hold)

    def _allocate(
        self,
        c: ContainerSpec,
        *,
        qos: QoS,
        pinned: bool,
        hold: Hold,
        namespace: str,
        pod_name: str,
    ) -> tuple[ContainerState, int | None]:
        """A container's CPUs, memory and node devices, and the NUMA node they were
        taken from (the hint for its plugin devices; None: no preference)."""
        claims = ClaimGrant.of(c, namespace, pod_name)
        ncpu, devices, memory = self._needs(c, qos, pinned)
        if not (ncpu or devices or memory):
            return ContainerState(c.name, c.kind, claims=claims), None
        self._pools.check_totals(c.name, ncpu, devices, memory)
        plugin = (
            {r: n for r, n in c.devices.items() if n > 0 and r in self._plugin_free}
            if self._plugin_free
            else {}
        )

        numa = next(
            (
                n
                for n in range(self._spec.numa_nodes)
                if self._pools.fits(n, ncpu, devices, memory) and self._plugin_fits(n, plugin)
            ),
            None,
        )
        if numa is not None:
            cpus = self._pools.take_cpus(ncpu, (numa,))
            prefer: int | None = numa
            group: tuple[int, ...] = (numa,)
        else:
            # No single NUMA node holds it all: spill, starting where most CPUs are free.
            order = sorted(
                range(self._spec.numa_nodes), key=lambda n: -len(self._pools.free_cpus[n])
            )
            cpus = self._pools.take_cpus(ncpu, tuple(order))
            prefer = (
                self._pools.cpu_numa[cpus[0]] if cpus else self._pools.best_device_node(devices)
            )
            group = self._pools.memory_group(memory, prefer or 0)
        hold.cpus.extend(cpus)
        grants: list[DeviceGrant] = []
        for resource, count in devices.items():
            grants.extend(self._pools.take_devices(resource, count, prefer, hold))
        mem_grants = self._pools.take_memory(memory, group, hold)
        state = ContainerState(
            c.name,
            c.kind,
            cpu_ids=tuple(sorted(cpus)),
            devices=tuple(grants),
            memory=mem_grants,
            claims=claims,
        )
        return state, prefer

    def _pod_level(
        self,
        spec: PodSpec,
        containers: list[ContainerState],
        qos: QoS,
        pinned: bool,
        hold: Hold,
    ) -> tuple[tuple[int, ...], tuple[MemoryGrant, ...]]:
        """The pod-level CPU set and memory of a pod with pod-level resources (lock
        held): its containers' exclusive CPUs and pinned memory, plus the rest of its
        budget (its private shared pool), taken near them."""
        budget = spec.pod_exclusive_cpus(self._spec.cpu_policy)
        taken = [cpu for c in containers for cpu in c.cpu_ids]
        near = self._pools.cpu_numa[taken[0]] if taken else None
        extra: list[int] = []
        if budget > len(taken):
            self._pools.check_totals(spec.name, budget - len(taken), {}, {})
            order = sorted(
                range(self._spec.numa_nodes),
                key=lambda n: (n != near, -len(self._pools.free_cpus[n]), n),
            )
            extra = self._pools.take_cpus(budget - len(taken), order)
            hold.cpus.extend(extra)
        cpu_ids = tuple(sorted((*taken, *extra))) if budget else ()
        if not (pinned and spec.memory):
            return cpu_ids, ()
        claimed = sum(g.size for c in containers for g in c.memory if g.memory_type == MEMORY_TYPE)
        start = near if near is not None else (self._pools.cpu_numa[extra[0]] if extra else 0)
        blocks: dict[tuple[str, tuple[int, ...]], int] = {}
        for c in containers:
            for g in c.memory:
                blocks[(g.memory_type, g.numa)] = blocks.get((g.memory_type, g.numa), 0) + g.size
        rest = {MEMORY_TYPE: spec.memory - claimed} if spec.memory > claimed else {}
        if rest:
            self._pools.check_totals(spec.name, 0, {}, rest)
            for g in self._pools.take_memory(rest, self._pools.memory_group(rest, start), hold):
                blocks[(g.memory_type, g.numa)] = blocks.get((g.memory_type, g.numa), 0) + g.size
        memory = tuple(MemoryGrant(t, size, numa) for (t, numa), size in sorted(blocks.items()))
        return cpu_ids, memory

    def _needs(
        self, c: ContainerSpec, qos: QoS, pinned: bool
    ) -> tuple[int, dict[str, int], dict[str, int]]:
        """Exclusive CPUs, devices and pinned memory a container asks (cached per spec)."""
        key = (id(c), qos, pinned)
        hit = self._needs_cache.get(key)
        if hit is not None and hit[0] is c:
            return hit[1]
        needs = (
            c.exclusive_cpus(qos, self._spec.cpu_policy),
            {r: n for r, n in c.devices.items() if n > 0 and r not in self._plugin},
            c.memory_requests() if pinned else {},
        )
        self._needs_cache[key] = (c, needs)
        return needs

    def _plugin_fits(self, n: int, plugin: Mapping[str, int]) -> bool:
        """Whether NUMA node ``n`` has enough free plugin devices (as seen at staging)."""
        for resource, count in plugin.items():
            buckets = self._plugin_free.get(resource, {})
            if sum(k for key, k in buckets.items() if key is None or n in key) < count:
                return False
        return True

    def _release(self, hold: Hold) -> None:
        self._pools.give_back(hold)
        if hold.plugin_pod is not None and self._dm is not None:
            self._dm.release(hold.plugin_pod)
        hold.plugin_pod = None
