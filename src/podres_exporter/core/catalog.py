"""Lookup tables over one telemetry reading, for matching kubelet device ids to devices.

A kubelet id, resolved by :mod:`~podres_exporter.core.ids`, names physical targets:
``("gpu", uuid)``, ``("pci", address)``, ``("drm", card)``, ``("net", interface)`` or
``("ib", HCA)``; :meth:`Catalog.targets` finds those that were read, and
:meth:`Catalog.identity` the labels of the device. Pure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from podres_exporter.core.identity import DeviceIdentity, of_gpu, of_resolved
from podres_exporter.core.ids import Kind, Resolved
from podres_exporter.core.telemetry import GpuReading, Telemetry

# A physical target: ("gpu", uuid) | ("pci", address) | ("drm", card) | ("net", interface)
# | ("ib", HCA device).
Target = tuple[str, str]


class Catalog:
    """Lookup tables over one telemetry reading."""

    def __init__(self, t: Telemetry) -> None:
        gpus = t.gpus.gpus if t.gpus else ()
        self.gpu_by_uuid = {g.uuid.lower(): g for g in gpus}
        self.gpu_by_pci = {g.pci_bus_id: g for g in gpus if g.pci_bus_id and not g.parent_uuid}
        self.gpu_by_index = {g.index: g for g in gpus if not g.parent_uuid}
        self.mig_by_location = {
            (g.parent_uuid.lower(), g.gpu_instance_id, g.compute_instance_id): g
            for g in gpus
            if g.parent_uuid
        }
        self.mig_by_index: dict[tuple[int | None, int | None], GpuReading] = {
            (g.index, g.gpu_instance_id): g for g in gpus if g.parent_uuid
        }
        dev = t.devices
        self.pci = {p.address: p for p in dev.pci} if dev else {}
        self.net = {n.interface: n for n in dev.net} if dev else {}
        self.drm = {d.card: d for d in dev.drm} if dev else {}
        self.pci_children: dict[str, list[Target]] = defaultdict(list)
        # What matching reads of the catalog: equal keys, equal matches.
        self.key: tuple[frozenset[object], ...] = (
            frozenset((k, g.uuid) for k, g in self.gpu_by_uuid.items()),
            frozenset((k, g.uuid) for k, g in self.gpu_by_pci.items()),
            frozenset((k, g.uuid) for k, g in self.gpu_by_index.items()),
            frozenset((k, g.uuid) for k, g in self.mig_by_location.items()),
            frozenset((k, g.uuid) for k, g in self.mig_by_index.items()),
            frozenset(self.pci),
            frozenset((n.interface, n.pci_address) for n in dev.net) if dev else frozenset(),
            frozenset((d.card, d.pci_address) for d in dev.drm) if dev else frozenset(),
            frozenset((p.device, p.pci_address) for p in dev.infiniband) if dev else frozenset(),
        )
        if dev:
            for n in dev.net:
                if n.pci_address:
                    self.pci_children[n.pci_address].append(("net", n.interface))
            for d in dev.drm:
                if d.pci_address:
                    self.pci_children[d.pci_address].append(("drm", d.card))
            for port in dev.infiniband:
                if port.pci_address:
                    self.pci_children[port.pci_address].append(("ib", port.device))

    def identity(self, r: Resolved, targets: Iterable[Target]) -> DeviceIdentity:
        """The identity of the device an id names: what telemetry read of its targets,
        over what the id itself says."""
        found = of_resolved(r)
        for kind, key in targets:
            gpu = self.gpu_by_uuid.get(key.lower()) if kind == "gpu" else None
            if gpu is not None:
                found = of_gpu(gpu).over(found)
            elif kind == "pci":
                found = DeviceIdentity(address=key).over(found)
            elif kind == "drm":
                found = DeviceIdentity(address=self.drm[key].pci_address or "", card=key).over(
                    found
                )
        return found

    def targets(self, r: Resolved, device_id: str) -> list[Target]:
        """The physical devices a resolved id names (empty when none was read)."""
        gpu: GpuReading | None = None
        if r.kind in (Kind.GPU, Kind.MIG) and r.parent_uuid is None:
            gpu = self.gpu_by_uuid.get(r.key.lower())
        elif r.kind is Kind.MIG and r.parent_uuid is not None:
            gpu = self.mig_by_location.get(
                (r.parent_uuid.lower(), r.gpu_instance, r.compute_instance)
            )
        elif r.kind is Kind.GPU_INDEX and r.gpu_index is not None:
            gpu = self.gpu_by_index.get(r.gpu_index)
        elif r.kind is Kind.MIG_INDEX:
            gpu = self.mig_by_index.get((r.gpu_index, r.gpu_instance))
        elif r.kind is Kind.PCI:
            gpu = self.gpu_by_pci.get(r.key)
            found: list[Target] = [("gpu", gpu.uuid)] if gpu else []
            if r.key in self.pci:
                found.append(("pci", r.key))
            return found + self.pci_children.get(r.key, [])
        elif r.kind is Kind.DRM:
            return [("drm", r.key)] if r.key in self.drm else []
        elif device_id in self.net:  # an unknown shape that names a network interface
            return [("net", device_id)]
        return [("gpu", gpu.uuid)] if gpu else []
