"""Pure join: telemetry readings matched to the containers that hold the hardware.

Every kubelet device id (allocatable or held) is resolved by :mod:`ids` to a
physical device, then matched to what the sources read: an NVML GPU or MIG
instance, a PCI function (and its network interfaces, InfiniBand ports and DRM
cards), a DRM card, or a network interface by name. A device held by exactly one
container gets that container as its holder; a device with several holders
(time-sliced ``::n`` replicas, several containers) is SHARED: its series carry
no holder, so a sum over pods never counts it twice, and the holders are listed
by the resolution info metric. An id that matches nothing is counted.

No I/O, no clock: the previous telemetry and the idle times so far are passed in
where a rate or an idle time needs two readings. GPU processes are tied to their
containers by :func:`~podres_exporter.core.attribution.container_of`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podres_exporter.core.accounting import Accounting
from podres_exporter.core.attribution import container_of
from podres_exporter.core.catalog import Catalog, Target
from podres_exporter.core.identity import NONE, DeviceIdentity
from podres_exporter.core.ids import DEFAULT_GPU_RESOURCES, Kind, Resolved, resolve
from podres_exporter.core.model import Holder, KubeletReading, NodeTopology, device_key_order
from podres_exporter.core.telemetry import (
    DrmCardReading,
    GpuReading,
    IbPortReading,
    NetReading,
    PciReading,
    SysfsDevices,
    Telemetry,
)


@dataclass(frozen=True, slots=True)
class Held:
    """The distinct holders of one physical device, sorted."""

    holders: tuple[Holder, ...] = ()

    @property
    def single(self) -> Holder | None:
        """The holder when there is exactly one, else None (free or shared)."""
        return self.holders[0] if len(self.holders) == 1 else None

    @property
    def shared(self) -> bool:
        return len(self.holders) > 1


@dataclass(frozen=True, slots=True)
class GpuRow:
    gpu: GpuReading
    held: Held


@dataclass(frozen=True, slots=True)
class GpuHolderUsage:
    """Per-holder use of one GPU from the driver's per-process samples.

    ``holder`` None is the unattributed bucket: processes that belong to no
    container holding this GPU.
    """

    uuid: str
    holder: Holder | None
    processes: int
    used_memory_bytes: int | None
    sm_ratio: float | None
    memory_ratio: float | None


@dataclass(frozen=True, slots=True)
class PciRow:
    pci: PciReading
    held: Held


@dataclass(frozen=True, slots=True)
class NetRow:
    net: NetReading
    held: Held


@dataclass(frozen=True, slots=True)
class IbRow:
    port: IbPortReading
    held: Held


@dataclass(frozen=True, slots=True)
class DrmRow:
    card: DrmCardReading
    held: Held


@dataclass(frozen=True, slots=True)
class Resolution:
    """What one kubelet device id resolved to, and whether telemetry was found for it."""

    resource: str
    device_id: str
    kind: Kind
    physical_id: str  # the resolved key (core/ids.py), for matching; not exported
    matched: bool
    identity: DeviceIdentity = NONE


@dataclass(frozen=True, slots=True)
class CpuBusy:
    """Busy seconds of one exclusive CPU and its holder, and its busy share (0-1) between
    the last two readings of CPU times (None before there are two)."""

    cpu: int
    numa: str
    holder: Holder
    busy_seconds: float
    ratio: float | None = None


@dataclass(frozen=True, slots=True)
class IdleDevice:
    """A held device with a utilisation signal, and since when it has shown none.

    ``resource`` and ``device_id``: the holder's kubelet id of it (the first, when it
    lists several, e.g. replicas); ``identity``: the physical device's labels.
    """

    device: str  # GPU UUID or DRM card
    holder: Holder
    idle_since: float
    resource: str = ""
    device_id: str = ""
    identity: DeviceIdentity = NONE


@dataclass(frozen=True, slots=True)
class Matched:
    """The kubelet's device ids matched to the telemetry's devices: what one join derives
    from the reading and the catalog's keys alone, handed to the next join to reuse."""

    catalog: tuple[frozenset[object], ...]
    holders: Mapping[Target, tuple[Holder, ...]]
    resolutions: tuple[Resolution, ...]
    resolved: Mapping[tuple[str, str], Resolved]
    # Each holder's first kubelet id (resource, device id) of each physical device.
    held_ids: Mapping[tuple[Target, Holder], tuple[str, str]]
    known_pci: frozenset[str]
    known_cards: frozenset[str]
    known_names: frozenset[str]


