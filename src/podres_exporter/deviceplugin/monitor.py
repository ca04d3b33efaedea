"""The health loop: read the hardware, rebuild each resource's inventory, publish it.

:class:`Discoverer` reads what the resources' rules need through the hardware
sources: the GPU backend (NVML), and :mod:`~podres_exporter.sources.sysfs` under
``--path.sysfs`` (the PCI functions and interfaces, their IOMMU groups); and globs
under ``--path.dev``. To stay cheap at a 500 ms interval it lists every PCI
function only on every ``full_scan_every``-th look (and the first); in between it
reads only the functions a rule matched before, so a function that leaves sysfs is
seen at the next look and new hardware within ``full_scan_every`` looks.

:class:`Monitor` runs a check every ``health_interval`` on its own thread: discover,
:func:`inventory.update` per resource, publish to each resource's
:class:`~podres_exporter.deviceplugin.board.Board`, log health changes, update the
metrics. :meth:`Monitor.check` is also the plugin's
:data:`~podres_exporter.deviceplugin.servicer.HealthCheck`.
"""

from __future__ import annotations

import glob as globlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from types import MappingProxyType
from typing import Protocol, runtime_checkable

import structlog

from podres_exporter.core.errors import SourceError
from podres_exporter.core.telemetry import GpuInventory, SysfsDevices
from podres_exporter.deviceplugin import inventory as inv
from podres_exporter.deviceplugin.board import Board
from podres_exporter.deviceplugin.config import DiscoverKind, PluginConfig, ResourceConfig
from podres_exporter.deviceplugin.metrics import PluginMetrics
from podres_exporter.sources.gpu import GpuBackend, GpuTopology
from podres_exporter.sources.sysfs import (
    iommu_group,
    net_interface_names,
    pci_function_addresses,
    read_devices,
)

__all__ = ["Discoverer", "Monitor", "TopologySource"]

log = structlog.get_logger(__name__)


@runtime_checkable
class TopologySource(Protocol):
    """A GPU backend that can also say how close its GPUs are (``NvmlBackend``)."""

    def topology(self) -> GpuTopology: ...


# ------------------------------------------------------------------------ discovery


class Discoverer:
    """Reads what the configured rules need; nothing else. Not thread-safe (one caller)."""

    def __init__(
        self,
        config: PluginConfig,
        *,
        sysfs_root: str,
        dev_root: str,
        gpu_backend: GpuBackend | None,
        full_scan_every: int = 10,
    ) -> None:
        self._resources = config.resources
        self._sysfs = sysfs_root
        self._dev = dev_root
        self._gpu = gpu_backend
        self._full_scan_every = max(1, full_scan_every)
        self._looks = 0
        self._pci_rules = [
            r.discover for r in self._resources if r.discover.kind is DiscoverKind.PCI
        ]
        self._net_patterns = [
            r.discover.pattern or ""
            for r in self._resources
            if r.discover.kind is DiscoverKind.NETDEV
        ]
        self._dev_globs = sorted(
            {r.discover.glob or "" for r in self._resources if r.discover.kind is DiscoverKind.DEV}
        )
        self._pci_watch: set[str] = set()  # functions a rule matched (never shrinks)
        self._topology: GpuTopology = MappingProxyType({})
        self._topology_of: frozenset[str] | None = None
        self._sysfs_error: str | None = None

    def discover(self) -> inv.Discovery:
        """One look at everything the rules need; never raises for missing hardware."""
        full = self._looks % self._full_scan_every == 0
        self._looks += 1
        gpus = (
            self._read_gpus()
            if any(r.discover.kind is DiscoverKind.NVML for r in self._resources)
            else None
        )
        devices, iommu = (
            self._read_sysfs(full) if self._pci_rules or self._net_patterns else (None, {})
        )
        return inv.Discovery(
            gpus=gpus,
            devices=devices,
            iommu_groups=MappingProxyType(iommu),
            dev_nodes=MappingProxyType({g: self._glob_dev(g) for g in self._dev_globs}),
            gpu_topology=self._topology,
        )

    # -- GPUs

    def _read_gpus(self) -> GpuInventory:
        if self._gpu is None:
            return GpuInventory(available=False, error="no GPU backend")
        gpus = self._gpu.read()
        present = frozenset(g.uuid for g in gpus.gpus if g.parent_uuid is None and g.healthy)
        if present != self._topology_of and isinstance(self._gpu, TopologySource):
            self._topology = self._gpu.topology()
            self._topology_of = present
        return gpus

    # -- sysfs

    def _read_sysfs(self, full: bool) -> tuple[SysfsDevices, dict[str, str]]:
        names: list[str] = []
        if self._net_patterns:
            names = [
                n
                for n in net_interface_names(self._sysfs)
                if any(fnmatchcase(n, p) for p in self._net_patterns)
            ]
        addresses = set(self._pci_watch)
        if full and self._pci_rules:
            addresses.update(pci_function_addresses(self._sysfs))
        try:
            devices = read_devices(self._sysfs, pci_addresses=sorted(addresses), interfaces=names)
            missing = {n.pci_address for n in devices.net if n.pci_address} - {
                p.address for p in devices.pci
            }
            if missing:  # the PCI functions behind the interfaces, for their NUMA node
                more = read_devices(self._sysfs, pci_addresses=sorted(missing), interfaces=())
                devices = SysfsDevices(pci=devices.pci + more.pci, net=devices.net)
        except SourceError as err:
            if str(err) != self._sysfs_error:
                log.error("sysfs_unreadable", error=str(err))
            self._sysfs_error = str(err)
            return SysfsDevices(), {}
        self._sysfs_error = None
        matched = {
            p.address for p in devices.pci if any(inv.pci_matches(r, p) for r in self._pci_rules)
        }
        self._pci_watch.update(matched)
        self._pci_watch.update(n.pci_address for n in devices.net if n.pci_address)
        groups = {address: iommu_group(self._sysfs, address) for address in sorted(matched)}
        return devices, {a: g for a, g in groups.items() if g is not None}

    # -- /dev

    def _glob_dev(self, pattern: str) -> tuple[str, ...]:
        root = os.path.abspath(self._dev)
        found = globlib.glob(os.path.join(globlib.escape(root), pattern))
        return tuple(sorted(os.path.relpath(p, root) for p in found if not os.path.isdir(p)))


