"""The exporter's metric samples of one node -> the node state the kubelet admits against.

Which family gives what (docs/metrics.md has each):

- policies: ``podres_kubelet_config_info`` (Topology Manager policy, scope and options,
  CPU manager policy and options, memory manager policy); without it (the kubelet's
  configuration unreadable, or an exporter too old to serve it) the kubelet's defaults
  are assumed, and the answer says so;
- CPUs: ``podres_node_cpus{pool,numa_node}`` (exclusive, shared_free, reserved per NUMA
  node), ``podres_node_free_cores{numa_node}`` (cores whose every thread is free) and
  ``podres_node_cpu_threads_per_core``;
- devices: ``podres_node_registered_devices{resource,numa_node}`` (every device the
  device manager knows, any health), ``podres_node_allocatable_devices`` (the healthy
  ones) and ``podres_node_devices{state="free"}``; without the first, every id the
  kubelet reports (``podres_node_devices``, all states);
- memory: ``podres_node_allocatable_memory_bytes`` and ``podres_node_memory_bytes{state=
  "free"}`` per type and NUMA node; the memory manager's NUMA groups from
  ``podres_node_memory_bytes{state="allocated"}`` per placement (a block pinned across
  nodes is under their joint label, ``0,1``);
- ``podres_node_numa_distance{numa_node,to_numa_node}``.

The metrics carry counts, not ids: the state is made of counts alone. Its CPU ids and
cores are made up so that every NUMA node has the exported free CPUs, free whole cores
and reserved CPUs (the CPU manager decides by these counts: which ids it would take is
not the question); device ids are ``NUMA/i`` per resource. The same samples give the
same state whatever the source: a node read through Prometheus, its exporter or the
local kubelet is answered alike.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from podres_exporter.core.topology import (
    MEMORY_TYPES,
    CpuInfo,
    CpuPolicy,
    DeviceInfo,
    MemoryPolicy,
    NodeState,
    NumaMemory,
    Policies,
    Scope,
    TopologyPolicy,
)
from podres_exporter.top.rows import AnySample

__all__ = [
    "FAMILIES",
    "NODE_INFO",
    "NodeFacts",
    "node_facts",
    "policies_from",
]

NODE_INFO = "podres_node_info"
KUBELET_UP = "podres_kubelet_up"
CONFIG_INFO = "podres_kubelet_config_info"
CONFIG_UP = "podres_kubelet_config_up"
NODE_CPUS = "podres_node_cpus"
FREE_CORES = "podres_node_free_cores"
THREADS = "podres_node_cpu_threads_per_core"
REGISTERED = "podres_node_registered_devices"
DEVICES = "podres_node_devices"
ALLOCATABLE_DEVICES = "podres_node_allocatable_devices"
MEMORY = "podres_node_memory_bytes"
ALLOCATABLE_MEMORY = "podres_node_allocatable_memory_bytes"
DISTANCE = "podres_node_numa_distance"
FAMILIES = (
    NODE_INFO, KUBELET_UP, CONFIG_INFO, CONFIG_UP, NODE_CPUS, FREE_CORES, THREADS, REGISTERED,
    DEVICES, ALLOCATABLE_DEVICES, MEMORY, ALLOCATABLE_MEMORY, DISTANCE,
)  # fmt: skip
"""Every family ``podres fit`` reads."""

_FREE, _RESERVED, _EXCLUSIVE = "shared_free", "reserved", "exclusive"
_DEVICE_STATES = ("free", "allocated", "allocated_unhealthy")


@dataclass(frozen=True)
class NodeFacts:
    """One node's admission state and what the answer must say about it.

    ``key``: the counts the state is made of, equal for nodes alike (their answers are
    alike: computed once). ``notes``: what the answer rests on that may not hold (the
    policies assumed, the kubelet down and the data stale)."""

    node: str
    state: NodeState
    policies_known: bool
    kubelet_up: bool
    notes: tuple[str, ...]
    key: tuple[Any, ...] = field(repr=False)


def _numa_set(label: str) -> frozenset[int] | None:
    """``"0"`` -> {0}, ``"0,1"`` -> {0, 1}, ``"none"`` (or no label) -> {} (the kubelet
    reports no topology); None when malformed."""
    if not label or label == "none":
        return frozenset()
    try:
        return frozenset(int(p) for p in label.split(","))
    except ValueError:
        return None


def _options(text: str) -> dict[str, str]:
    """``a=true,b=8`` (the kubelet's option maps as the exporter writes them) as a dict."""
    out: dict[str, str] = {}
    for part in text.replace(";", ",").split(","):
        key, _, value = part.strip().partition("=")
        if key:
            out[key.strip()] = value.strip() or "true"
    return out


def _true(options: Mapping[str, str], key: str) -> bool:
    return options.get(key, "false").lower() == "true"


def policies_from(labels: Mapping[str, str]) -> tuple[Policies, list[str]]:
    """The policies ``podres_kubelet_config_info``'s labels name, and a note for each
    value not understood (its default is taken)."""
    notes: list[str] = []

    def pick(enum: Any, label: str, default: Any) -> Any:
        value = labels.get(label, "")
        if not value:
            return default
        try:
            return enum(value)
        except ValueError:
            notes.append(f"{label} {value!r} not understood: {default.value} assumed")
            return default

    topo = _options(labels.get("topology_manager_options", ""))
    cpu = _options(labels.get("cpu_manager_options", ""))
    try:
        max_numa = int(topo.get("max-allowable-numa-nodes", "8"))
    except ValueError:
        max_numa = 8
    memory_text = labels.get("memory_manager_policy", "")
    memory = {"none": MemoryPolicy.NONE, "static": MemoryPolicy.STATIC}.get(
        memory_text.lower(), MemoryPolicy.NONE
    )
    if memory_text and memory_text.lower() not in ("none", "static"):
        notes.append(f"memory_manager_policy {memory_text!r} not understood: None assumed")
    return (
        Policies(
            topology=pick(TopologyPolicy, "topology_manager_policy", TopologyPolicy.NONE),
            scope=pick(Scope, "topology_manager_scope", Scope.CONTAINER),
            prefer_closest_numa_nodes=_true(topo, "prefer-closest-numa-nodes"),
            max_allowable_numa_nodes=max_numa,
            cpu=pick(CpuPolicy, "cpu_manager_policy", CpuPolicy.NONE),
            full_pcpus_only=_true(cpu, "full-pcpus-only"),
            distribute_cpus_across_numa=_true(cpu, "distribute-cpus-across-numa"),
            align_by_socket=_true(cpu, "align-by-socket"),
            memory=memory,
        ),
        notes,
    )


def _frozen_value(value: Any, frozen: Any) -> Any:
    if isinstance(value, Mapping):
        return frozen(value)
    return tuple(value) if isinstance(value, list) else value


@dataclass
class _Counts:
    """The counts one node's samples hold, by family."""

    config: dict[str, str] | None = None
    config_up: float | None = None
    kubelet_up: float | None = None
    cpus: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    free_cores: dict[int, int] = field(default_factory=dict)
    threads: int = 0
    registered: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    devices: dict[tuple[str, str], dict[str, int]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    healthy: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    memory: dict[str, dict[int, list[int]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(lambda: [0, 0]))
    )
    distances: dict[int, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    # Pinned memory per type and NUMA placement (``"0"``, ``"0,1"``).
    pinned: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )

    def key(self, policies: Policies) -> tuple[Any, ...]:
        """Every count the state is made of, with the policies: one key, one state."""

        def frozen(table: Mapping[Any, Any]) -> tuple[Any, ...]:
            return tuple(sorted((k, _frozen_value(v, frozen)) for k, v in table.items()))

        return (
            policies, self.threads, frozen(self.cpus), frozen(self.free_cores),
            frozen(self.registered), frozen(self.devices), frozen(self.healthy),
            frozen(self.memory), frozen(self.distances), frozen(self.pinned),
        )  # fmt: skip

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:  # noqa: PLR0912 - one branch per family
        numa = labels.get("numa_node", "")
        amount = int(value)
        if name == CONFIG_INFO:
            self.config = dict(labels)
        elif name == CONFIG_UP:
            self.config_up = value
        elif name == KUBELET_UP:
            self.kubelet_up = value
        elif name == NODE_CPUS and numa.isdigit():
            self.cpus[int(numa)][labels.get("pool", "")] = amount
        elif name == FREE_CORES and numa.isdigit():
            self.free_cores[int(numa)] = amount
        elif name == THREADS:
            self.threads = amount
        elif name == REGISTERED:
            self.registered[labels.get("resource", "")][numa] = amount
        elif name == DEVICES:
            self.devices[(labels.get("resource", ""), numa)][labels.get("state", "")] = amount
        elif name == ALLOCATABLE_DEVICES:
            self.healthy[labels.get("resource", "")][numa] = amount
        elif name == MEMORY and labels.get("state") == "allocated":
            self.pinned[labels.get("memory_type", "")][numa] += amount
        elif name in (MEMORY, ALLOCATABLE_MEMORY) and numa.isdigit():
            kind = labels.get("memory_type", "")
            if name == ALLOCATABLE_MEMORY:
                self.memory[kind][int(numa)][0] = amount
            elif labels.get("state") == "free":
                self.memory[kind][int(numa)][1] = amount
        elif name == DISTANCE and numa.isdigit() and labels.get("to_numa_node", "").isdigit():
            self.distances[int(numa)][int(labels["to_numa_node"])] = amount


def _core_layout(free: int, busy: list[str], whole: int, threads: int) -> list[list[str]]:
    """The cores of one NUMA node as lists of CPU kinds (``f``ree, ``r``eserved,
    ``x``clusive): ``whole`` cores with every thread free, then cores that each hold at
    least one CPU not free, the other free CPUs beside those (as many per core as fit)."""
    cores = [["f"] * threads for _ in range(whole)]
    rest_free = free - whole * threads
    partial: list[list[str]] = [
        [] for _ in range(math.ceil((rest_free + len(busy)) / threads) if threads else 0)
    ]
    pending = list(busy)
    for core in partial:
        if pending:
            core.append(pending.pop())
    for core in partial:
        while rest_free and len(core) < threads:
            core.append("f")
            rest_free -= 1
    for core in partial:
        while pending and len(core) < threads:
            core.append(pending.pop())
    leftover = ["f"] * rest_free + pending  # counts that contradict each other: kept whole
    cores.extend(c for c in partial if c)
    cores.extend(leftover[i : i + threads] for i in range(0, len(leftover), threads))
    return cores


@functools.lru_cache(maxsize=4096)
def _numa_cpus(
    numa: int, first_id: int, first_core: int, counts: tuple[int, int, int, int], threads: int
) -> tuple[tuple[CpuInfo, ...], tuple[int, ...], tuple[int, ...], int]:
    """One NUMA node's CPUs from ``first_id`` and cores from ``first_core``, with
    ``counts`` (free, reserved, exclusive, whole free cores): the CPUs, the free and the
    reserved ids, the cores used. Kept: a fleet's NUMA nodes are much alike."""
    n_free, n_res, n_excl, whole = counts
    cpus: list[CpuInfo] = []
    free: list[int] = []
    reserved: list[int] = []
    # The reserved CPUs are placed first beside the free CPUs that are not in whole
    # cores: under full-pcpus-only the CPU manager hands out whole cores only, so the
    # sibling of a reserved CPU is free (or reserved), and it is not a physical CPU the
    # option lets be taken (policy_static.go ``GetAvailablePhysicalCPUs``: the reserved
    # CPUs' cores are left out). Without the option the cores do not change admission.
    layout = _core_layout(n_free, ["x"] * n_excl + ["r"] * n_res, whole, threads)
    for offset, core in enumerate(layout):
        for kind in core:
            cpu = CpuInfo(id=first_id + len(cpus), core=first_core + offset, socket=numa, numa=numa)
            cpus.append(cpu)
            if kind == "f":
                free.append(cpu.id)
            elif kind == "r":
                reserved.append(cpu.id)
    return tuple(cpus), tuple(free), tuple(reserved), len(layout)


def _cpus(c: _Counts) -> tuple[tuple[CpuInfo, ...], frozenset[int], frozenset[int]]:
    threads = max(1, c.threads)
    cpus: list[CpuInfo] = []
    free: list[int] = []
    reserved: list[int] = []
    cores = 0
    for numa in sorted(c.cpus):
        pools = c.cpus[numa]
        n_free, n_res, n_excl = (max(0, pools.get(p, 0)) for p in (_FREE, _RESERVED, _EXCLUSIVE))
        whole = max(0, min(c.free_cores.get(numa, n_free // threads), n_free // threads))
        counts = (n_free, n_res, n_excl, whole)
        made, f, r, used = _numa_cpus(numa, len(cpus), cores, counts, threads)
        cpus.extend(made)
        free.extend(f)
        reserved.extend(r)
        cores += used
    return tuple(cpus), frozenset(free), frozenset(reserved)


def _devices(c: _Counts) -> tuple[dict[str, tuple[DeviceInfo, ...]], dict[str, frozenset[str]]]:
    registered: dict[str, dict[str, int]] = {r: dict(v) for r, v in c.registered.items()}
    free: dict[str, dict[str, int]] = defaultdict(dict)
    seen: dict[str, dict[str, int]] = defaultdict(dict)
    for (resource, numa), states in c.devices.items():
        free[resource][numa] = states.get("free", 0)
        seen[resource][numa] = sum(states.get(s, 0) for s in _DEVICE_STATES)
    for resource, per_numa in seen.items():  # no registered family: every id reported
        registered.setdefault(resource, per_numa)
    devices: dict[str, tuple[DeviceInfo, ...]] = {}
    free_ids: dict[str, frozenset[str]] = {}
    for resource in sorted(registered):
        infos: list[DeviceInfo] = []
        taken: set[str] = set()
        for label in sorted(registered[resource]):
            where = _numa_set(label)
            if where is None:
                continue
            total = max(0, registered[resource][label])
            states = c.devices.get((resource, label), {})
            healthy = c.healthy.get(resource, {}).get(
                label, states.get("free", 0) + states.get("allocated", 0)
            )
            healthy = min(total, max(0, healthy))
            n_free = min(healthy, max(0, free[resource].get(label, 0)))
            for i in range(total):
                dev = DeviceInfo(id=f"{label or '-'}/{i}", numa=where, healthy=i < healthy)
                infos.append(dev)
                if i < n_free:
                    taken.add(dev.id)
        devices[resource] = tuple(infos)
        free_ids[resource] = frozenset(taken)
    return devices, free_ids


def _placements(per_label: Mapping[str, int]) -> list[tuple[tuple[int, ...], int]]:
    """Pinned bytes per placement, each node alone first, then the groups narrowest
    first (the widest last: see :func:`_memory_groups`)."""
    placed = []
    for label, amount in per_label.items():
        nodes = _numa_set(label)
        if nodes and amount > 0:
            placed.append((tuple(sorted(nodes)), amount))
    return sorted(placed, key=lambda p: (len(p[0]), p[0]))


def _memory_groups(c: _Counts) -> tuple[dict[int, tuple[int, ...]], dict[int, int]]:
    """The memory manager's NUMA groups (its machine state's ``Cells``) and which NUMA
    nodes hold pinned memory (``NumberOfAssignments`` above 0), from the allocated
    memory per placement: a block pinned across nodes is exported under their joint
    label (``0,1``). The rules forbid a node in a group from being used alone, and a
    node used alone from joining a group (memorymanager/policy_static.go
    ``calculateHints``); the number of blocks is not exported, one per placement stands
    for them (the rules ask only whether there is any).

    A node can hold memory alone and in a group at once: a pod whose merged hint is
    every NUMA node (no NUMA-managed resource but its memory, which fits no narrower
    mask) is pinned across all of them, whatever they hold (``Allocate`` only checks the
    hint holds the request). Its ``Cells`` are then those of the node's last block
    (``updateMachineState``), an order the metrics do not carry: the group is taken, the
    widest where there are several, as that is how such states mostly arise."""
    cells: dict[int, tuple[int, ...]] = {}
    assignments: dict[int, int] = {}
    every: dict[str, int] = defaultdict(int)
    for per in c.pinned.values():
        for label, amount in per.items():
            every[label] += amount
    for group, _ in _placements(every):
        for n in group:
            assignments[n] = assignments.get(n, 0) + 1
            cells[n] = group
    return cells, assignments


def _memory(c: _Counts) -> dict[str, dict[int, NumaMemory]]:
    """Allocatable and free memory per type and NUMA node. Free is taken as the memory
    manager keeps it (``updateMachineState``): a block pinned across nodes is taken
    from the first of them, then the next; the exported free share splits it evenly
    (never below 0), which loses memory where one node's share is larger than what it
    had. Without the allocated series, the exported free is used."""
    out: dict[str, dict[int, NumaMemory]] = {}
    for kind, per in sorted(c.memory.items()):
        if kind not in MEMORY_TYPES:
            continue
        pinned = c.pinned.get(kind)
        if not pinned:
            out[kind] = {n: NumaMemory(a, min(a, f)) for n, (a, f) in sorted(per.items())}
            continue
        free = {n: a for n, (a, _) in per.items()}
        for nodes, amount in _placements(pinned):
            need = amount
            for n in nodes:
                got = min(max(0, free.get(n, 0)), need)
                if n in free:
                    free[n] -= got
                need -= got
        out[kind] = {n: NumaMemory(a, max(0, free[n])) for n, (a, _) in sorted(per.items())}
    return out


def node_facts(node: str, samples: Iterable[AnySample]) -> NodeFacts:
    """The admission state of ``node`` from its samples (every family of :data:`FAMILIES`
    it has; the others are ignored)."""
    c = _Counts()
    for s in samples:
        if math.isfinite(s.value):
            c.add(s.name, s.labels, s.value)
    notes: list[str] = []
    known = c.config is not None and c.config_up != 0
    if known:
        policies, odd = policies_from(c.config or {})
        notes.extend(odd)
    else:
        policies = Policies()
        why = "unreadable" if c.config_up == 0 else "not exported"
        notes.append(
            f"kubelet configuration {why}: its policies are assumed to be the defaults "
            "(topology none, cpu none, memory None)"
        )
    if c.kubelet_up == 0:
        notes.append("kubelet not answering: the exporter's last reading is used")
    if not c.cpus:
        notes.append("no CPU counts (podres_node_cpus): no exclusive CPUs can be given")
    cpus, free, reserved = _cpus(c)
    devices, free_devices = _devices(c)
    memory = _memory(c)
    distances = {a: dict(sorted(row.items())) for a, row in sorted(c.distances.items())}
    cells, assignments = _memory_groups(c)
    state = NodeState(
        policies=policies,
        cpus=cpus,
        free_cpus=free,
        reserved_cpus=reserved,
        devices=devices,
        free_devices=free_devices,
        memory=memory,
        distances=distances,
        numa_nodes=tuple(sorted(c.cpus)),
        memory_cells=cells,
        memory_assignments=assignments,
    )
    return NodeFacts(node, state, known, c.kubelet_up != 0, tuple(notes), c.key(policies))
