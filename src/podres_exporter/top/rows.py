"""Metric samples -> the rows of ``podres top``. Pure: no I/O, no clock, no terminal.

Every source (the local kubelet rendered in-process, an exporter's ``/metrics``,
Prometheus) ends up as the same :class:`Sample` list in a :class:`Reading`;
:func:`build` turns one reading (and, for CPU busy shares, an earlier one) into
per-node headers, container rows and device rows; :func:`select` filters and
sorts them for a view; :func:`to_json` is ``-o json``.

Which metric feeds which value (docs/metrics.md has each metric):

- header: ``podres_node_cpus`` (CPUs per NUMA node and pool), ``podres_node_devices``
  (free devices per resource), ``podres_node_memory_bytes`` (free memory and hugepages
  per NUMA node), ``podres_kubelet_up``, ``podres_snapshot_age_seconds``, ``podres_pods``,
  ``podres_containers``;
- container rows: ``podres_cpu_assignment_info`` (exclusive CPU ids),
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from podres_exporter.cpulist import format_cpulist
from podres_exporter.model import Holder

# A per-CPU busy share (0-1) the source computed itself (Prometheus: rate() of
# podres_cpu_busy_seconds_total), with that metric's labels.
BUSY_RATIO = "podres_cpu_busy_ratio"
BUSY_COUNTER = "podres_cpu_busy_seconds_total"
CPU_SOURCE_STAMP = "podres_source_last_success_timestamp_seconds"

VIEWS = ("containers", "devices")
SORT_KEYS: Mapping[str, tuple[str, ...]] = {
    "containers": ("name", "cpus", "busy", "numa", "devices", "gpu", "gmem", "memory"),
    "devices": ("resource", "id", "numa", "health", "holder", "util"),
}
ALL_SORT_KEYS = tuple(dict.fromkeys(k for keys in SORT_KEYS.values() for k in keys))

# The metrics top reads; the Prometheus source asks for each (the busy counter as a rate).
METRICS = (
    "podres_kubelet_up",
    "podres_snapshot_age_seconds",
    "podres_pods",
    "podres_containers",
    "podres_node_cpus",
    "podres_cpu_assignment_info",
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

    samples: tuple[Sample, ...]
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
class HeldDevice:
    """One device a container holds."""

    resource: str
    device_id: str
    numa_node: str


@dataclass(frozen=True, slots=True)
class ContainerRow:
    """One container that holds exclusive CPUs, devices or pinned memory.

    ``busy``: mean busy share (0-1) of its exclusive CPUs, None when unknown (a single
    reading, no exclusive CPUs). ``gpu_util`` / ``gpu_mem_*``: over the GPUs (and MIG
    instances) it holds; ``gpu_shared`` when some value is its share of a GPU that
    others hold too.
    """

    node: str
    namespace: str
    pod: str
    container: str
    cpus: tuple[int, ...] = ()
    busy: float | None = None
    numa_nodes: tuple[str, ...] = ()
    aligned: bool | None = None
    devices: tuple[HeldDevice, ...] = ()
    memory: tuple[tuple[str, float], ...] = ()
    gpu_util: float | None = None
    gpu_mem_used: float | None = None
    gpu_mem_total: float | None = None
    gpu_shared: bool = False

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


def _holder(labels: Mapping[str, str]) -> Holder | None:
    h = Holder(labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
    return h if h.pod else None


def _numas(label: str) -> tuple[str, ...]:
    """``"0,1"`` -> ("0", "1"); ``"none"`` and empty -> ()."""
    if label in ("", "none"):
        return ()
    return tuple(p for p in label.split(",") if p)


_NUMBERED = re.compile(r"^(\D*)(\d+)$")


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort ``kvm2`` before ``kvm10`` (a name then a number); anything else as text."""
    m = _NUMBERED.match(text)
    return (m.group(1), int(m.group(2)), "") if m else (text, -1, text)


def _numa_key(numa: str) -> tuple[Any, ...]:
    return (numa == "none", natural_key(numa))


