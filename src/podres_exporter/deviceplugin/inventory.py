"""What each resource advertises, and whether each device is healthy. Pure.

:func:`update` turns one :class:`Discovery` (what the hardware sources read, passed
in) and what the previous check remembered into the advertised device list of a
resource, and reports the health changes. Every rule recovers:

* ``nvml``: a GPU that does not answer (``GpuReading.healthy`` False) is Unhealthy
  while it does not; a critical XID (a count that rose since the last check, any
  code but the application XIDs 13, 31, 43, 45, 68, 109) makes the GPU and its MIG
  devices Unhealthy until ``xid_unhealthy_for`` has passed without a new one. NVML
  unavailable (driver unloaded): every known GPU is Unhealthy.
* ``pci``: a function that left sysfs (or stopped matching the rule, e.g. its driver
  was unbound) is still advertised, Unhealthy, and Healthy again when it is back.
* ``netdev``: an interface whose carrier is down (or unreadable, as for a link that
  is administratively down) is Unhealthy; one that vanished likewise.
* ``dev``: a device node that vanished is Unhealthy until it is back.

Hardware the rule finds nowhere, from the start, is advertised as an empty list:
the resource stays registered and is watched. Ids are the GPU or MIG UUID, the PCI
address, the interface name or the device node's file name; ``<id>::<n>`` for
replicas. An id longer than the kubelet's 63 characters is shortened with a hash.

A resource advertises at most ``max_ids`` ids (its share of the plugin's bound,
:data:`~podres_exporter.deviceplugin.config.MAX_DEVICE_IDS`): the hardware devices
that fit with all their replicas, first by key; the others are counted in
``InventoryState.withheld``, still checked, never advertised.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import Final

from podres_exporter.core.ids import replica_id
from podres_exporter.core.telemetry import (
    GpuInventory,
    GpuReading,
    NetReading,
    PciReading,
    SysfsDevices,
)
from podres_exporter.deviceplugin.config import Discover, DiscoverKind, ResourceConfig

__all__ = [
    "APPLICATION_XIDS",
    "HEALTHY",
    "MAX_ID_LENGTH",
    "UNHEALTHY",
    "Device",
    "Discovery",
    "Hardware",
    "HealthChange",
    "InventoryState",
    "ResourceInventory",
    "device_id",
    "initial_state",
    "pci_matches",
    "update",
]

HEALTHY: Final = "Healthy"
UNHEALTHY: Final = "Unhealthy"
MAX_ID_LENGTH: Final = 63
# XIDs caused by the application (faults, illegal instructions, resets it asked for),
# not by the GPU: they do not make a device unhealthy (as in NVIDIA's device plugin).
APPLICATION_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})

_GpuTopology = Mapping[tuple[str, str], int]


def _empty_map() -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType({})


# ------------------------------------------------------------------------- input


@dataclass(frozen=True, slots=True)
class Discovery:
    """One look at the hardware, as the I/O edge read it.

    ``gpus`` None: NVML was not asked (no nvml resource). ``devices`` None: sysfs was
    not read. ``iommu_groups``: PCI address -> IOMMU group number, for functions
    that have one. ``dev_nodes``: each dev rule's glob -> the matching paths,
    relative to the /dev root (``dri/renderD128``). ``gpu_topology``: pairwise GPU
    distances (see ``NvmlBackend.topology``), empty when unknown.
    """

    gpus: GpuInventory | None = None
    devices: SysfsDevices | None = None
    iommu_groups: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    dev_nodes: Mapping[str, tuple[str, ...]] = field(default_factory=_empty_map)
    gpu_topology: _GpuTopology = field(default_factory=lambda: MappingProxyType({}))


# ------------------------------------------------------------------------ output


@dataclass(frozen=True, slots=True)
class Hardware:
    """One physical device (or MIG device) behind one or more advertised ids.

    ``key``: the id without a replica suffix. ``reason``: why it is unhealthy.
    ``gpu_uuid``: the GPU or MIG UUID (what ``NVIDIA_VISIBLE_DEVICES`` names);
    ``topology_key``: the whole GPU's UUID that GPU topology pairs name.
    ``dev_path``: the device node relative to the /dev root.
    """

    key: str
    kind: DiscoverKind
    healthy: bool = True
    reason: str | None = None
    numa_nodes: tuple[int, ...] = ()
    gpu_uuid: str | None = None
    topology_key: str | None = None
    pci_address: str | None = None
    driver: str | None = None
    iommu_group: str | None = None
    interface: str | None = None
    dev_path: str | None = None


@dataclass(frozen=True, slots=True)
class Device:
    """One advertised device id: a Hardware, or one replica of it."""

    id: str
    hardware: str
    replica: int | None
    healthy: bool
    numa_nodes: tuple[int, ...] = ()

    @property
    def health(self) -> str:
        return HEALTHY if self.healthy else UNHEALTHY


@dataclass(frozen=True, slots=True)
class ResourceInventory:
    """The complete device list of one resource, with what Allocate needs to know.

    ``devices`` are sorted by hardware key, then replica. ``topology``: GPU pair
    distances by GPU UUID (empty for other kinds or when NVML gives none). ``memo``:
    derived data, filled on first use (not part of equality).
    """

    resource: str
    devices: tuple[Device, ...] = ()
    hardware: Mapping[str, Hardware] = field(default_factory=lambda: MappingProxyType({}))
    topology: _GpuTopology = field(default_factory=lambda: MappingProxyType({}))
    by_id: Mapping[str, Device] = field(default_factory=lambda: MappingProxyType({}))
    memo: dict[str, object] = field(default_factory=dict, compare=False, repr=False)
    """What the allocation code derives from this (immutable) inventory, computed once
    per inventory rather than once per call: keyed by the deriving module's name."""

    @classmethod
    def of(
        cls,
        resource: str,
        devices: Iterable[Device],
        hardware: Mapping[str, Hardware],
        topology: _GpuTopology | None = None,
    ) -> ResourceInventory:
        ordered = tuple(sorted(devices, key=lambda d: (d.hardware, d.replica or 0, d.id)))
        return cls(
            resource=resource,
            devices=ordered,
            hardware=MappingProxyType(dict(hardware)),
            topology=MappingProxyType(dict(topology or {})),
            by_id=MappingProxyType({d.id: d for d in ordered}),
        )

    def counts(self) -> tuple[int, int]:
        """(healthy, unhealthy) advertised ids."""
        healthy = sum(1 for d in self.devices if d.healthy)
        return healthy, len(self.devices) - healthy


