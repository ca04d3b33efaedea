"""Metric samples -> the rows of ``podres top``. Pure: no I/O, no clock, no terminal.

Every source (the local kubelet rendered in-process, an exporter's ``/metrics``,
Prometheus) ends up as samples (name, labels, value: :class:`AnySample`) in a
:class:`Reading`; :func:`build` turns one reading (and, for CPU busy shares, an earlier one) into
per-node headers, container rows and device rows. :mod:`.selection` filters and
sorts them for a view; :mod:`.jsonout` is ``-o json``.

Which metric feeds which value (docs/metrics.md has each metric):

- header: ``podres_node_cpus`` (CPUs per NUMA node and pool), ``podres_node_devices``
  (free devices per resource), ``podres_node_memory_bytes`` (free memory and hugepages
  per NUMA node), ``podres_kubelet_up``, ``podres_snapshot_age_seconds``, ``podres_pods``,
  ``podres_containers``;
- container rows: ``podres_cpu_assignment_info`` (exclusive CPU ids; container ``""``
  is a pod's own, its private shared pool), ``podres_pod_shared_pool_cpus`` (a pod row
  for each pod with a pod-level CPU set, even when its pool is empty),
  ``podres_cpu_busy_seconds_total`` (busy share, from two readings) or :data:`BUSY_RATIO`
  (a rate the source computed), ``podres_container_device_info``,
  ``podres_container_memory_bytes``, ``podres_container_numa_aligned``, holder-labelled
  ``podres_gpu_utilization_ratio`` / ``podres_gpu_memory_{used,total}_bytes`` and, for a
  GPU shared with others, the holder's ``podres_gpu_holder_sm_utilization_ratio`` /
  ``podres_gpu_holder_memory_used_bytes``;
- device rows: ``podres_node_device_info`` (state, hence health and "free"),
  ``podres_container_device_info`` (holders), ``podres_device_resolution_info`` (the
  physical device of an id) to find ``podres_gpu_*`` / ``podres_drm_busy_ratio`` values.

Samples carrying a ``node`` label (or else an ``instance`` label, as Prometheus adds)
are grouped by it; samples with neither belong to the reading's ``origin``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Protocol

from podres_exporter.core.cpulist import format_cpulist
from podres_exporter.core.model import Holder

# A per-CPU busy share (0-1) the source computed itself (Prometheus: rate() of
# podres_cpu_busy_seconds_total), with that metric's labels.
BUSY_RATIO = "podres_cpu_busy_ratio"
BUSY_COUNTER = "podres_cpu_busy_seconds_total"
CPU_SOURCE_STAMP = "podres_source_last_success_timestamp_seconds"

# The metrics top reads; the Prometheus source asks for each (the busy counter as a rate).
METRICS = (
    "podres_kubelet_up",
    "podres_snapshot_age_seconds",
    "podres_pods",
    "podres_containers",
    "podres_node_cpus",
    "podres_cpu_assignment_info",
    "podres_pod_shared_pool_cpus",
    "podres_node_devices",
    "podres_node_device_info",
    "podres_container_device_info",
    "podres_node_memory_bytes",
    "podres_container_memory_bytes",
    "podres_container_numa_aligned",
    "podres_device_resolution_info",
    "podres_gpu_healthy",
    "podres_gpu_shared",
    "podres_gpu_utilization_ratio",
    "podres_gpu_memory_used_bytes",
    "podres_gpu_memory_total_bytes",
    "podres_gpu_holder_sm_utilization_ratio",
    "podres_gpu_holder_memory_used_bytes",
    "podres_drm_busy_ratio",
    CPU_SOURCE_STAMP,
    BUSY_COUNTER,
)


class AnySample(Protocol):
    """What :func:`build` reads of a sample: a :class:`Sample`, or a collector's own
    (``prometheus_client``'s), taken as it is by the local source."""

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def value(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Sample:
    """One metric sample: full sample name (``..._total`` included), labels, value."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Reading:
    """Every sample of one read of a source, when it was taken (Unix seconds) and from where.

    ``origin`` names the node of samples that carry no ``node`` or ``instance`` label
    (the local node, or the exporter's ``host:port``).
    """

    samples: tuple[AnySample, ...]
    at: float
    origin: str


# ---------------------------------------------------------------- rows


@dataclass(frozen=True, slots=True)
class NumaCpus:
    """CPUs of one NUMA node per pool (``podres_node_cpus``)."""

    numa_node: str
    allocatable: int
    exclusive: int
    shared_free: int
    reserved: int


@dataclass(frozen=True, slots=True)
class ResourceCount:
    """Devices of one resource, summed over NUMA nodes (``podres_node_devices``).

    ``allocatable`` and ``unallocated`` are None when the kubelet does not serve
    GetAllocatableResources (only held devices are known then).
    """

    resource: str
    allocatable: int | None
    allocated: int
    unallocated: int | None
    allocated_unhealthy: int


@dataclass(frozen=True, slots=True)
class MemoryFree:
    """Free and allocatable bytes of one memory type on one NUMA node."""

    numa_node: str
    memory_type: str
    free: float
    allocatable: float


@dataclass(frozen=True, slots=True)
class NodeHeader:
    """What a node has left, and how fresh the data is."""

    node: str
    kubelet_up: bool | None
    age_s: float | None
    pods: int | None
    containers: int | None
    cpus: tuple[NumaCpus, ...]
    devices: tuple[ResourceCount, ...]
    memory: tuple[MemoryFree, ...]


@dataclass(frozen=True, slots=True)
class DeviceHolding:
    """One device a container row holds: its resource, id and NUMA node.

    An entry of :attr:`ContainerRow.devices` (from ``podres_container_device_info``);
    the holder is the row's container.
    """

    resource: str
    device_id: str
    numa_node: str


@dataclass(frozen=True, slots=True)
class ContainerRow:
    """One container that holds exclusive CPUs, devices or pinned memory.

    ``busy``: mean busy share (0-1) of its exclusive CPUs, None when unknown (a single
    reading, no exclusive CPUs). ``gpu_util`` / ``gpu_mem_*``: over the GPUs (and MIG
    instances) it holds; ``gpu_shared`` when some value is its share of a GPU that
    others hold too. ``shared_pool``: for a pod's own row (container ``""``) of a pod
    with a pod-level CPU set, how many CPUs its private shared pool has; else None.
    """

    node: str
    namespace: str
    pod: str
    container: str
    cpus: tuple[int, ...] = ()
    busy: float | None = None
    numa_nodes: tuple[str, ...] = ()
    aligned: bool | None = None
    devices: tuple[DeviceHolding, ...] = ()
    memory: tuple[tuple[str, float], ...] = ()
    gpu_util: float | None = None
    gpu_mem_used: float | None = None
    gpu_mem_total: float | None = None
    gpu_shared: bool = False
    shared_pool: int | None = None

    @property
    def holder(self) -> Holder:
        return Holder(self.namespace, self.pod, self.container)

    @property
    def cpulist(self) -> str:
        """Exclusive CPUs as compact ranges (``4-7,12``)."""
        return format_cpulist(self.cpus)

    def device_counts(self) -> tuple[tuple[str, int], ...]:
        """(resource, how many) per resource held, sorted by resource."""
        counts: dict[str, int] = defaultdict(int)
        for d in self.devices:
            counts[d.resource] += 1
        return tuple(sorted(counts.items()))

    @property
    def pinned_bytes(self) -> float:
        return sum(v for _, v in self.memory)


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One device id the kubelet reports, free or held.

    ``state``: ``free``, ``allocated`` or ``allocated_unhealthy`` (from
    ``podres_node_device_info``); ``healthy`` is false for a held device the kubelet no
    longer lists as allocatable, or a GPU that stopped answering (``podres_gpu_healthy``).
    """

    node: str
    resource: str
    device_id: str
    numa_node: str
    state: str
    healthy: bool
    holders: tuple[Holder, ...] = ()
    physical_id: str | None = None
    util: float | None = None
    mem_used: float | None = None
    mem_total: float | None = None


@dataclass(frozen=True, slots=True)
class NodeData:
    """One node: its header and rows."""

    header: NodeHeader
    containers: tuple[ContainerRow, ...]
    devices: tuple[DeviceRow, ...]


@dataclass(frozen=True, slots=True)
class TopData:
    """What one frame shows: every node read, and a notice (a failed refresh) if any."""

    nodes: tuple[NodeData, ...]
    source: str = ""
    notice: str | None = None


# ---------------------------------------------------------------- helpers


def node_of(labels: Mapping[str, str], origin: str) -> str:
    """The node a sample belongs to: its ``node`` label, else ``instance``, else ``origin``."""
    return labels.get("node") or labels.get("instance") or origin


# Holders made so far, by (namespace, pod, container): a container's series share one, and
# a plain tuple is made faster than a Holder. Emptied when it grows past _HOLDERS_KEPT.
_HOLDERS: dict[tuple[str, str, str], Holder] = {}
_HOLDERS_KEPT = 1 << 16


def _holder(labels: Mapping[str, str]) -> Holder | None:
    key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
    if not key[1]:
        return None
    h = _HOLDERS.get(key)
    if h is None:
        if len(_HOLDERS) >= _HOLDERS_KEPT:
            _HOLDERS.clear()
        h = _HOLDERS[key] = Holder(*key)
    return h


def _numas(label: str) -> tuple[str, ...]:
    """``"0,1"`` -> ("0", "1"); ``"none"`` and empty -> ()."""
    if label in ("", "none"):
        return ()
    return tuple(p for p in label.split(",") if p)


_NUMBERED = re.compile(r"^(\D*)(\d+)$")


# Remembered: a frame sorts every device id by it several times (its rows, then a view).
@lru_cache(maxsize=1 << 17)
def natural_key(text: str) -> tuple[Any, ...]:
    """Sort ``kvm2`` before ``kvm10`` (a name then a number); anything else as text."""
    m = _NUMBERED.match(text)
    return (m.group(1), int(m.group(2)), "") if m else (text, -1, text)


def numa_key(numa: str) -> tuple[Any, ...]:
    """Sort NUMA nodes in natural order, ``none`` (a device with no NUMA node) last."""
    return (numa == "none", natural_key(numa))


class _Index:
    """The samples of one node by metric name."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[AnySample]] = defaultdict(list)

    def get(self, name: str) -> list[AnySample]:
        return self.by_name.get(name, [])

    def scalar(self, name: str) -> float | None:
        found = self.get(name)
        return found[0].value if found else None


def _group(reading: Reading) -> dict[str, _Index]:
    """The samples of each node (:func:`node_of`), by name; in one pass, the hot loop of
    a large node's reading."""
    nodes: dict[str, _Index] = {}
    origin = reading.origin
    last_key, last = "", None
    for s in reading.samples:
        labels = s.labels
        key = labels.get("node") or labels.get("instance") or origin
        if key != last_key or last is None:
            last = nodes.get(key)
            if last is None:
                last = nodes[key] = _Index()
            last_key = key
        last.by_name[s.name].append(s)
    return nodes


def cpu_stamp(reading: Reading) -> float | None:
    """When the source behind ``reading`` last read CPU times (its first node's), if it says."""
    for s in reading.samples:
        if s.name == CPU_SOURCE_STAMP and s.labels.get("source") == "cpu":
            return s.value
    return None


def _cpu_stamp(index: _Index) -> float | None:
    for s in index.get(CPU_SOURCE_STAMP):
        if s.labels.get("source") == "cpu":
            return s.value
    return None


def busy_key(labels: Mapping[str, str]) -> tuple[str, str, str, str]:
    """The CPU and holder a busy sample is about: (cpu, namespace, pod, container)."""
    return (
        labels.get("cpu", ""),
        labels.get("namespace", ""),
        labels.get("pod", ""),
        labels.get("container", ""),
    )


def _busy_ratios(
    current: _Index, previous: _Index | None, elapsed_s: float | None
) -> dict[tuple[str, str, str, str], float]:
    """Busy share per (cpu, holder): a source-computed rate, else the counter's rise.

    The rise of ``podres_cpu_busy_seconds_total`` is divided by the time between the
    two CPU-time reads behind it (``podres_source_last_success_timestamp_seconds{source=
    "cpu"}``), or, without that series, by ``elapsed_s`` between the two readings. When
    the source has not read CPU times again in between, nothing is known.
    """
    direct = current.get(BUSY_RATIO)
    if direct:
        return {busy_key(s.labels): min(1.0, max(0.0, s.value)) for s in direct}
    if previous is None:
        return {}
    now_stamp, then_stamp = _cpu_stamp(current), _cpu_stamp(previous)
    if now_stamp is not None and then_stamp is not None:
        span: float | None = now_stamp - then_stamp
    else:
        span = elapsed_s
    if span is None or span <= 0:
        return {}
    before = {busy_key(s.labels): s.value for s in previous.get(BUSY_COUNTER)}
    out: dict[tuple[str, str, str, str], float] = {}
    for s in current.get(BUSY_COUNTER):
        key = busy_key(s.labels)
        if key in before and s.value >= before[key]:
            out[key] = min(1.0, (s.value - before[key]) / span)
    return out


def cpu_times_advanced(before: Reading, after: Reading) -> bool:
    """True when ``after`` carries CPU times read since ``before`` (or no CPU-time stamps).

    An exporter that has not polled in between serves the same counters: comparing the
    two would say nothing about busy shares.
    """
    stamps_after = {n: _cpu_stamp(i) for n, i in _group(after).items()}
    if all(v is None for v in stamps_after.values()):
        return True
    return stamps_after != {n: _cpu_stamp(i) for n, i in _group(before).items()}


def advance_baseline(
    baseline: Reading | None, last: Reading | None, new: Reading
) -> Reading | None:
    """The reading to compare ``new`` with for busy shares, given the previous two.

    ``last`` becomes the baseline once ``new`` carries CPU times read after it;
    otherwise the older baseline is kept.
    """
    if last is None:
        return baseline
    return last if cpu_times_advanced(last, new) else baseline


def needs_second_reading(reading: Reading) -> bool:
    """True when busy shares must come from a second reading (no source-computed rate)."""
    names = {s.name for s in reading.samples}
    return BUSY_COUNTER in names and BUSY_RATIO not in names


# ---------------------------------------------------------------- build


def _header(node: str, idx: _Index) -> NodeHeader:
    cpus: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in idx.get("podres_node_cpus"):
        cpus[s.labels.get("numa_node", "")][s.labels.get("pool", "")] += int(s.value)
    numa_cpus = tuple(
        NumaCpus(
            numa_node=n,
            allocatable=p.get("allocatable", 0),
            exclusive=p.get("exclusive", 0),
            shared_free=p.get("shared_free", 0),
            reserved=p.get("reserved", 0),
        )
        for n, p in sorted(cpus.items(), key=lambda kv: numa_key(kv[0]))
    )
    devs: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for s in idx.get("podres_node_devices"):
        devs[s.labels.get("resource", "")][s.labels.get("state", "")] += int(s.value)
    counts = tuple(
        ResourceCount(
            resource=r,
            allocatable=st.get("allocatable"),
            allocated=st.get("allocated", 0),
            unallocated=st.get("unallocated"),
            allocated_unhealthy=st.get("allocated_unhealthy", 0),
        )
        for r, st in sorted(devs.items())
    )
    mem: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for s in idx.get("podres_node_memory_bytes"):
        key = (s.labels.get("numa_node", ""), s.labels.get("memory_type", ""))
        mem[key][s.labels.get("state", "")] = s.value
    memory = tuple(
        MemoryFree(numa_node=n, memory_type=t, free=st["free"], allocatable=st["allocatable"])
        for (n, t), st in sorted(
            mem.items(), key=lambda kv: (numa_key(kv[0][0]), kv[0][1] != "memory", kv[0][1])
        )
        if "free" in st and "allocatable" in st
    )
    up = idx.scalar("podres_kubelet_up")
    pods = idx.scalar("podres_pods")
    containers = idx.scalar("podres_containers")
    return NodeHeader(
        node=node,
        kubelet_up=None if up is None else up >= 1,
        age_s=idx.scalar("podres_snapshot_age_seconds"),
        pods=None if pods is None else int(pods),
        containers=None if containers is None else int(containers),
        cpus=numa_cpus,
        devices=counts,
        memory=memory,
    )


@dataclass(slots=True)
class _Acc:
    """What the samples say about one container, gathered before its row is made."""

    cpus: dict[int, str] = field(default_factory=dict)
    devices: dict[tuple[str, str], str] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    memory_numa: set[str] = field(default_factory=set)
    aligned: bool | None = None
    gpu_util: dict[str, float] = field(default_factory=dict)
    gpu_used: dict[str, float] = field(default_factory=dict)
    gpu_total: dict[str, float] = field(default_factory=dict)
    shared_pool: int | None = None  # a pod's own row: CPUs in its private shared pool


def _by_uuid(samples: Iterable[AnySample]) -> dict[str, float]:
    return {s.labels.get("uuid", ""): s.value for s in samples}


def _held(samples: Iterable[AnySample]) -> Iterator[tuple[Holder, AnySample]]:
    """The samples that name a container, each with it."""
    for s in samples:
        h = _holder(s.labels)
        if h is not None:
            yield h, s


def _gather(idx: _Index) -> dict[Holder, _Acc]:
    """Per container: its exclusive CPUs, devices, pinned memory, alignment and own GPUs."""
    acc: dict[Holder, _Acc] = defaultdict(_Acc)
    for h, s in _held(idx.get("podres_cpu_assignment_info")):
        if s.labels.get("pool", "exclusive") == "exclusive":
            try:
                cpu = int(s.labels.get("cpu", ""))
            except ValueError:
                continue
            acc[h].cpus[cpu] = s.labels.get("numa_node", "")
    for h, s in _held(idx.get("podres_container_device_info")):
        key = (s.labels.get("resource", ""), s.labels.get("device_id", ""))
        acc[h].devices[key] = s.labels.get("numa_node", "none")
    for h, s in _held(idx.get("podres_container_memory_bytes")):
        acc[h].memory[s.labels.get("memory_type", "")] += s.value
        acc[h].memory_numa.update(_numas(s.labels.get("numa_node", "")))
    for h, s in _held(idx.get("podres_container_numa_aligned")):
        acc[h].aligned = s.value >= 1
    for h, s in _held(idx.get("podres_pod_shared_pool_cpus")):
        pod = acc[h._replace(container="")]
        pod.shared_pool = (pod.shared_pool or 0) + int(s.value)
    # GPU series labelled with their one holder: the whole device is the container's.
    for name, target in (
        ("podres_gpu_utilization_ratio", "gpu_util"),
        ("podres_gpu_memory_used_bytes", "gpu_used"),
        ("podres_gpu_memory_total_bytes", "gpu_total"),
    ):
        for h, s in _held(idx.get(name)):
            getattr(acc[h], target)[s.labels.get("uuid", "")] = s.value
    return acc


def _gpu_shares(idx: _Index) -> dict[Holder, dict[str, dict[str, float]]]:
    """Per container and GPU: its share of the SM time (``util``) and memory (``used``)."""
    # A GPU others hold too carries no holder; the holder's share comes from holder_* series.
    shares: dict[Holder, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for name, target in (
        ("podres_gpu_holder_sm_utilization_ratio", "util"),
        ("podres_gpu_holder_memory_used_bytes", "used"),
    ):
        for h, s in _held(idx.get(name)):
            shares[h][s.labels.get("uuid", "")][target] = s.value
    return shares


def _gpu_columns(
    a: _Acc, shares: Mapping[str, Mapping[str, float]], totals: Mapping[str, float]
) -> tuple[float | None, float | None, float | None, bool]:
    """GPU%, GPU memory used and total of a container, and whether some are shares.

    Over the GPUs it holds alone (their own series), plus its share of each GPU that
    others hold too (``shares``, with that GPU's whole memory from ``totals``).
    """
    own = set(a.gpu_util) | set(a.gpu_used) | set(a.gpu_total)
    utils = [a.gpu_util[u] for u in sorted(own) if u in a.gpu_util]
    used = [a.gpu_used[u] for u in sorted(own) if u in a.gpu_used]
    total = [a.gpu_total[u] for u in sorted(own) if u in a.gpu_total]
    shared = False
    for uuid, share in sorted(shares.items()):
        if uuid in own:
            continue
        shared = True
        if "util" in share:
            utils.append(share["util"])
        if "used" in share:
            used.append(share["used"])
            if uuid in totals:
                total.append(totals[uuid])
    return (
        sum(utils) / len(utils) if utils else None,
        sum(used) if used else None,
        sum(total) if total else None,
        shared,
    )


def _mean_busy(
    h: Holder, cpus: Iterable[int], busy: Mapping[tuple[str, str, str, str], float]
) -> float | None:
    """The mean busy share of container ``h``'s exclusive CPUs, None when none is known."""
    cpu_busy = [
        busy[(str(c), *h)] for c in sorted(cpus) if (str(c), *h) in busy
    ]  # every exclusive CPU of the container read twice, or none
    return sum(cpu_busy) / len(cpu_busy) if cpu_busy else None


def _container_row(
    node: str,
    h: Holder,
    a: _Acc,
    busy: Mapping[tuple[str, str, str, str], float],
    *,
    shares: Mapping[str, Mapping[str, float]],
    totals: Mapping[str, float],
) -> ContainerRow:
    """The row of container ``h`` from what was gathered about it."""
    gpu_util, gpu_used, gpu_total, shared = _gpu_columns(a, shares, totals)
    numa = set(a.cpus.values()) | a.memory_numa
    for n in a.devices.values():
        numa.update(_numas(n))
    numa.discard("")
    return ContainerRow(
        node=node,
        namespace=h.namespace,
        pod=h.pod,
        container=h.container,
        cpus=tuple(sorted(a.cpus)),
        busy=_mean_busy(h, a.cpus, busy),
        numa_nodes=tuple(sorted(numa, key=natural_key)),
        aligned=a.aligned,
        devices=tuple(
            DeviceHolding(r, d, n)
            for (r, d), n in sorted(
                a.devices.items(), key=lambda kv: (kv[0][0], natural_key(kv[0][1]))
            )
        ),
        memory=tuple(sorted(a.memory.items(), key=lambda kv: (kv[0] != "memory", kv[0]))),
        gpu_util=gpu_util,
        gpu_mem_used=gpu_used,
        gpu_mem_total=gpu_total,
        gpu_shared=shared,
        shared_pool=a.shared_pool,
    )


def _containers(
    node: str, idx: _Index, busy: Mapping[tuple[str, str, str, str], float]
) -> tuple[ContainerRow, ...]:
    acc = _gather(idx)
    shares = _gpu_shares(idx)
    totals = _by_uuid(idx.get("podres_gpu_memory_total_bytes"))
    rows = [
        _container_row(node, h, a, busy, shares=shares.get(h, {}), totals=totals)
        for h, a in acc.items()
    ]
    return tuple(sorted(rows, key=lambda r: r.holder))


def _devices(node: str, idx: _Index) -> tuple[DeviceRow, ...]:
    state: dict[tuple[str, str], tuple[str, str]] = {}
    for s in idx.get("podres_node_device_info"):
        labels = s.labels
        key = (labels.get("resource", ""), labels.get("device_id", ""))
        state[key] = (labels.get("numa_node", "none"), labels.get("state", ""))
    holders: dict[tuple[str, str], list[Holder]] = {}
    for s in idx.get("podres_container_device_info"):
        labels = s.labels
        key = (labels.get("resource", ""), labels.get("device_id", ""))
        h = _holder(labels)
        if h is not None:
            held = holders.get(key)
            if held is None:
                holders[key] = [h]
            elif h not in held:
                held.append(h)
        if key not in state:  # without GetAllocatableResources only held devices are known
            state[key] = (labels.get("numa_node", "none"), "allocated")
    physical = {
        (s.labels.get("resource", ""), s.labels.get("device_id", "")): s.labels.get(
            "physical_id", ""
        )
        for s in idx.get("podres_device_resolution_info")
    }
    gpu_util = _by_uuid(idx.get("podres_gpu_utilization_ratio"))
    gpu_used = _by_uuid(idx.get("podres_gpu_memory_used_bytes"))
    gpu_total = _by_uuid(idx.get("podres_gpu_memory_total_bytes"))
    gpu_healthy = _by_uuid(idx.get("podres_gpu_healthy"))
    drm_busy: dict[str, float] = {}
    for s in idx.get("podres_drm_busy_ratio"):
        for label in ("address", "card"):
            if s.labels.get(label):
                drm_busy[s.labels[label]] = s.value
    # By resource, then id in natural order: the ids of each resource sorted on their own
    # (a large node has 50,000).
    ids: dict[str, list[str]] = defaultdict(list)
    for resource, device_id in state:
        ids[resource].append(device_id)
    rows = []
    for key in (
        (resource, device_id)
        for resource in sorted(ids)
        for device_id in sorted(ids[resource], key=natural_key)
    ):
        resource, device_id = key
        numa, st = state[key]
        physical_id = physical.get(key)
        phys = physical_id or device_id
        held = holders.get(key)
        rows.append(
            DeviceRow(
                node,
                resource,
                device_id,
                numa,
                st,
                st != "allocated_unhealthy" and gpu_healthy.get(phys, 1.0) >= 1,
                (tuple(sorted(held)) if len(held) > 1 else (held[0],)) if held else (),
                physical_id,
                gpu_util.get(phys, drm_busy.get(phys)),
                gpu_used.get(phys),
                gpu_total.get(phys),
            )
        )
    return tuple(rows)


def build(
    current: Reading,
    baseline: Reading | None = None,
    *,
    source: str = "",
    notice: str | None = None,
) -> TopData:
    """The rows of every node in ``current``; busy shares against ``baseline`` when given."""
    now = _group(current)
    before = _group(baseline) if baseline is not None else {}
    elapsed = current.at - baseline.at if baseline is not None else None
    nodes = []
    for node in sorted(now, key=natural_key):
        idx = now[node]
        busy = _busy_ratios(idx, before.get(node), elapsed)
        nodes.append(
            NodeData(_header(node, idx), _containers(node, idx, busy), _devices(node, idx))
        )
    return TopData(tuple(nodes), source=source, notice=notice)


def add_busy(data: TopData, current: Reading, baseline: Reading) -> TopData:
    """``data`` with each container's busy share measured between ``baseline`` and
    ``current``, as :func:`build` measures it; both may carry the busy counters only.

    ``--once --exporter`` builds its rows from the first scrape while it waits for the
    exporter's next poll, and reads only the busy counters of that poll.
    """
    now = _group(current)
    before = _group(baseline)
    elapsed = current.at - baseline.at
    nodes = []
    for n in data.nodes:
        idx = now.get(n.header.node)
        busy = _busy_ratios(idx, before.get(n.header.node), elapsed) if idx is not None else {}
        rows = tuple(replace(r, busy=_mean_busy(r.holder, r.cpus, busy)) for r in n.containers)
        nodes.append(replace(n, containers=rows))
    return replace(data, nodes=tuple(nodes))