@dataclass(frozen=True, slots=True)
class Joined:
    """Everything the telemetry collectors render."""

    gpus: tuple[GpuRow, ...] = ()
    gpu_usage: tuple[GpuHolderUsage, ...] = ()
    pci: tuple[PciRow, ...] = ()
    net: tuple[NetRow, ...] = ()
    infiniband: tuple[IbRow, ...] = ()
    drm: tuple[DrmRow, ...] = ()
    resolutions: tuple[Resolution, ...] = ()
    cpu_busy: tuple[CpuBusy, ...] = ()
    shared_pool_busy_ratio: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType({})
    )
    numa_aligned: tuple[tuple[Holder, bool], ...] = ()
    idle: tuple[IdleDevice, ...] = ()
    matched: Matched | None = field(default=None, compare=False, repr=False)

    def idle_since(self) -> Mapping[tuple[str, Holder], float]:
        return {(d.device, d.holder): d.idle_since for d in self.idle}


# ------------------------------------------------------------------ matching


def _held(holders: Iterable[Holder]) -> Held:
    return Held(tuple(sorted(set(holders))))


def _gpu_usage(rows: Iterable[GpuRow], t: Telemetry) -> list[GpuHolderUsage]:
    """Per-holder sums of each GPU's processes; unmatched PIDs go to the unattributed bucket."""
    index = t.containers
    out: list[GpuHolderUsage] = []
    for row in rows:
        if not row.gpu.processes:
            continue
        buckets: dict[Holder | None, list[tuple[int | None, float | None, float | None]]] = (
            defaultdict(list)
        )
        for p in row.gpu.processes:
            ref = t.pid_cgroups.get(p.pid)
            holder = container_of(index, ref) if index is not None and ref is not None else None
            if holder not in row.held.holders:
                holder = None
            buckets[holder].append((p.used_memory_bytes, p.sm_ratio, p.memory_ratio))

        def total(values: list[int | None] | list[float | None]) -> float | None:
            known = [v for v in values if v is not None]
            return sum(known) if known else None

        for holder, procs in buckets.items():
            mem = total([m for m, _, _ in procs])
            out.append(
                GpuHolderUsage(
                    uuid=row.gpu.uuid,
                    holder=holder,
                    processes=len(procs),
                    used_memory_bytes=int(mem) if mem is not None else None,
                    sm_ratio=total([s for _, s, _ in procs]),
                    memory_ratio=total([r for _, _, r in procs]),
                )
            )
    out.sort(key=lambda u: (u.uuid, u.holder is None, u.holder or ("", "", "")))
    return out


def _numa_sets(reading: KubeletReading, topology: NodeTopology) -> list[tuple[Holder, bool]]:
    """Per container with placed resources: do CPUs, devices and memory share NUMA nodes?"""
    out = []
    for pod in reading.pods:
        for c in pod.containers:
            kinds: list[frozenset[int]] = []
            cpu_nodes = {topology.numa_of(cpu) for cpu in c.cpu_ids}
            if cpu_nodes and None not in cpu_nodes:
                kinds.append(frozenset(n for n in cpu_nodes if n is not None))
            dev_nodes = frozenset(n for d in c.devices if d.numa for n in d.numa)
            if dev_nodes:
                kinds.append(dev_nodes)
            mem_nodes = frozenset(n for m in c.memory if m.numa for n in m.numa)
            if mem_nodes:
                kinds.append(mem_nodes)
            if kinds:
                aligned = all(k == kinds[0] for k in kinds)
                out.append((Holder(pod.namespace, pod.name, c.name), aligned))
    return sorted(out)


def _share(busy: float, total: float) -> float | None:
    return min(1.0, max(0.0, busy / total)) if total > 0 else None