@dataclass(frozen=True, slots=True)
class HealthChange:
    """A hardware device of a resource appeared, turned healthy or unhealthy."""

    resource: str
    hardware: str
    healthy: bool
    reason: str | None
    new: bool = False


@dataclass(frozen=True, slots=True)
class InventoryState:
    """What one check of a resource remembers for the next one.

    ``known``: every hardware device ever advertised, as last seen (so a vanished
    one stays advertised). ``xid_counts``: per GPU UUID, the XID counts at the last
    check; ``xid_until``: per GPU UUID, (unhealthy until, the critical XID).
    """

    inventory: ResourceInventory
    known: Mapping[str, Hardware] = field(default_factory=lambda: MappingProxyType({}))
    xid_counts: Mapping[str, Mapping[int, int]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    xid_until: Mapping[str, tuple[float, int]] = field(default_factory=lambda: MappingProxyType({}))
    withheld: int = 0
    """Hardware devices found but not advertised: their ids would pass ``max_ids``."""


def initial_state(resource: ResourceConfig) -> InventoryState:
    """The state before the first check: nothing known, nothing advertised."""
    return InventoryState(inventory=ResourceInventory.of(resource.name, (), {}))


# ------------------------------------------------------------------------- ids


def device_id(key: str, replica: int | None = None) -> str:
    """The advertised id of hardware ``key`` (or of its replica: :func:`ids.replica_id
    <podres_exporter.core.ids.replica_id>`), fit to the kubelet's 63 characters.

    A ``key`` too long for that is cut and ends in a hash of the whole key
    (``<start of key>-<8 hex digits>``), so ids stay distinct. A shortened id no longer
    names its base device: :func:`~podres_exporter.core.ids.split_replica` gives back the
    shortened key, and only the inventory (:attr:`Device.hardware`) knows the device.
    """
    made = key if replica is None else replica_id(key, replica)
    if len(made) <= MAX_ID_LENGTH:
        return made
    suffix = made[len(key) :]
    digest = hashlib.blake2b(key.encode(), digest_size=4).hexdigest()
    short = f"{key[: MAX_ID_LENGTH - len(suffix) - len(digest) - 1]}-{digest}"
    return short if replica is None else replica_id(short, replica)


# ------------------------------------------------------------------ discovery rules


def pci_matches(rule: Discover, reading: PciReading) -> bool:
    """Whether a PCI function matches a ``pci`` rule (every given field must match)."""
    if rule.vendor is not None and reading.vendor_id.lower() != rule.vendor:
        return False
    if rule.device is not None and reading.device_id.lower() != rule.device:
        return False
    if rule.pci_class is not None and not fnmatchcase(reading.class_id.lower(), rule.pci_class):
        return False
    return rule.driver is None or fnmatchcase(reading.driver or "", rule.driver)


def _numa(node: int | None) -> tuple[int, ...]:
    return () if node is None else (node,)


def _mig_profile(reading: GpuReading) -> str | None:
    """``1g.10gb`` from a MIG device's NVML name ``NVIDIA A100-SXM4-80GB MIG 1g.10gb``."""
    words = reading.name.split()
    if words[-2:-1] == ["MIG"]:
        return words[-1]
    return None


def _found_gpus(rule: Discover, gpus: GpuInventory) -> dict[str, tuple[GpuReading, str | None]]:
    """The readings the rule advertises: key -> (reading, the GPU UUID holding its XIDs)."""
    found: dict[str, tuple[GpuReading, str | None]] = {}
    mig_parents = {g.parent_uuid for g in gpus.gpus if g.parent_uuid}
    for reading in gpus.gpus:
        if not reading.uuid:
            continue  # a GPU lost before it ever answered: nothing to name it by
        if rule.mig:
            if reading.parent_uuid is None:
                continue
            if rule.profile is not None and _mig_profile(reading) != rule.profile:
                continue
            found[reading.uuid] = (reading, reading.parent_uuid)
        elif reading.parent_uuid is None and not reading.mig_enabled:
            if reading.uuid in mig_parents:
                continue  # a MIG-enabled board (unhealthy, so its mode is unknown)
            found[reading.uuid] = (reading, reading.uuid)
    return found


# ------------------------------------------------------------------------ checks


@dataclass(slots=True)
class _Check:
    """The working state of one update."""

    resource: ResourceConfig
    previous: InventoryState
    now: float
    xid_unhealthy_for_s: float
    found: dict[str, Hardware] = field(default_factory=dict)
    xid_counts: dict[str, Mapping[int, int]] = field(default_factory=dict)
    xid_until: dict[str, tuple[float, int]] = field(default_factory=dict)
    gone_reason: str = "gone"


def _xid_state(check: _Check, gpus: GpuInventory) -> None:
    """Update XID counts and the unhealthy-until times from the whole-GPU readings."""
    for reading in gpus.gpus:
        if reading.parent_uuid is not None or not reading.uuid:
            continue
        before = check.previous.xid_counts.get(reading.uuid, {})
        counts = reading.xid_errors_total
        rose = sorted(
            xid
            for xid, count in counts.items()
            if count > before.get(xid, 0) and xid not in APPLICATION_XIDS
        )
        if rose:
            check.xid_until[reading.uuid] = (check.now + check.xid_unhealthy_for_s, rose[-1])
        # Keep the highest counts seen: a reading of a lost GPU may come without them.
        merged = dict(before)
        for xid, count in counts.items():
            merged[xid] = max(count, merged.get(xid, 0))
        check.xid_counts[reading.uuid] = MappingProxyType(merged)


def _nvml(check: _Check, gpus: GpuInventory | None) -> None:
    if gpus is None or not gpus.available:
        error = None if gpus is None else gpus.error
        check.gone_reason = f"NVML unavailable: {error}" if error else "NVML unavailable"
        return
    _xid_state(check, gpus)
    rule = check.resource.discover
    for key, (reading, xid_owner) in _found_gpus(rule, gpus).items():
        healthy, reason = reading.healthy, reading.error
        if not healthy and reason is None:
            reason = "the GPU does not answer"
        bad_xid = check.xid_until.get(xid_owner or "")
        if healthy and bad_xid is not None:
            healthy, reason = False, f"critical XID {bad_xid[1]}"
        check.found[key] = Hardware(
            key=key,
            kind=DiscoverKind.NVML,
            healthy=healthy,
            reason=None if healthy else reason,
            numa_nodes=_numa(reading.numa_node),
            gpu_uuid=reading.uuid,
            topology_key=reading.parent_uuid or reading.uuid,
            pci_address=reading.pci_bus_id,
        )
    check.gone_reason = "no longer reported by NVML"


def _pci(check: _Check, devices: SysfsDevices | None, iommu: Mapping[str, str]) -> None:
    check.gone_reason = "gone from sysfs (or no longer matches the rule)"
    rule = check.resource.discover
    for reading in () if devices is None else devices.pci:
        if not pci_matches(rule, reading):
            continue
        check.found[reading.address] = Hardware(
            key=reading.address,
            kind=DiscoverKind.PCI,
            numa_nodes=_numa(reading.numa_node),
            pci_address=reading.address,
            driver=reading.driver,
            iommu_group=iommu.get(reading.address),
            interface=reading.net_interfaces[0] if reading.net_interfaces else None,
        )


def _carrier(net: NetReading) -> tuple[bool, str | None]:
    if net.carrier is True:
        return True, None
    if net.carrier is False:
        return False, f"carrier down (operstate {net.operstate})"
    return False, f"carrier unknown (operstate {net.operstate}; administratively down?)"


def _netdev(check: _Check, devices: SysfsDevices | None) -> None:
    check.gone_reason = "interface gone"
    pattern = check.resource.discover.pattern or ""
    if devices is None:
        return
    numa = {p.address: p.numa_node for p in devices.pci}
    for net in devices.net:
        if not fnmatchcase(net.interface, pattern):
            continue
        healthy, reason = _carrier(net)
        node = numa.get(net.pci_address or "")
        check.found[net.interface] = Hardware(
            key=net.interface,
            kind=DiscoverKind.NETDEV,
            healthy=healthy,
            reason=reason,
            numa_nodes=_numa(node),
            pci_address=net.pci_address,
            interface=net.interface,
        )


def _dev_keys(paths: Iterable[str]) -> dict[str, str]:
    """Device node path -> id: its file name, or the path with ``_`` for ``/`` when two
    matched nodes share a file name."""
    ordered = sorted(set(paths))
    names = [os.path.basename(p) for p in ordered]
    return {
        p: (n if names.count(n) == 1 else p.replace("/", "_"))
        for p, n in zip(ordered, names, strict=True)
    }


def _dev(check: _Check, dev_nodes: Mapping[str, tuple[str, ...]]) -> None:
    check.gone_reason = "device node gone"
    glob = check.resource.discover.glob or ""
    for path, key in _dev_keys(dev_nodes.get(glob, ())).items():
        check.found[key] = Hardware(key=key, kind=DiscoverKind.DEV, dev_path=path)


def update(  # noqa: PLR0913 - the bounds of a check are keywords, each with its default
    resource: ResourceConfig,
    discovery: Discovery,
    previous: InventoryState,
    *,
    now: float,
    xid_unhealthy_for_s: float,
    max_ids: int | None = None,
) -> tuple[InventoryState, tuple[HealthChange, ...]]:
    """One health check of ``resource``: the new state and what changed.

    ``now`` is a monotonic time in seconds (the XID timer runs on it). ``max_ids``:
    at most this many ids are advertised (None: no bound).
    """
    check = _Check(resource, previous, now, xid_unhealthy_for_s)
    check.xid_counts.update(previous.xid_counts)
    check.xid_until.update((k, v) for k, v in previous.xid_until.items() if v[0] > now)
    kind = resource.discover.kind
    if kind is DiscoverKind.NVML:
        _nvml(check, discovery.gpus)
    elif kind is DiscoverKind.PCI:
        _pci(check, discovery.devices, discovery.iommu_groups)
    elif kind is DiscoverKind.NETDEV:
        _netdev(check, discovery.devices)
    else:
        _dev(check, discovery.dev_nodes)
    hardware: dict[str, Hardware] = dict(check.found)
    for key, last in previous.known.items():
        if key not in hardware:
            hardware[key] = replace(last, healthy=False, reason=check.gone_reason)
    changes: list[HealthChange] = []
    for key in sorted(hardware):
        now_hw, before = hardware[key], previous.known.get(key)
        if before is None or before.healthy != now_hw.healthy:
            changes.append(
                HealthChange(resource.name, key, now_hw.healthy, now_hw.reason, before is None)
            )
    fit = len(hardware) if max_ids is None else max_ids // resource.replicas
    advertised = sorted(hardware)[:fit]
    devices: list[Device] = []
    for hw in (hardware[key] for key in advertised):
        replicas: Iterable[int | None] = (
            range(resource.replicas) if resource.replicas > 1 else (None,)
        )
        devices.extend(
            Device(device_id(hw.key, r), hw.key, r, hw.healthy, hw.numa_nodes) for r in replicas
        )
    topology = discovery.gpu_topology if kind is DiscoverKind.NVML else None
    state = InventoryState(
        inventory=ResourceInventory.of(resource.name, devices, hardware, topology),
        known=MappingProxyType(hardware),
        xid_counts=MappingProxyType(check.xid_counts),
        xid_until=MappingProxyType(check.xid_until),
        withheld=len(hardware) - len(advertised),
    )
    return state, tuple(changes)
