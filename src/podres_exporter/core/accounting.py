"""Pure accounting: who holds what, and what is still free, per NUMA node.

Input: one :class:`~podres_exporter.core.model.KubeletReading` and the node's
:class:`~podres_exporter.core.model.NodeTopology`. Output: an :class:`Accounting` of
plain rows that the collectors, ``podres snapshot`` and ``podres top`` render.
No I/O, no clocks, no logging: every function here is deterministic.

CPU pools (every online CPU is in exactly one of exclusive / shared_free / reserved):
- allocatable: what the kubelet reports as allocatable; when it reports none
  (CPU manager policy ``none``, or GetAllocatableResources not served) the
  node's online CPUs stand in, and ``cpu_basis`` says ``online``. A v1alpha1
  kubelet reports no CPUs at all: no CPU rows, ``cpu_basis`` ``unknown``.
- exclusive: CPUs held exclusively by a container (or a pod).
- shared_free: the free shared pool, allocatable minus the union of exclusive CPUs.
- reserved: online but not allocatable (the kubelet's reserved CPUs).

Pod-level resources (kubelets with ``PodLevelResourceManagers`` and Topology Manager
scope ``pod``): a pod's pod-level CPU set is its whole exclusive budget and contains
the CPUs its exclusive containers list for themselves. A CPU in both is the
container's, counted once; a pod-level CPU no container lists is in the pod's private
shared pool, exclusive to the pod and held by the pod itself (holder container
``""``). Pod-level memory works the same way per NUMA placement and type: the part
no container claims is held by the pod. A kubelet that sends no pod-level fields is
accounted exactly as before.

A CPU listed by several containers cannot be exclusive (kubelets 1.20 to 1.22
listed the whole shared cpuset for shared containers): it counts as shared and
is reported as the ``cpu_listed_by_several_containers`` anomaly. A holder (namespace,
pod, container) counts once however often it is listed: a pod listed twice holds its
CPUs and devices once, and no series is rendered twice.

Devices per resource and NUMA placement: allocatable (healthy, as reported),
allocated (held by some container, each id once), unallocated (allocatable and
held by nobody) and allocated_unhealthy (held but no longer allocatable: the
device went unhealthy, or its plugin's stream dropped, while in use). Without
an allocatable reading only ``allocated`` is known, and only it is reported.

Finished pods on kubelets before 1.34: List may still show a finished pod with devices
(or CPUs) that were given back and handed to another pod. When liveness facts are
given (:class:`~podres_exporter.core.model.PodLiveness`), a device or exclusive CPU listed by
several pods is held by the pods that still run: a finished holder is dropped. Where
the facts cannot tell, nothing is dropped and the ``holder_liveness_undecided`` anomaly
counts it (see :func:`pod_state` for the rule). Without liveness facts (None) the
accounting is as before and that anomaly is not reported at all.

DRA: one row per claim device and holder; per driver and pool, the distinct devices
allocated, and those shared (used through several shares, or by several claims). Claims
with the same ``share_id`` on one device are one share of it.

Memory per NUMA placement and type: allocatable, allocated, free. A block
pinned to several NUMA nodes is labelled with all of them (``"0,1"``) and, for
the free computation, split evenly across them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podres_exporter.core.model import (
    ApiVersion,
    ContainerAlloc,
    DeviceRef,
    Holder,
    KubeletReading,
    MemoryBlock,
    NodeTopology,
    NumaNodes,
    PodAlloc,
    PodLiveness,
    device_key_order,
    numa_label,
)

CPU_POOLS = ("allocatable", "exclusive", "shared_free", "reserved")
DEVICE_STATES = ("allocatable", "allocated", "unallocated", "allocated_unhealthy")
MEMORY_STATES = ("allocatable", "allocated", "free")

# Anomalies: odd data that we keep serving, counted per snapshot.
ANOMALIES = (
    "cpu_not_online",  # an exclusive or allocatable CPU that is not online
    "cpu_listed_by_several_containers",
    "device_held_by_several_containers",
    "empty_device_id",
    "empty_name",  # an empty namespace, pod, container or resource name
    "memory_overcommitted",  # allocated above allocatable on a NUMA node
)
# Reported only when liveness facts were given: a device or CPU listed by several pods
# where it could not be told which of them still run.
LIVENESS_ANOMALY = "holder_liveness_undecided"
DRA_STATES = ("allocated", "shared")
POD_STATES = ("running", "finished", "undecided")


@dataclass(frozen=True, slots=True)
class CpuAssignment:
    """One CPU: its NUMA node label, its pool, and its holder when exclusive."""

    cpu: int
    numa: str
    pool: str
    holder: Holder | None


@dataclass(frozen=True, slots=True)
class HolderCount:
    """An amount held by one holder on one NUMA placement."""

    holder: Holder
    numa: str
    value: int


@dataclass(frozen=True, slots=True)
class HeldDevice:
    """One device held by one holder."""

    holder: Holder
    resource: str
    device_id: str
    numa: str


@dataclass(frozen=True, slots=True)
class DeviceState:
    """One device id the kubelet reports, with its state.

    ``free``: allocatable and held by nobody; ``allocated``: held (and allocatable,
    or allocatable unknown); ``allocated_unhealthy``: held, no longer allocatable.
    """

    resource: str
    device_id: str
    numa: str
    state: str


@dataclass(frozen=True, slots=True)
class HeldMemory:
    """Pinned memory of one type held by one holder on one NUMA placement."""

    holder: Holder
    memory_type: str
    numa: str
    size_bytes: int


@dataclass(frozen=True, slots=True)
class HeldClaim:
    """One device of a DRA claim used by one holder (all strings may be empty)."""

    holder: Holder
    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class PodCount:
    """An amount a pod keeps in its private shared pool on one NUMA placement."""

    namespace: str
    pod: str
    numa: str
    value: int


@dataclass(frozen=True, slots=True)
class PodMemory:
    """Pod-level memory of one type that no container of the pod claims."""

    namespace: str
    pod: str
    memory_type: str
    numa: str
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Accounting:
    """Everything the exporter says about allocation, as plain sorted rows.

    ``node_cpus`` maps (numa label, pool) to a count, ``node_devices`` maps
    (resource, numa label, state) to a count, ``node_memory`` maps
    (numa label, memory type, state) to bytes.
    """

    cpu_basis: str  # "allocatable", "online", or "unknown" (v1alpha1: no CPU data)
    node_cpus: Mapping[tuple[str, str], int]
    cpu_assignments: tuple[CpuAssignment, ...]
    container_cpus: tuple[HolderCount, ...]
    node_devices: Mapping[tuple[str, str, str], int]
    container_devices: tuple[HeldDevice, ...]
    device_states: tuple[DeviceState, ...]
    node_memory: Mapping[tuple[str, str, str], int]
    container_memory: tuple[HeldMemory, ...]
    claims: tuple[HeldClaim, ...]
    pods: int
    containers: int
    anomalies: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # Pod-level resources: one row per pod with a pod-level CPU set and NUMA node of it.
    pod_shared_cpus: tuple[PodCount, ...] = ()
    pod_shared_memory: tuple[PodMemory, ...] = ()
    # DRA per (driver, pool, state): distinct devices allocated, and those shared.
    dra_devices: Mapping[tuple[str, str, str], int] = field(
        default_factory=lambda: MappingProxyType({})
    )


def _holdings(pod: PodAlloc) -> Iterator[tuple[Holder, ContainerAlloc]]:
    """Each container of ``pod`` with its holder (pod-level resources carry no devices)."""
    for c in pod.containers:
        yield Holder(pod.namespace, pod.name, c.name), c


def _cpu_holdings(pod: PodAlloc) -> Iterator[tuple[Holder, frozenset[int]]]:
    """Each container's CPUs; the pod's own (pod-level CPUs no container lists) as ``""``."""
    in_containers: set[int] = set()
    for c in pod.containers:
        in_containers |= c.cpu_ids
        yield Holder(pod.namespace, pod.name, c.name), c.cpu_ids
    private = pod.cpu_ids - in_containers
    if private:
        yield Holder(pod.namespace, pod.name, ""), private


def _pod_memory_left(pod: PodAlloc) -> tuple[MemoryBlock, ...]:
    """The pod-level memory no container of ``pod`` claims, per type and placement."""
    if not pod.memory:
        return ()
    claimed: Counter[tuple[str, NumaNodes]] = Counter()
    for c in pod.containers:
        for b in c.memory:
            claimed[(b.memory_type, b.numa)] += b.size_bytes
    total: Counter[tuple[str, NumaNodes]] = Counter()
    for b in pod.memory:
        total[(b.memory_type, b.numa)] += b.size_bytes
    return tuple(
        MemoryBlock(mtype, max(size - claimed.get((mtype, numa), 0), 0), numa)
        for (mtype, numa), size in total.items()
    )


def _memory_holdings(pod: PodAlloc) -> Iterator[tuple[Holder, tuple[MemoryBlock, ...]]]:
    """Each container's pinned memory; the pod's own unclaimed pod-level memory as ``""``."""
    for c in pod.containers:
        yield Holder(pod.namespace, pod.name, c.name), c.memory
    left = tuple(b for b in _pod_memory_left(pod) if b.size_bytes)
    if left:
        yield Holder(pod.namespace, pod.name, ""), left


def contested(reading: KubeletReading) -> bool:
    """Whether a device or a CPU is listed by containers of several pods: only then does
    the accounting ask which of them still run (a finished pod's stale listing)."""
    cpu_pod: dict[int, tuple[str, str]] = {}
    device_pod: dict[tuple[str, str], tuple[str, str]] = {}
    for pod in reading.pods:
        key = (pod.namespace, pod.name)
        for cpu in pod.cpu_ids:
            if cpu_pod.setdefault(cpu, key) != key:
                return True
        for c in pod.containers:
            for cpu in c.cpu_ids:
                if cpu_pod.setdefault(cpu, key) != key:
                    return True
            for d in c.devices:
                if device_pod.setdefault((d.resource, d.device_id), key) != key:
                    return True
    return False


def pod_state(liveness: PodLiveness, namespace: str, pod: str) -> str:
    """``running``, ``finished`` or ``undecided`` for one listed pod, from node-local facts.

    The rule: the kubelet creates a pod's cgroup before its sandbox, and the sandbox
    before the pod's log directory ``/var/log/pods/<ns>_<pod>_<uid>``; it removes the
    pod cgroup once the pod has finished, and the log directory only when the pod is
    deleted. So a pod whose log directory names a UID that still has a pod cgroup is
    running; a pod with log directories none of whose UIDs has a cgroup has finished.
    A pod with no log directory (not started yet, or already deleted), or a node where
    either tree could not be read, is undecided.
    """
    if liveness.pod_uids is None or liveness.live_uids is None:
        return "undecided"
    uids = liveness.pod_uids.get((namespace, pod))
    if not uids:
        return "undecided"
    return "running" if uids & liveness.live_uids else "finished"


def _settle(
    holders: Mapping[Holder, object],
    liveness: PodLiveness | None,
    states: dict[tuple[str, str], str],
    anomalies: Counter[str],
) -> list[Holder]:
    """The holders that count for one CPU or device listed by ``holders``.

    Without liveness facts, or with one pod listing it, every holder counts (as
    before). Listed by several pods: the finished pods' holders are dropped; when a
    pod among those left is undecided, nothing is dropped and it is an anomaly.
    """
    listed = list(holders)
    if liveness is None or len({(h.namespace, h.pod) for h in listed}) == 1:
        return listed
    for h in listed:
        key = (h.namespace, h.pod)
        if key not in states:
            states[key] = pod_state(liveness, *key)
    if any(states[(h.namespace, h.pod)] == "undecided" for h in listed):
        anomalies[LIVENESS_ANOMALY] += 1
        return listed
    running = [h for h in listed if states[(h.namespace, h.pod)] == "running"]
    return running or listed


def _cpu_numa(topology: NodeTopology, cpu: int) -> str:
    node = topology.numa_of(cpu)
    return "none" if node is None else str(node)


def account_cpus(
    reading: KubeletReading,
    topology: NodeTopology,
    anomalies: Counter[str],
    liveness: PodLiveness | None = None,
    pod_states: dict[tuple[str, str], str] | None = None,
) -> tuple[str, dict[tuple[str, str], int], list[CpuAssignment], list[HolderCount]]:
    """CPU pools per NUMA node, one assignment per CPU, exclusive CPUs per holder."""
    if reading.api_version is ApiVersion.V1ALPHA1:
        return "unknown", {}, [], []  # v1alpha1 carries no CPUs at all: unknown, not zero
    online = topology.online_cpus
    reported = reading.allocatable.cpu_ids if reading.allocatable is not None else frozenset()
    basis = "allocatable" if reported else "online"
    allocatable = reported or online

    # The holders listing each CPU, each once: a pod the kubelet lists twice is still
    # one holder (its series could not tell the two apart anyway).
    listed_by: dict[int, dict[Holder, None]] = defaultdict(dict)
    for pod in reading.pods:
        for holder, cpus in _cpu_holdings(pod):
            for cpu in cpus:
                listed_by[cpu][holder] = None
    seen_states = {} if pod_states is None else pod_states
    counted = {
        cpu: _settle(hs, liveness, seen_states, anomalies) if len(hs) > 1 else list(hs)
        for cpu, hs in listed_by.items()
    }
    owner = {cpu: hs[0] for cpu, hs in counted.items() if len(hs) == 1}
    anomalies["cpu_listed_by_several_containers"] += sum(
        1 for hs in counted.values() if len(hs) > 1
    )
    anomalies["cpu_not_online"] += len((set(owner) | allocatable) - online)

    exclusive = frozenset(owner)
    reserved = online - allocatable if basis == "allocatable" else frozenset()
    shared_free = allocatable - exclusive

    counts: dict[tuple[str, str], int] = {}
    for node in topology.numa_nodes:
        for pool in CPU_POOLS:
            counts[(str(node), pool)] = 0
    for pool, cpus in (
        ("allocatable", allocatable),
        ("exclusive", exclusive),
        ("shared_free", shared_free),
        ("reserved", reserved),
    ):
        for cpu in cpus:
            key = (_cpu_numa(topology, cpu), pool)
            counts[key] = counts.get(key, 0) + 1

    assignments = []
    for cpu in sorted(online | allocatable | exclusive):
        if cpu in owner:
            pool = "exclusive"
        elif cpu in shared_free:
            pool = "shared_free"
        else:
            pool = "reserved"
        assignments.append(CpuAssignment(cpu, _cpu_numa(topology, cpu), pool, owner.get(cpu)))

    per_holder: Counter[tuple[Holder, str]] = Counter()
    for cpu, holder in owner.items():
        per_holder[(holder, _cpu_numa(topology, cpu))] += 1
    held = [HolderCount(h, n, v) for (h, n), v in sorted(per_holder.items())]
    return basis, counts, assignments, held


def account_devices(
    reading: KubeletReading,
    anomalies: Counter[str],
    liveness: PodLiveness | None = None,
    pod_states: dict[tuple[str, str], str] | None = None,
) -> tuple[dict[tuple[str, str, str], int], list[HeldDevice], list[DeviceState]]:
    """Device counts per resource, NUMA placement and state; one row per held device.

    Written for a large node read from scratch (``podres top --once`` over 50,000
    devices): each device's placement is worked out once, and the sorts compare plain
    strings or small groups rather than every (holder, resource, id) tuple.
    """
    allocatable: dict[tuple[str, str], NumaNodes] = {}
    if reading.allocatable is not None:
        for d in reading.allocatable.devices:
            allocatable[(d.resource, d.device_id)] = d.numa
    first, several = _device_holders(reading.pods, anomalies, liveness, pod_states)
    anomalies["device_held_by_several_containers"] += sum(
        1 for hs in several.values() if len(hs) > 1
    )
    listed = allocatable.keys() | first.keys()
    anomalies["empty_device_id"] += sum(1 for _, dev in listed if not dev)
    anomalies["empty_name"] += sum(1 for res, _ in listed if not res)

    # Each device's NUMA label, once: the allocatable placement, else its first holder's.
    labels: dict[NumaNodes, str] = {}

    def label(nodes: NumaNodes) -> str:
        text = labels.get(nodes)
        if text is None:
            text = labels[nodes] = numa_label(nodes)
        return text

    placement = {key: label(numa) for key, numa in allocatable.items() if numa is not None}
    for key, (_, d) in first.items():
        if key not in placement:
            hs = several.get(key)
            placement[key] = label((d if hs is None else next(iter(hs.values()))).numa)
    for key in allocatable:
        placement.setdefault(key, "none")

    counts: dict[tuple[str, str, str], int] = {}

    def bump(key: tuple[str, str], state: str) -> None:
        k = (key[0], placement[key], state)
        counts[k] = counts.get(k, 0) + 1

    known = reading.allocatable is not None
    for key in first:
        bump(key, "allocated")
        if known and key not in allocatable:
            bump(key, "allocated_unhealthy")
    for key in allocatable:
        bump(key, "allocatable")
        if key not in first:
            bump(key, "unallocated")
    # Every state of every (resource, placement) seen, zeros included, so that a
    # resource whose devices are all taken shows unallocated 0, not nothing.
    states = DEVICE_STATES if known else ("allocated",)
    for resource, numa in {(r, n) for r, n, _ in counts}:
        for state in states:
            counts.setdefault((resource, numa, state), 0)

    # One row per (device, holder), in (holder, resource, id) order: grouped by holder,
    # each holder's few devices sorted on their own.
    by_holder: dict[Holder, list[tuple[str, str]]] = defaultdict(list)
    for key, (holder, _) in first.items():
        for h in several.get(key, (holder,)):
            by_holder[h].append(key)
    rows = [
        HeldDevice(holder, res, dev, placement[(res, dev)])
        for holder in sorted(by_holder)
        for res, dev in sorted(by_holder[holder])
    ]
    per_id = [
        DeviceState(
            res,
            dev,
            placement[(res, dev)],
            "free"
            if (res, dev) not in first
            else (
                "allocated_unhealthy" if known and (res, dev) not in allocatable else "allocated"
            ),
        )
        for res, dev in device_key_order(placement)
    ]
    return counts, rows, per_id


def _device_holders(
    pods: Iterable[PodAlloc],
    anomalies: Counter[str],
    liveness: PodLiveness | None,
    pod_states: dict[tuple[str, str], str] | None,
) -> tuple[
    dict[tuple[str, str], tuple[Holder, DeviceRef]], dict[tuple[str, str], dict[Holder, DeviceRef]]
]:
    """The first holder of each device (with the placement it was listed with), and
    the holders that count of each device several list (each once; see ``_settle``)."""
    first: dict[tuple[str, str], tuple[Holder, DeviceRef]] = {}
    several: dict[tuple[str, str], dict[Holder, DeviceRef]] = {}
    for pod in pods:
        for holder, c in _holdings(pod):
            for d in c.devices:
                key = (d.resource, d.device_id)
                held = first.get(key)
                if held is None:
                    first[key] = (holder, d)
                elif held[0] != holder:
                    several.setdefault(key, {held[0]: held[1]}).setdefault(holder, d)
    if liveness is not None:
        seen_states = {} if pod_states is None else pod_states
        for key, hs in several.items():
            kept = _settle(hs, liveness, seen_states, anomalies)
            several[key] = {h: hs[h] for h in kept}
    return first, several


def _split(block: MemoryBlock) -> Iterator[tuple[str, int]]:
    """A block's bytes per single NUMA node (even split, remainder to the first)."""
    if block.numa is None or len(block.numa) <= 1:
        yield numa_label(block.numa), block.size_bytes
        return
    share, rest = divmod(block.size_bytes, len(block.numa))
    for i, node in enumerate(block.numa):
        yield str(node), share + (rest if i == 0 else 0)


def account_memory(
    reading: KubeletReading, anomalies: Counter[str]
) -> tuple[dict[tuple[str, str, str], int], list[HeldMemory]]:
    """Memory per NUMA placement, type and state; one row per holder, placement and type."""
    counts: dict[tuple[str, str, str], int] = {}
    allocatable: Counter[tuple[str, str]] = Counter()
    if reading.allocatable is not None:
        for b in reading.allocatable.memory:
            allocatable[(numa_label(b.numa), b.memory_type)] += b.size_bytes
    allocated: Counter[tuple[str, str]] = Counter()
    used_per_node: Counter[tuple[str, str]] = Counter()
    held: Counter[tuple[Holder, str, str]] = Counter()
    for pod in reading.pods:
        for holder, blocks in _memory_holdings(pod):
            for b in blocks:
                label = numa_label(b.numa)
                allocated[(label, b.memory_type)] += b.size_bytes
                held[(holder, b.memory_type, label)] += b.size_bytes
                for node, size in _split(b):
                    used_per_node[(node, b.memory_type)] += size
    for (numa, mtype), size in allocatable.items():
        counts[(numa, mtype, "allocatable")] = size
        free = size - used_per_node.get((numa, mtype), 0)
        if free < 0:
            anomalies["memory_overcommitted"] += 1
        counts[(numa, mtype, "free")] = max(free, 0)
        counts[(numa, mtype, "allocated")] = 0
    for (numa, mtype), size in allocated.items():
        counts[(numa, mtype, "allocated")] = size
    rows = [HeldMemory(h, t, n, v) for (h, t, n), v in sorted(held.items())]
    return counts, rows


def _claims(pods: Iterable[PodAlloc]) -> list[HeldClaim]:
    rows = []
    for pod in pods:
        for holder, c in _holdings(pod):
            for claim in c.dynamic_resources:
                devices = claim.devices or ()
                if not devices:
                    rows.append(
                        HeldClaim(holder, claim.claim_namespace, claim.claim_name, "", "", "")
                    )
                rows.extend(
                    HeldClaim(
                        holder, claim.claim_namespace, claim.claim_name, d.driver, d.pool, d.device
                    )
                    for d in devices
                )
    return sorted(
        set(rows),
        key=lambda r: (r.holder, r.claim_namespace, r.claim_name, r.driver, r.pool, r.device),
    )


def _pod_pools(
    pods: Iterable[PodAlloc], topology: NodeTopology
) -> tuple[list[PodCount], list[PodMemory]]:
    """Each pod-scoped pod's private shared pool: CPUs per NUMA node, memory per type.

    A pod with a pod-level CPU set has a row for every NUMA node of that set, zero
    when its containers claim all of it; likewise for pod-level memory.
    """
    cpus: dict[tuple[str, str, str], int] = {}
    memory: dict[tuple[str, str, str, str], int] = {}
    for pod in pods:
        if pod.cpu_ids:
            claimed = frozenset().union(*(c.cpu_ids for c in pod.containers))
            for cpu in pod.cpu_ids:
                key = (pod.namespace, pod.name, _cpu_numa(topology, cpu))
                cpus[key] = cpus.get(key, 0) + (cpu not in claimed)
        for b in _pod_memory_left(pod):
            mkey = (pod.namespace, pod.name, b.memory_type, numa_label(b.numa))
            memory[mkey] = b.size_bytes
    return (
        [PodCount(ns, p, n, v) for (ns, p, n), v in sorted(cpus.items())],
        [PodMemory(ns, p, t, n, v) for (ns, p, t, n), v in sorted(memory.items())],
    )


def _dra_devices(pods: Iterable[PodAlloc]) -> dict[tuple[str, str, str], int]:
    """Distinct DRA devices per driver and pool, allocated and shared.

    A device is (driver, pool, device); its shares are the distinct share ids it is
    used through (a claim without one is a share of its own, by claim). Claims with
    the same share id on one device are one share. A device with several shares is
    shared. Claims from kubelets before 1.31 name no device and are left out.
    """
    shares: dict[tuple[str, str, str], set[tuple[str, ...]]] = defaultdict(set)
    for pod in pods:
        for _, c in _holdings(pod):
            for claim in c.dynamic_resources:
                for d in claim.devices:
                    if not d.device:
                        continue
                    share = (
                        ("share", d.share_id)
                        if d.share_id is not None
                        else ("claim", claim.claim_namespace, claim.claim_name)
                    )
                    shares[(d.driver, d.pool, d.device)].add(share)
    counts: dict[tuple[str, str, str], int] = {}
    for (driver, pool, _), used in shares.items():
        for state in DRA_STATES:
            counts.setdefault((driver, pool, state), 0)
        counts[(driver, pool, "allocated")] += 1
        counts[(driver, pool, "shared")] += len(used) > 1
    return counts


def account(
    reading: KubeletReading, topology: NodeTopology, liveness: PodLiveness | None = None
) -> Accounting:
    """The whole accounting of one reading on one node.

    ``liveness``: what the node tells about which pods still run, to settle devices and
    CPUs listed by several pods (None: not known, every holder counts, as before).
    """
    anomalies: Counter[str] = Counter()
    anomalies["empty_name"] += sum(
        1
        for pod in reading.pods
        for name in (pod.namespace, pod.name, *(c.name for c in pod.containers))
        if not name
    )
    states: dict[tuple[str, str], str] = {}
    basis, node_cpus, assignments, container_cpus = account_cpus(
        reading, topology, anomalies, liveness, states
    )
    node_devices, container_devices, device_states = account_devices(
        reading, anomalies, liveness, states
    )
    node_memory, container_memory = account_memory(reading, anomalies)
    pod_cpus, pod_memory = _pod_pools(reading.pods, topology)
    kinds = ANOMALIES if liveness is None else (*ANOMALIES, LIVENESS_ANOMALY)
    return Accounting(
        cpu_basis=basis,
        node_cpus=MappingProxyType(node_cpus),
        cpu_assignments=tuple(assignments),
        container_cpus=tuple(container_cpus),
        node_devices=MappingProxyType(node_devices),
        container_devices=tuple(container_devices),
        device_states=tuple(device_states),
        node_memory=MappingProxyType(node_memory),
        container_memory=tuple(container_memory),
        claims=tuple(_claims(reading.pods)),
        pods=len(reading.pods),
        containers=sum(len(p.containers) for p in reading.pods),
        anomalies=MappingProxyType({k: anomalies.get(k, 0) for k in kinds}),
        pod_shared_cpus=tuple(pod_cpus),
        pod_shared_memory=tuple(pod_memory),
        dra_devices=MappingProxyType(_dra_devices(reading.pods)),
    )


__all__ = [
    "ANOMALIES",
    "CPU_POOLS",
    "DEVICE_STATES",
    "DRA_STATES",
    "LIVENESS_ANOMALY",
    "MEMORY_STATES",
    "POD_STATES",
    "Accounting",
    "CpuAssignment",
    "DeviceState",
    "HeldClaim",
    "HeldDevice",
    "HeldMemory",
    "Holder",
    "HolderCount",
    "PodCount",
    "PodMemory",
    "account",
    "pod_state",
]