def _cpu(
    acc: Accounting,
    t: Telemetry,
    previous: Telemetry | None,
    last_join: Joined | None,
) -> tuple[list[CpuBusy], dict[str, float]]:
    if t.cpu_times is None:
        return [], {}
    busy, total = t.cpu_times.busy, t.cpu_times.total
    before = previous.cpu_times if previous is not None else None
    held = [(a, a.holder) for a in acc.cpu_assignments if a.holder is not None and a.cpu in busy]
    if before is t.cpu_times:
        # Not read again since (--source-interval.cpu): the last ratios still hold.
        last = {r.cpu: r.ratio for r in last_join.cpu_busy} if last_join is not None else {}
        rows = [CpuBusy(a.cpu, a.numa, h, busy[a.cpu], last.get(a.cpu)) for a, h in held]
        return rows, dict(last_join.shared_pool_busy_ratio) if last_join is not None else {}
    rows = [
        CpuBusy(
            a.cpu,
            a.numa,
            h,
            busy[a.cpu],
            _share(busy[a.cpu] - before.busy[a.cpu], total[a.cpu] - before.total[a.cpu])
            if before is not None and a.cpu in before.busy
            else None,
        )
        for a, h in held
    ]
    ratios: dict[str, float] = {}
    if before is not None:
        d_busy: dict[str, float] = defaultdict(float)
        d_total: dict[str, float] = defaultdict(float)
        for a in acc.cpu_assignments:
            if a.pool != "shared_free":
                continue
            cpu = a.cpu
            if cpu in busy and cpu in before.busy:
                d_busy[a.numa] += busy[cpu] - before.busy[cpu]
                d_total[a.numa] += total[cpu] - before.total[cpu]
        ratios = {n: min(1.0, max(0.0, d_busy[n] / d_total[n])) for n in d_total if d_total[n] > 0}
    return rows, ratios


def _idle(
    gpus: Iterable[GpuRow],
    drm: Iterable[DrmRow],
    now: float,
    before: Mapping[tuple[str, Holder], float],
    m: Matched,
) -> list[IdleDevice]:
    out = []
    signals: list[tuple[Target, Holder | None, float | None]] = [
        (("gpu", g.gpu.uuid), g.held.single, g.gpu.utilization_gpu_ratio) for g in gpus
    ]
    signals += [(("drm", d.card.card), d.held.single, d.card.busy_ratio) for d in drm]
    identities = {(r.resource, r.device_id): r.identity for r in m.resolutions}
    for target, holder, busy in signals:
        if holder is None or busy is None or busy > 0:
            continue
        device = target[1]
        resource, device_id = m.held_ids.get((target, holder), ("", ""))
        out.append(
            IdleDevice(
                device,
                holder,
                before.get((device, holder), now),
                resource,
                device_id,
                identities.get((resource, device_id), NONE),
            )
        )
    return sorted(out, key=lambda i: (i.device, i.holder))


def join(
    acc: Accounting,
    reading: KubeletReading,
    topology: NodeTopology,
    telemetry: Telemetry,
    *,
    now: float,
    previous: Telemetry | None = None,
    idle_before: Mapping[tuple[str, Holder], float] | None = None,
    gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES,
    before: Joined | None = None,
    unchanged: bool = False,
) -> Joined:
    """Match ``telemetry`` to the holders in ``acc``; see the module docstring.

    ``before``: the last join. Its resolved device ids are not resolved again, and the
    shared pools' busy ratios are served again when the CPU times were not read since.
    With ``unchanged`` (the same kubelet state on the same topology) its NUMA alignment
    is reused, and with the same catalog keys its matching and resolutions too (the same
    objects: their families too)."""
    cat = Catalog(telemetry)
    last = before.matched if before is not None else None
    if unchanged and last is not None and last.catalog == cat.key:
        m = last
    else:
        m = _match(acc, reading, cat, tuple(gpu_resources), last)
    gpus = telemetry.gpus.gpus if telemetry.gpus else ()
    gpu_rows = [GpuRow(g, _held(m.holders.get(("gpu", g.uuid), ()))) for g in gpus]
    if (
        before is not None
        and m is last
        and previous is not None
        and previous.devices is telemetry.devices
    ):
        # The same matching and the same sysfs reading (not read again since:
        # --source-interval.sysfs): the same rows, so their families are reused too.
        pci_t, net_t, ib_t, drm_t = before.pci, before.net, before.infiniband, before.drm
    else:
        pci_t, net_t, ib_t, drm_t = _sysfs_rows(telemetry.devices or SysfsDevices(), m)
    cpu_rows, ratios = _cpu(acc, telemetry, previous, before)
    return Joined(
        gpus=tuple(gpu_rows),
        gpu_usage=tuple(_gpu_usage(gpu_rows, telemetry)),
        pci=pci_t,
        net=net_t,
        infiniband=ib_t,
        drm=drm_t,
        resolutions=m.resolutions,
        cpu_busy=tuple(cpu_rows),
        shared_pool_busy_ratio=MappingProxyType(ratios),
        numa_aligned=before.numa_aligned
        if unchanged and before is not None
        else tuple(_numa_sets(reading, topology)),
        idle=tuple(_idle(gpu_rows, drm_t, now, idle_before or {}, m)),
        matched=m,
    )