# -------------------------------------------------------------------------- monitor


class Monitor:
    """Runs the health checks and publishes each resource's inventory to its board."""

    def __init__(
        self,
        config: PluginConfig,
        discoverer: Discoverer,
        metrics: PluginMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._discoverer = discoverer
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()
        self._states = {r.name: inv.initial_state(r) for r in config.resources}
        self.boards: Mapping[str, Board] = MappingProxyType(
            {
                r.name: Board(s.inventory)
                for r, s in zip(config.resources, self._states.values(), strict=True)
            }
        )
        self._absent_logged: set[str] = set()
        self._withheld_logged: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_check: float | None = None
        self.checks = 0

    def check(self) -> None:
        """One health check of every resource, now (also PreStartContainer's re-check)."""
        with self._lock:
            discovery = self._discoverer.discover()
            now = self._clock()
            for resource in self._config.resources:
                self._check_resource(resource, discovery, now)
            self._last_check = now
            self.checks += 1

    def _check_resource(
        self, resource: ResourceConfig, discovery: inv.Discovery, now: float
    ) -> None:
        state, changes = inv.update(
            resource,
            discovery,
            self._states[resource.name],
            now=now,
            xid_unhealthy_for_s=self._config.xid_unhealthy_for_s,
            max_ids=self._config.ids_per_resource,
        )
        self._states[resource.name] = state
        self._say_withheld(resource, state)
        for change in changes:
            if change.new:
                log.info(
                    "device_found",
                    resource=change.resource,
                    device=change.hardware,
                    healthy=change.healthy,
                    reason=change.reason,
                )
            elif change.healthy:
                log.info("device_recovered", resource=change.resource, device=change.hardware)
            else:
                log.warning(
                    "device_unhealthy",
                    resource=change.resource,
                    device=change.hardware,
                    reason=change.reason,
                )
        if not state.known:
            if resource.name not in self._absent_logged:
                self._absent_logged.add(resource.name)
                log.warning(
                    "hardware_absent",
                    resource=resource.name,
                    kind=resource.discover.kind.value,
                    detail="nothing matches the discovery rule yet; advertising no devices "
                    "and watching",
                )
        else:
            self._absent_logged.discard(resource.name)
        board = self.boards[resource.name]
        _, published = board.current()
        if published != state.inventory:  # streams resend only when the device list changed
            board.publish(state.inventory)
        healthy, unhealthy = state.inventory.counts()
        self._metrics.set_devices(resource.name, healthy=healthy, unhealthy=unhealthy)

    def _say_withheld(self, resource: ResourceConfig, state: inv.InventoryState) -> None:
        """Log once (and again when the number changes) that hardware is withheld."""
        if self._withheld_logged.get(resource.name, 0) == state.withheld:
            return
        self._withheld_logged[resource.name] = state.withheld
        if state.withheld:
            log.warning(
                "devices_over_limit",
                resource=resource.name,
                advertised_ids=len(state.inventory.devices),
                withheld_devices=state.withheld,
                limit_ids=self._config.ids_per_resource,
                detail="the plugin's device ids are bounded (MAX_DEVICE_IDS shared by the "
                "resources); the devices past this resource's share are not advertised",
            )

    def alive(self, *, within_s: float | None = None) -> bool:
        """Whether the loop runs (once started) and a check finished recently (10
        intervals, at least 5 s). PreStartContainer's checks count as progress, so the
        loop's thread is asked too: a dead loop fails even while they go on."""
        if self._thread is not None and not self._thread.is_alive():
            return False
        last = self._last_check
        if last is None:
            return False
        limit = within_s if within_s is not None else max(5.0, 10 * self._config.health_interval_s)
        return self._clock() - last <= limit

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="podres-plugin-health", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """A check every ``health_interval``, measured from start to start, so a slow
        read (NVML samples PCIe throughput for ~40 ms per GPU) does not add to the wait."""
        interval = self._config.health_interval_s
        next_at = time.monotonic() + interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at = max(next_at + interval, time.monotonic())
            try:
                self.check()
            except Exception as err:  # noqa: BLE001 - the loop must survive any one bad check
                log.error("health_check_failed", error=repr(err))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for board in self.boards.values():
            board.close()
