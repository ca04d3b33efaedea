"""Every device the kubelet has registered, per resource and NUMA node. Pure.

The kubelet's device manager computes a resource's topology hints against every device it
has registered for it, healthy or not (upstream
``pkg/kubelet/cm/devicemanager/topology_hints.go``, ``getNUMANodeIds`` over
``allDevices``, and the minimum affinity size from it), while the pod-resources API's
GetAllocatableResources lists healthy devices only. The registered ids come from the
device manager's checkpoint (:class:`~podres_exporter.core.kubeletfiles.DeviceCheckpoint`);
each one's NUMA placement from, first to last:

1. the allocatable resources of this reading (a healthy device, as the kubelet reports it);
2. the devices the pods of this reading hold;
3. the checkpoint's own allocations (keyed by NUMA node);
4. what one of these said in an earlier reading (remembered while the device stays
   registered: a device that turns unhealthy keeps the NUMA node it had);
5. the hardware's own telemetry: the NUMA node sysfs gives a PCI function whose address
   is the id, or NVML a GPU or MIG instance whose UUID is (a device of one NUMA node; an
   id that names neither is not placed by it).

A device none of them placed is counted with its NUMA node unknown (``numa`` None in
:attr:`RegisteredDevices.counts`), never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podres_exporter.core.ids import resolve
from podres_exporter.core.kubeletfiles import DeviceCheckpoint
from podres_exporter.core.model import KubeletReading, NumaNodes, numa_label
from podres_exporter.core.telemetry import Telemetry

DeviceKey = tuple[str, str]  # (resource, device id)


@dataclass(frozen=True, slots=True)
class RegisteredDevices:
    """Registered devices per (resource, NUMA label or None when unknown), and the NUMA
    placement known of each registered device (what the next reading remembers)."""

    counts: Mapping[tuple[str, str | None], int] = field(
        default_factory=lambda: MappingProxyType({})
    )
    known_numa: Mapping[DeviceKey, NumaNodes] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def all_placed(self) -> bool:
        """Whether every registered device has a known NUMA placement."""
        return all(numa is not None for _, numa in self.counts)


def _placements(reading: KubeletReading | None) -> tuple[dict[DeviceKey, NumaNodes], ...]:
    """What this reading places: the allocatable devices, then the held ones."""
    if reading is None:
        return ({}, {})
    allocatable: dict[DeviceKey, NumaNodes] = {}
    if reading.allocatable is not None:
        allocatable = {(d.resource, d.device_id): d.numa for d in reading.allocatable.devices}
    held = {
        (d.resource, d.device_id): d.numa
        for pod in reading.pods
        for c in pod.containers
        for d in c.devices
    }
    return allocatable, held


def hardware_numa(telemetry: Telemetry | None) -> dict[str, int]:
    """The NUMA node of each PCI function and GPU the telemetry read, by canonical id
    (:func:`~podres_exporter.core.ids.resolve`'s key); those without one left out."""
    if telemetry is None:
        return {}
    out: dict[str, int] = {}
    if telemetry.devices is not None:
        for pci in telemetry.devices.pci:
            if pci.numa_node is not None:
                out[resolve("", pci.address).key] = pci.numa_node
    if telemetry.gpus is not None:
        for gpu in telemetry.gpus.gpus:
            if gpu.numa_node is not None:
                out[resolve("nvidia.com/gpu", gpu.uuid).key] = gpu.numa_node
    return out


def registered_devices(
    checkpoint: DeviceCheckpoint,
    reading: KubeletReading | None,
    before: RegisteredDevices | None = None,
    hardware: Mapping[str, int] | None = None,
) -> RegisteredDevices:
    """The registered devices of ``checkpoint`` counted per resource and NUMA placement,
    placed by ``reading`` where it can, by the checkpoint's allocations, by what
    ``before`` knew, else by ``hardware`` (:func:`hardware_numa`; the module's order)."""
    sources = (
        *_placements(reading),
        checkpoint.allocated_numa,
        before.known_numa if before is not None else {},
    )
    hardware = hardware or {}
    counts: dict[tuple[str, str | None], int] = {}
    known: dict[DeviceKey, NumaNodes] = {}
    for resource, ids in checkpoint.registered.items():
        for device in ids:
            key = (resource, device)
            found, placed = _placed(key, sources, hardware)
            label: str | None = None
            if found:
                known[key] = placed
                label = numa_label(placed)
            counts[(resource, label)] = counts.get((resource, label), 0) + 1
    return RegisteredDevices(MappingProxyType(counts), MappingProxyType(known))


def _placed(
    key: DeviceKey, sources: tuple[Mapping[DeviceKey, NumaNodes], ...], hardware: Mapping[str, int]
) -> tuple[bool, NumaNodes]:
    """Whether ``key`` is placed, and where: by the first of ``sources`` that has it, else
    by the hardware (the id resolved only then: resolving every id costs more than the
    rest of the count)."""
    for source in sources:
        if key in source:
            return True, source[key]
    if hardware:
        node = hardware.get(resolve(*key).key)
        if node is not None:
            return True, (node,)
    return False, None