def _sysfs_rows(
    dev: SysfsDevices, m: Matched
) -> tuple[tuple[PciRow, ...], tuple[NetRow, ...], tuple[IbRow, ...], tuple[DrmRow, ...]]:
    """The sysfs devices the kubelet knows (allocatable or held), with their holders."""
    holders, known_pci = m.holders, m.known_pci
    return (
        tuple(
            PciRow(p, _held(holders.get(("pci", p.address), ())))
            for p in dev.pci
            if p.address in known_pci
        ),
        tuple(
            NetRow(n, _held(holders.get(("net", n.interface), ())))
            for n in dev.net
            if n.pci_address in known_pci or n.interface in m.known_names
        ),
        tuple(
            IbRow(p, _held(holders.get(("ib", p.device), ())))
            for p in dev.infiniband
            if p.pci_address in known_pci
        ),
        tuple(
            DrmRow(d, _held(holders.get(("drm", d.card), ())))
            for d in dev.drm
            if d.pci_address in known_pci or d.card in m.known_cards
        ),
    )


def _match(
    acc: Accounting,
    reading: KubeletReading,
    cat: Catalog,
    patterns: tuple[str, ...],
    last: Matched | None,
) -> Matched:
    """Every device id of the reading resolved (an id the last join resolved is not
    resolved again) and matched to the catalog's devices, with its holders."""
    resolved_before = last.resolved if last is not None else {}
    resolved: dict[tuple[str, str], Resolved] = {}
    holders: dict[Target, list[Holder]] = defaultdict(list)
    held_ids: dict[tuple[Target, Holder], tuple[str, str]] = {}
    resolutions: dict[tuple[str, str], Resolution] = {}
    found: dict[tuple[str, str], list[Target]] = {}

    def targets_of(resource: str, device_id: str) -> list[Target]:
        """Each id resolved and matched once, however many list it."""
        key = (resource, device_id)
        targets = found.get(key)
        if targets is None:
            r = resolved_before.get(key)
            if r is None:
                r = resolve(resource, device_id, patterns)
            resolved[key] = r
            targets = found[key] = cat.targets(r, device_id)
            resolutions[key] = Resolution(
                resource, device_id, r.kind, r.key, bool(targets), cat.identity(r, targets)
            )
        return targets

    for d in acc.container_devices:  # in (holder, resource, id) order
        for target in targets_of(d.resource, d.device_id):
            holders[target].append(d.holder)
            held_ids.setdefault((target, d.holder), (d.resource, d.device_id))
    if reading.allocatable is not None:
        for a in reading.allocatable.devices:
            targets_of(a.resource, a.device_id)
    order = device_key_order(resolutions)
    return Matched(
        catalog=cat.key,
        holders=MappingProxyType({t: tuple(hs) for t, hs in holders.items()}),
        resolutions=tuple([resolutions[key] for key in order]),
        resolved=MappingProxyType(resolved),
        held_ids=MappingProxyType(held_ids),
        known_pci=frozenset(r.physical_id for r in resolutions.values() if r.kind is Kind.PCI),
        known_cards=frozenset(r.physical_id for r in resolutions.values() if r.kind is Kind.DRM),
        known_names=frozenset(r.device_id for r in resolutions.values()),
    )