class _Index:
    """The samples of one node by metric name."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[Sample]] = defaultdict(list)

    def get(self, name: str) -> list[Sample]:
        return self.by_name.get(name, [])

    def scalar(self, name: str) -> float | None:
        found = self.get(name)
        return found[0].value if found else None


def _group(reading: Reading) -> dict[str, _Index]:
    nodes: dict[str, _Index] = {}
    for s in reading.samples:
        key = node_of(s.labels, reading.origin)
        nodes.setdefault(key, _Index()).by_name[s.name].append(s)
    return nodes


def _cpu_stamp(index: _Index) -> float | None:
    for s in index.get(CPU_SOURCE_STAMP):
        if s.labels.get("source") == "cpu":
            return s.value
    return None


def _busy_key(labels: Mapping[str, str]) -> tuple[str, str, str, str]:
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
        return {_busy_key(s.labels): min(1.0, max(0.0, s.value)) for s in direct}
    if previous is None:
        return {}
    now_stamp, then_stamp = _cpu_stamp(current), _cpu_stamp(previous)
    if now_stamp is not None and then_stamp is not None:
        span: float | None = now_stamp - then_stamp
    else:
        span = elapsed_s
    if span is None or span <= 0:
        return {}
    before = {_busy_key(s.labels): s.value for s in previous.get(BUSY_COUNTER)}
    out: dict[tuple[str, str, str, str], float] = {}
    for s in current.get(BUSY_COUNTER):
        key = _busy_key(s.labels)
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
        for n, p in sorted(cpus.items(), key=lambda kv: _numa_key(kv[0]))
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
            mem.items(), key=lambda kv: (_numa_key(kv[0][0]), kv[0][1] != "memory", kv[0][1])
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
    cpus: dict[int, str] = field(default_factory=dict)
    devices: dict[tuple[str, str], str] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    memory_numa: set[str] = field(default_factory=set)
    aligned: bool | None = None
    gpu_util: dict[str, float] = field(default_factory=dict)
    gpu_used: dict[str, float] = field(default_factory=dict)
    gpu_total: dict[str, float] = field(default_factory=dict)


def _by_uuid(samples: Iterable[Sample]) -> dict[str, float]:
    return {s.labels.get("uuid", ""): s.value for s in samples}


def _containers(
    node: str, idx: _Index, busy: Mapping[tuple[str, str, str, str], float]
) -> tuple[ContainerRow, ...]:
    acc: dict[Holder, _Acc] = defaultdict(_Acc)
    for s in idx.get("podres_cpu_assignment_info"):
        h = _holder(s.labels)
        if h is not None and s.labels.get("pool", "exclusive") == "exclusive":
            try:
                cpu = int(s.labels.get("cpu", ""))
            except ValueError:
                continue
            acc[h].cpus[cpu] = s.labels.get("numa_node", "")
    for s in idx.get("podres_container_device_info"):
        h = _holder(s.labels)
        if h is not None:
            key = (s.labels.get("resource", ""), s.labels.get("device_id", ""))
            acc[h].devices[key] = s.labels.get("numa_node", "none")
    for s in idx.get("podres_container_memory_bytes"):
        h = _holder(s.labels)
        if h is not None:
            acc[h].memory[s.labels.get("memory_type", "")] += s.value
            acc[h].memory_numa.update(_numas(s.labels.get("numa_node", "")))
    for s in idx.get("podres_container_numa_aligned"):
        h = _holder(s.labels)
        if h is not None:
            acc[h].aligned = s.value >= 1
    # GPU series labelled with their one holder: the whole device is the container's.
    for name, target in (
        ("podres_gpu_utilization_ratio", "gpu_util"),
        ("podres_gpu_memory_used_bytes", "gpu_used"),
        ("podres_gpu_memory_total_bytes", "gpu_total"),
    ):
        for s in idx.get(name):
            h = _holder(s.labels)
            if h is not None:
                getattr(acc[h], target)[s.labels.get("uuid", "")] = s.value
    # A GPU others hold too carries no holder; the holder's share comes from holder_* series.
    totals = _by_uuid(idx.get("podres_gpu_memory_total_bytes"))
    shares: dict[Holder, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for name, target in (
        ("podres_gpu_holder_sm_utilization_ratio", "util"),
        ("podres_gpu_holder_memory_used_bytes", "used"),
    ):
        for s in idx.get(name):
            h = _holder(s.labels)
            if h is not None:
                shares[h][s.labels.get("uuid", "")][target] = s.value

    rows: list[ContainerRow] = []
    for h, a in acc.items():
        own = set(a.gpu_util) | set(a.gpu_used) | set(a.gpu_total)
        utils = [a.gpu_util[u] for u in sorted(own) if u in a.gpu_util]
        used = [a.gpu_used[u] for u in sorted(own) if u in a.gpu_used]
        total = [a.gpu_total[u] for u in sorted(own) if u in a.gpu_total]
        shared = False
        for uuid, share in sorted(shares.get(h, {}).items()):
            if uuid in own:
                continue
            shared = True
            if "util" in share:
                utils.append(share["util"])
            if "used" in share:
                used.append(share["used"])
                if uuid in totals:
                    total.append(totals[uuid])
        cpu_busy = [
            busy[(str(c), *h)] for c in sorted(a.cpus) if (str(c), *h) in busy
        ]  # every exclusive CPU of the container read twice, or none
        numa = set(a.cpus.values()) | a.memory_numa
        for n in a.devices.values():
            numa.update(_numas(n))
        numa.discard("")
        rows.append(
            ContainerRow(
                node=node,
                namespace=h.namespace,
                pod=h.pod,
                container=h.container,
                cpus=tuple(sorted(a.cpus)),
                busy=sum(cpu_busy) / len(cpu_busy) if cpu_busy else None,
                numa_nodes=tuple(sorted(numa, key=natural_key)),
                aligned=a.aligned,
                devices=tuple(
                    HeldDevice(r, d, n)
                    for (r, d), n in sorted(
                        a.devices.items(), key=lambda kv: (kv[0][0], natural_key(kv[0][1]))
                    )
                ),
                memory=tuple(sorted(a.memory.items(), key=lambda kv: (kv[0] != "memory", kv[0]))),
                gpu_util=sum(utils) / len(utils) if utils else None,
                gpu_mem_used=sum(used) if used else None,
                gpu_mem_total=sum(total) if total else None,
                gpu_shared=shared,
            )
        )
    return tuple(sorted(rows, key=lambda r: r.holder))


def _devices(node: str, idx: _Index) -> tuple[DeviceRow, ...]:
    state: dict[tuple[str, str], tuple[str, str]] = {}
    for s in idx.get("podres_node_device_info"):
        key = (s.labels.get("resource", ""), s.labels.get("device_id", ""))
        state[key] = (s.labels.get("numa_node", "none"), s.labels.get("state", ""))
    holders: dict[tuple[str, str], set[Holder]] = defaultdict(set)
    for s in idx.get("podres_container_device_info"):
        key = (s.labels.get("resource", ""), s.labels.get("device_id", ""))
        h = _holder(s.labels)
        if h is not None:
            holders[key].add(h)
        if key not in state:  # without GetAllocatableResources only held devices are known
            state[key] = (s.labels.get("numa_node", "none"), "allocated")
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
    rows = []
    for (resource, device_id), (numa, st) in state.items():
        phys = physical.get((resource, device_id)) or device_id
        util = gpu_util.get(phys, drm_busy.get(phys))
        healthy = st != "allocated_unhealthy" and gpu_healthy.get(phys, 1.0) >= 1
        rows.append(
            DeviceRow(
                node=node,
                resource=resource,
                device_id=device_id,
                numa_node=numa,
                state=st,
                healthy=healthy,
                holders=tuple(sorted(holders.get((resource, device_id), ()))),
                physical_id=physical.get((resource, device_id)),
                util=util,
                mem_used=gpu_used.get(phys),
                mem_total=gpu_total.get(phys),
            )
        )
    return tuple(sorted(rows, key=lambda r: (r.resource, natural_key(r.device_id))))


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


# ---------------------------------------------------------------- select


@dataclass(frozen=True, slots=True)
class Options:
    """What to show: the view, its sort column and direction, the filters, wide or not.

    A filter matches as a substring, or as a glob when it has ``*?[``; empty matches all.
    ``namespace`` and ``pod`` match a device's holders in the devices view; ``resource``
    matches the resources a container holds in the containers view.
    """

    view: str = "containers"
    sort: str = ""
    reverse: bool = False
    namespace: str = ""
    pod: str = ""
    resource: str = ""
    wide: bool = False

    @property
    def sort_key(self) -> str:
        """The sort column in effect: ``sort`` when the view has it, else the view's first."""
        keys = SORT_KEYS[self.view]
        return self.sort if self.sort in keys else keys[0]

    def filters(self) -> tuple[tuple[str, str], ...]:
        """The filters set, as (name, pattern)."""
        return tuple(
            (k, v)
            for k, v in (
                ("namespace", self.namespace),
                ("pod", self.pod),
                ("resource", self.resource),
            )
            if v
        )


def matches(pattern: str, value: str) -> bool:
    """Empty matches all; ``*?[`` make a glob; otherwise a substring."""
    if not pattern:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatchcase(value, pattern)
    return pattern in value


def _keep_container(r: ContainerRow, o: Options) -> bool:
    return (
        matches(o.namespace, r.namespace)
        and matches(o.pod, r.pod)
        and (not o.resource or any(matches(o.resource, d.resource) for d in r.devices))
    )


def _keep_device(r: DeviceRow, o: Options) -> bool:
    if not matches(o.resource, r.resource):
        return False
    if o.namespace or o.pod:
        return any(matches(o.namespace, h.namespace) and matches(o.pod, h.pod) for h in r.holders)
    return True


# Sort columns: (key of a row, numeric: largest first by default).
_CONTAINER_SORTS: Mapping[str, tuple[Callable[[ContainerRow], Any], bool]] = {
    "name": (lambda r: (r.namespace, r.pod, r.container), False),
    "cpus": (lambda r: len(r.cpus) or None, True),
    "busy": (lambda r: r.busy, True),
    "numa": (lambda r: tuple(natural_key(n) for n in r.numa_nodes) or None, False),
    "devices": (lambda r: len(r.devices) or None, True),
    "gpu": (lambda r: r.gpu_util, True),
    "gmem": (lambda r: r.gpu_mem_used, True),
    "memory": (lambda r: r.pinned_bytes or None, True),
}
_DEVICE_SORTS: Mapping[str, tuple[Callable[[DeviceRow], Any], bool]] = {
    "resource": (lambda r: (r.resource, natural_key(r.device_id)), False),
    "id": (lambda r: natural_key(r.device_id), False),
    "numa": (lambda r: _numa_key(r.numa_node), False),
    "health": (lambda r: (r.healthy, r.state != "allocated_unhealthy"), False),
    "holder": (lambda r: r.holders or None, False),
    "util": (lambda r: r.util, True),
}


def sort_direction(options: Options) -> str:
    """How the sort column orders rows: ``largest first``, ``smallest first``, ``A-Z``, ``Z-A``."""
    sorts: Mapping[str, tuple[Any, bool]] = (
        _CONTAINER_SORTS if options.view == "containers" else _DEVICE_SORTS
    )
    numeric = sorts[options.sort_key][1]
    if numeric:
        return "smallest first" if options.reverse else "largest first"
    return "Z-A" if options.reverse else "A-Z"


def _sorted(rows: Sequence[Any], key: Callable[[Any], Any], descending: bool) -> list[Any]:
    """Sort by ``key``; rows whose key is None go last in either direction (stable)."""
    known = [r for r in rows if key(r) is not None]
    unknown = [r for r in rows if key(r) is None]
    return sorted(known, key=key, reverse=descending) + unknown


def select(
    data: TopData, options: Options
) -> tuple[tuple[ContainerRow, ...], tuple[DeviceRow, ...]]:
    """The container and device rows of every node, filtered and sorted as ``options`` say.

    Equal sort values keep node order, then name. The sort column applies to the view's
    rows; the other view's rows are in their default order (by name, by resource).
    """
    containers = [r for n in data.nodes for r in n.containers if _keep_container(r, options)]
    devices = [r for n in data.nodes for r in n.devices if _keep_device(r, options)]
    mine = options.view == "containers"
    ckey, cdesc = _CONTAINER_SORTS[options.sort_key if mine else "name"]
    dkey, ddesc = _DEVICE_SORTS["resource" if mine else options.sort_key]
    containers = _sorted(
        _sorted(containers, _CONTAINER_SORTS["name"][0], False),
        ckey,
        cdesc != (options.reverse and mine),
    )
    devices = _sorted(
        _sorted(devices, _DEVICE_SORTS["resource"][0], False),
        dkey,
        ddesc != (options.reverse and not mine),
    )
    return tuple(containers), tuple(devices)


# ---------------------------------------------------------------- json


def _holder_json(h: Holder) -> dict[str, str]:
    return {"namespace": h.namespace, "pod": h.pod, "container": h.container}


def to_json(data: TopData, options: Options) -> dict[str, Any]:
    """``-o json``: every node's header and its rows, filtered and sorted as shown."""
    containers, devices = select(data, options)
    out_nodes = []
    for n in data.nodes:
        h = n.header
        out_nodes.append(
            {
                "node": h.node,
                "kubelet_up": h.kubelet_up,
                "age_seconds": h.age_s,
                "pods": h.pods,
                "containers_total": h.containers,
                "cpus": [
                    {
                        "numa_node": c.numa_node,
                        "allocatable": c.allocatable,
                        "exclusive": c.exclusive,
                        "shared_free": c.shared_free,
                        "reserved": c.reserved,
                    }
                    for c in h.cpus
                ],
                "device_counts": [
                    {
                        "resource": d.resource,
                        "allocatable": d.allocatable,
                        "allocated": d.allocated,
                        "unallocated": d.unallocated,
                        "allocated_unhealthy": d.allocated_unhealthy,
                    }
                    for d in h.devices
                ],
                "memory": [
                    {
                        "numa_node": m.numa_node,
                        "memory_type": m.memory_type,
                        "free_bytes": m.free,
                        "allocatable_bytes": m.allocatable,
                    }
                    for m in h.memory
                ],
                "containers": [
                    {
                        "namespace": r.namespace,
                        "pod": r.pod,
                        "container": r.container,
                        "cpus": r.cpulist,
                        "cpu_ids": list(r.cpus),
                        "busy_ratio": r.busy,
                        "numa_nodes": list(r.numa_nodes),
                        "numa_aligned": r.aligned,
                        "devices": [
                            {
                                "resource": d.resource,
                                "device_id": d.device_id,
                                "numa_node": d.numa_node,
                            }
                            for d in r.devices
                        ],
                        "memory_bytes": dict(r.memory),
                        "gpu_utilization_ratio": r.gpu_util,
                        "gpu_memory_used_bytes": r.gpu_mem_used,
                        "gpu_memory_total_bytes": r.gpu_mem_total,
                        "gpu_shared": r.gpu_shared,
                    }
                    for r in containers
                    if r.node == h.node
                ],
                "devices": [
                    {
                        "resource": d.resource,
                        "device_id": d.device_id,
                        "numa_node": d.numa_node,
                        "state": d.state,
                        "healthy": d.healthy,
                        "holders": [_holder_json(x) for x in d.holders],
                        "physical_id": d.physical_id,
                        "utilization_ratio": d.util,
                        "memory_used_bytes": d.mem_used,
                        "memory_total_bytes": d.mem_total,
                    }
                    for d in devices
                    if d.node == h.node
                ],
            }
        )
    return {
        "source": data.source,
        "view": options.view,
        "sort": options.sort_key,
        "filters": dict(options.filters()),
        "notice": data.notice,
        "nodes": out_nodes,
    }
