"""The container rows of ``podres top``: each holder's CPUs, devices, memory and GPU use."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from podres_exporter.core.cpulist import format_cpulist
from podres_exporter.core.model import Holder
from podres_exporter.top.rows.busy import mean_busy
from podres_exporter.top.rows.samples import (
    DRA_INFO,
    AnySample,
    Index,
    by_uuid,
    claim_of,
    dra_device,
    holder_of,
    natural_key,
    numas,
)


@dataclass(frozen=True, slots=True)
class DeviceHolding:
    """One device a container row holds: its resource, id and NUMA node.

    An entry of :attr:`ContainerRow.devices`, from ``podres_container_device_info``, or,
    with ``dra``, from ``podres_container_dynamic_resource_info``: a device of a DRA claim,
    its resource the claim's driver and its id ``pool/device`` (NUMA node ``none``: the
    kubelet reports none for DRA devices). The holder is the row's container.
    """

    resource: str
    device_id: str
    numa_node: str
    dra: bool = False


@dataclass(frozen=True, slots=True)
class ContainerRow:
    """One container that holds exclusive CPUs, devices, DRA claims or pinned memory.

    ``busy``: mean busy share (0-1) of its exclusive CPUs, None when unknown (a single
    reading, no exclusive CPUs). ``gpu_util`` / ``gpu_mem_*``: over the GPUs (and MIG
    instances) it holds; ``gpu_shared`` when some value is its share of a GPU that
    others hold too. ``shared_pool``: for a pod's own row (container ``""``) of a pod
    with a pod-level CPU set, how many CPUs its private shared pool has; else None.
    ``claims``: the DRA claims it uses (``namespace/name``), with or without devices.
    ``owner``: its pod's workload as ``Kind/name`` (``podres_pod_info``'s ``owner_kind``
    and ``owner_name``), "" when not known or the pod has no controller.
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
    claims: tuple[str, ...] = ()
    owner: str = ""

    @property
    def holder(self) -> Holder:
        return Holder(self.namespace, self.pod, self.container)

    @property
    def cpulist(self) -> str:
        """Exclusive CPUs as compact ranges (``4-7,12``)."""
        return format_cpulist(self.cpus)

    def device_counts(self) -> tuple[tuple[str, int], ...]:
        """(resource, how many) per resource held, sorted by resource (a DRA device's
        resource is its driver)."""
        counts: dict[str, int] = defaultdict(int)
        for d in self.devices:
            counts[d.resource] += 1
        return tuple(sorted(counts.items()))

    @property
    def dra_drivers(self) -> frozenset[str]:
        """The DRA drivers of the devices it holds through claims."""
        return frozenset(d.resource for d in self.devices if d.dra)

    @property
    def pinned_bytes(self) -> float:
        return sum(v for _, v in self.memory)


@dataclass(slots=True)
class _Acc:
    """What the samples say about one container, gathered before its row is made."""

    cpus: dict[int, str] = field(default_factory=dict)
    devices: dict[tuple[str, str], str] = field(default_factory=dict)
    dra: set[tuple[str, str]] = field(default_factory=set)
    claims: set[str] = field(default_factory=set)
    memory: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    memory_numa: set[str] = field(default_factory=set)
    aligned: bool | None = None
    gpu_util: dict[str, float] = field(default_factory=dict)
    gpu_used: dict[str, float] = field(default_factory=dict)
    gpu_total: dict[str, float] = field(default_factory=dict)
    shared_pool: int | None = None  # a pod's own row: CPUs in its private shared pool


def owners_of(samples: Iterable[AnySample]) -> dict[tuple[str, str], str]:
    """Each pod's workload, ``Kind/name``, from ``podres_pod_info`` (docs/metrics.md)."""
    out: dict[tuple[str, str], str] = {}
    for s in samples:
        kind, name = s.labels.get("owner_kind", ""), s.labels.get("owner_name", "")
        if kind and name:
            out[(s.labels.get("namespace", ""), s.labels.get("pod", ""))] = f"{kind}/{name}"
    return out


def _held(samples: Iterable[AnySample]) -> Iterator[tuple[Holder, AnySample]]:
    """The samples that name a container, each with it."""
    for s in samples:
        h = holder_of(s.labels)
        if h is not None:
            yield h, s


def _gather(idx: Index) -> dict[Holder, _Acc]:
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
    for h, s in _held(idx.get(DRA_INFO)):
        acc[h].claims.add(claim_of(s.labels))
        device = dra_device(s.labels)
        if device is not None:
            acc[h].dra.add(device)
    for h, s in _held(idx.get("podres_container_memory_bytes")):
        acc[h].memory[s.labels.get("memory_type", "")] += s.value
        acc[h].memory_numa.update(numas(s.labels.get("numa_node", "")))
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


def _gpu_shares(idx: Index) -> dict[Holder, dict[str, dict[str, float]]]:
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


def _container_row(
    node: str,
    h: Holder,
    a: _Acc,
    busy: Mapping[tuple[str, str, str, str], float],
    *,
    shares: Mapping[str, Mapping[str, float]],
    totals: Mapping[str, float],
    owner: str = "",
) -> ContainerRow:
    """The row of container ``h`` from what was gathered about it."""
    gpu_util, gpu_used, gpu_total, shared = _gpu_columns(a, shares, totals)
    numa = set(a.cpus.values()) | a.memory_numa
    for n in a.devices.values():
        numa.update(numas(n))
    numa.discard("")
    return ContainerRow(
        node=node,
        namespace=h.namespace,
        pod=h.pod,
        container=h.container,
        cpus=tuple(sorted(a.cpus)),
        busy=mean_busy(h, a.cpus, busy),
        numa_nodes=tuple(sorted(numa, key=natural_key)),
        aligned=a.aligned,
        devices=_holdings(a),
        memory=tuple(sorted(a.memory.items(), key=lambda kv: (kv[0] != "memory", kv[0]))),
        gpu_util=gpu_util,
        gpu_mem_used=gpu_used,
        gpu_mem_total=gpu_total,
        gpu_shared=shared,
        shared_pool=a.shared_pool,
        claims=tuple(sorted(a.claims)),
        owner=owner,
    )


def _holdings(a: _Acc) -> tuple[DeviceHolding, ...]:
    """A container's devices, device-plugin then DRA, each by resource and id."""
    plugin = sorted(a.devices.items(), key=lambda kv: (kv[0][0], natural_key(kv[0][1])))
    dra = sorted(a.dra, key=lambda rd: (rd[0], natural_key(rd[1])))
    return tuple(DeviceHolding(r, d, n) for (r, d), n in plugin) + tuple(
        DeviceHolding(r, d, "none", dra=True) for r, d in dra
    )


def container_rows(
    node: str, idx: Index, busy: Mapping[tuple[str, str, str, str], float]
) -> tuple[ContainerRow, ...]:
    """The rows of every container of ``node``, busy shares from ``busy``, by holder."""
    acc = _gather(idx)
    shares = _gpu_shares(idx)
    totals = by_uuid(idx.get("podres_gpu_memory_total_bytes"))
    owners = owners_of(idx.get("podres_pod_info"))
    rows = [
        _container_row(
            node,
            h,
            a,
            busy,
            shares=shares.get(h, {}),
            totals=totals,
            owner=owners.get((h.namespace, h.pod), ""),
        )
        for h, a in acc.items()
    ]
    return tuple(sorted(rows, key=lambda r: r.holder))
