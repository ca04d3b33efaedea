"""The device manager's ledger: what it knows of each resource and who holds what.

One lock guards it all; ``cond`` wakes those who wait for a change. Registration (the
Register service and the ListAndWatch consumers), admission (Allocate and
PreStartContainer) and the manager's lifecycle share one ledger, and each writes the
checkpoint through it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from podres_sim.kubelet.devicemanager.checkpoint import read_checkpoint, write_checkpoint
from podres_sim.kubelet.devicemanager.endpoint import PluginEndpoint
from podres_sim.kubelet.devicemanager.records import (
    UNHEALTHY,
    AllocationResult,
    PluginDevice,
    RegistrationRecord,
)

__all__ = ["Ledger", "Resource"]

log = structlog.get_logger("podres_sim")


@dataclass(slots=True)
class Resource:
    """What the manager knows of one resource (registered now, or within its grace)."""

    name: str
    devices: dict[str, PluginDevice] = field(default_factory=dict)
    endpoint: PluginEndpoint | None = None
    stopped_at: float | None = None  # stream ended (or kubelet started without the plugin)


class Ledger:
    """The manager's state under one lock (attributes are read and written with
    ``lock`` held, except where a method says otherwise)."""

    def __init__(self, directory: Path, *, grace: float, clock: Callable[[], float]) -> None:
        self.directory = directory
        self.grace = grace
        self.clock = clock
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self._save_lock = threading.Lock()
        self.epoch = 0  # increases at every start and stop
        self.serial = 0
        self.version = 0  # increases with every change of state
        self.resources: dict[str, Resource] = {}
        self.allocs: dict[tuple[str, str, str], AllocationResult] = {}
        self.reserved: dict[str, set[str]] = {}  # chosen, Allocate in flight
        self.registrations: list[RegistrationRecord] = []
        self.refusals: list[str] = []  # the reasons for the next Register calls refused
        self.listeners: list[Callable[[str], None]] = []
        self.threads: list[threading.Thread] = []

    def changed(self) -> None:
        """Note a change (lock held)."""
        self.version += 1
        self.cond.notify_all()

    def notify(self, *resources: str) -> None:
        """Call the listeners for each resource (lock not held)."""
        with self.lock:
            listeners = list(self.listeners)
        for resource in resources:
            for fn in listeners:
                try:
                    fn(resource)
                except Exception:  # a listener must not break the manager
                    log.exception("sim_device_manager_listener_failed", resource=resource)

    def mark_unhealthy(self, res: Resource, now: float) -> None:
        """The resource's plugin went away at ``now``: its devices turn unhealthy (lock held)."""
        res.devices = {i: PluginDevice(i, UNHEALTHY, d.numa) for i, d in res.devices.items()}
        res.stopped_at = now

    def purge(self) -> None:
        """Drop resources whose plugin has been gone longer than the grace (lock held)."""
        now = self.clock()
        gone = [
            name
            for name, res in self.resources.items()
            if res.stopped_at is not None and now - res.stopped_at >= self.grace
        ]
        for name in gone:
            del self.resources[name]
            log.info("sim_device_plugin_resource_dropped", resource=name)
        if gone:
            self.changed()

    def available(self, resource: str) -> set[str]:
        """Healthy devices nobody holds or is being given (lock held)."""
        res = self.resources.get(resource)
        if res is None:
            return set()
        taken = set(self.reserved.get(resource, ()))
        for (_, _, r), a in self.allocs.items():
            if r == resource:
                taken.update(a.device_ids)
        return {i for i, d in res.devices.items() if d.healthy and i not in taken}

    def save(self) -> None:
        """Write the checkpoint (this simulator's own format; lock not held)."""
        with self._save_lock:
            with self.lock:
                allocs = list(self.allocs.values())
                registered = {n: list(r.devices) for n, r in self.resources.items()}
            write_checkpoint(self.directory, allocs, registered)

    def load(self) -> None:
        """Read back our own checkpoint, if the directory holds one: its allocations, and
        its resources as gone since now (until their plugins register again)."""
        found = read_checkpoint(self.directory)
        if found is None:
            return
        allocs, registered = found
        now = self.clock()
        for a in allocs:
            self.allocs[(a.pod, a.container, a.resource)] = a
        for name in registered:
            self.resources[name] = Resource(name, stopped_at=now)
