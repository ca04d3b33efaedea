"""Every registered device per resource and NUMA node (core/accounting/registered.py)."""

from __future__ import annotations

from types import MappingProxyType

from podres_exporter.core.accounting.registered import hardware_numa, registered_devices
from podres_exporter.core.kubeletfiles import DeviceCheckpoint
from podres_exporter.core.model import Allocatable, ContainerAlloc, DeviceRef, NodeTopology
from podres_exporter.core.telemetry import PciReading, SysfsDevices, Telemetry
from podres_exporter.core.view import NodeView, Snapshot
from tests.core.accounting.support import GPU, pod, reading

VF = "intel.com/sriov"


def checkpoint(
    registered: dict[str, tuple[str, ...]],
    allocated: dict[tuple[str, str], tuple[int, ...] | None] | None = None,
) -> DeviceCheckpoint:
    return DeviceCheckpoint(MappingProxyType(registered), MappingProxyType(allocated or {}))


def test_unhealthy_devices_count_and_keep_the_numa_node_they_had() -> None:
    """A device allocatable in one reading and unhealthy (not allocatable) in the next
    keeps its NUMA node; one never placed has no NUMA label (None)."""
    cp = checkpoint({GPU: ("g0", "g1", "g2")})
    healthy = reading(
        (), Allocatable(devices=(DeviceRef(GPU, "g0", (0,)), DeviceRef(GPU, "g1", (1,))))
    )
    first = registered_devices(cp, healthy)
    assert dict(first.counts) == {(GPU, "0"): 1, (GPU, "1"): 1, (GPU, None): 1}
    g1_sick = reading((), Allocatable(devices=(DeviceRef(GPU, "g0", (0,)),)))
    second = registered_devices(cp, g1_sick, first)
    assert dict(second.counts) == {(GPU, "0"): 1, (GPU, "1"): 1, (GPU, None): 1}
    assert registered_devices(cp, g1_sick).counts[(GPU, None)] == 2  # nothing remembered


def test_placement_comes_from_held_devices_and_the_checkpoints_allocations() -> None:
    """Held devices (this reading) place before the checkpoint's allocations; ``-1`` in
    the checkpoint (no topology) is ``none``."""
    cp = checkpoint(
        {GPU: ("g0", "g1"), "x.io/kvm": ("k0",)}, {(GPU, "g1"): (1,), ("x.io/kvm", "k0"): None}
    )
    held = reading((pod("p", ContainerAlloc("c", devices=(DeviceRef(GPU, "g0", (0, 1)),))),))
    got = registered_devices(cp, held)
    assert dict(got.counts) == {(GPU, "0,1"): 1, (GPU, "1"): 1, ("x.io/kvm", "none"): 1}


def test_the_hardware_places_what_the_kubelet_never_reported() -> None:
    """An unhealthy VF whose id is a PCI address takes the NUMA node sysfs gives it."""
    telemetry = Telemetry(devices=SysfsDevices(pci=(PciReading("0000:af:02.7", numa_node=1),)))
    cp = checkpoint({VF: ("0000:AF:02.7", "0000:af:02.8")})
    got = registered_devices(cp, None, None, hardware_numa(telemetry))
    assert dict(got.counts) == {(VF, "1"): 1, (VF, None): 1}


def test_memory_is_bounded_by_the_registered_devices() -> None:
    """A device no longer registered is forgotten."""
    cp = checkpoint({GPU: ("g0",)})
    first = registered_devices(cp, reading((), Allocatable(devices=(DeviceRef(GPU, "g0", (0,)),))))
    gone = registered_devices(checkpoint({GPU: ("g1",)}), None, first)
    assert dict(gone.known_numa) == {}
    assert dict(gone.counts) == {(GPU, None): 1}


def test_a_view_reuses_the_count_while_nothing_that_places_a_device_changed() -> None:
    """The same checkpoint and kubelet state: the previous view's count itself, whatever
    the telemetry does once every device is placed; new telemetry is looked at while one
    is not."""
    topo = NodeTopology(frozenset({0}))
    r = reading((), Allocatable(devices=(DeviceRef(VF, "0000:af:02.0", (0,)),)))
    placed = checkpoint({VF: ("0000:af:02.0",)})
    unplaced = checkpoint({VF: ("0000:af:02.0", "0000:af:02.7")})

    def view(cp: DeviceCheckpoint, numa: int | None, before: NodeView | None) -> NodeView:
        pci = SysfsDevices(pci=(PciReading("0000:af:02.7", numa_node=numa),))
        telemetry = Telemetry(devices=pci, device_checkpoint=cp)
        return NodeView.of(Snapshot(1, 0.0, topo, r, True, telemetry=telemetry), before)

    first = view(placed, None, None)
    assert view(placed, 1, first).registered is first.registered
    waiting = view(unplaced, None, None)
    assert waiting.registered is not None and not waiting.registered.all_placed
    found = view(unplaced, 1, waiting).registered
    assert found is not None and dict(found.counts) == {(VF, "0"): 1, (VF, "1"): 1}
