"""Device states per resource and NUMA placement, and the rows per held device and id."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podres_exporter.core.accounting import account
from podres_exporter.core.model import Allocatable, ContainerAlloc, DeviceRef, KubeletReading
from tests.core.accounting.support import GPU, pod, reading, topo


def test_devices_free_allocated_and_unhealthy_in_use() -> None:
    """Held-but-not-allocatable devices count as allocated_unhealthy only; free ones as free."""
    alloc = Allocatable(
        cpu_ids=frozenset(range(16)),
        devices=(
            DeviceRef(GPU, "g0", (0,)),
            DeviceRef(GPU, "g1", (0,)),
            DeviceRef(GPU, "g2", (1,)),
        ),
    )
    r = reading(
        (
            pod("a", ContainerAlloc("c", devices=(DeviceRef(GPU, "g0", (0,)),))),
            pod("b", ContainerAlloc("c", devices=(DeviceRef(GPU, "g3", (1,)),))),
        ),
        alloc,
    )
    acc = account(r, topo())
    nd = acc.node_devices
    assert acc.allocatable_devices[(GPU, "0")] == 2
    assert nd[(GPU, "0", "allocated")] == 1
    assert nd[(GPU, "0", "free")] == 1
    assert nd[(GPU, "0", "allocated_unhealthy")] == 0
    assert nd[(GPU, "1", "allocated")] == 0
    assert nd[(GPU, "1", "allocated_unhealthy")] == 1
    assert nd[(GPU, "1", "free")] == 1
    assert acc.allocatable_devices[(GPU, "1")] == 1
    assert {s for _, _, s in nd} == {"free", "allocated", "allocated_unhealthy"}
    assert [(d.holder.pod, d.device_id) for d in acc.container_devices] == [
        ("a", "g0"),
        ("b", "g3"),
    ]


def test_numa_zero_is_not_no_topology() -> None:
    """A device on NUMA node 0 and one without topology land under different labels."""
    alloc = Allocatable(devices=(DeviceRef("x/y", "d0", (0,)), DeviceRef("x/y", "d1", None)))
    acc = account(reading((), alloc), topo())
    assert acc.allocatable_devices[("x/y", "0")] == 1
    assert acc.allocatable_devices[("x/y", "none")] == 1


def test_device_on_two_numa_nodes_is_counted_once() -> None:
    """A device spanning nodes 0 and 1 is one device under numa_node '0,1'."""
    alloc = Allocatable(devices=(DeviceRef("x/y", "d0", (0, 1)),))
    acc = account(reading((), alloc), topo())
    assert acc.allocatable_devices[("x/y", "0,1")] == 1
    assert sum(acc.allocatable_devices.values()) == 1
    assert sum(acc.node_devices.values()) == 1


def test_device_held_by_two_containers_is_counted_once_and_flagged() -> None:
    """A duplicate device id across containers counts once and is reported as an anomaly."""
    d = DeviceRef(GPU, "g0", (0,))
    r = reading(
        (pod("a", ContainerAlloc("c", devices=(d,))), pod("b", ContainerAlloc("c", devices=(d,)))),
        Allocatable(devices=(d,)),
    )
    acc = account(r, topo())
    assert acc.node_devices[(GPU, "0", "allocated")] == 1
    assert acc.anomalies["device_held_by_several_containers"] == 1
    assert len(acc.container_devices) == 2


def test_without_allocatable_only_allocated_devices_are_reported() -> None:
    """No GetAllocatableResources: unknown states are absent, not zero."""
    r = reading((pod("a", ContainerAlloc("c", devices=(DeviceRef(GPU, "g0", None),))),), None)
    acc = account(r, topo())
    assert acc.node_devices == {(GPU, "none", "allocated"): 1}
    assert not acc.allocatable_devices


@st.composite
def device_readings(draw: st.DrawFn) -> KubeletReading:
    ids = [f"d{i}" for i in range(8)]
    allocatable = draw(st.sets(st.sampled_from(ids)))
    held = draw(st.lists(st.sampled_from(ids), max_size=10))
    numa = {d: draw(st.sampled_from([None, (0,), (1,), (0, 1)])) for d in ids}
    pods = tuple(
        pod(f"p{i}", ContainerAlloc("c", devices=(DeviceRef(GPU, d, numa[d]),)))
        for i, d in enumerate(held)
    )
    alloc = Allocatable(devices=tuple(DeviceRef(GPU, d, numa[d]) for d in sorted(allocatable)))
    return reading(pods, alloc)


@settings(max_examples=200, deadline=None)
@given(device_readings())
def test_device_states_balance(r: KubeletReading) -> None:
    """The states partition every known device; allocatable = free + allocated."""
    acc = account(r, topo())
    total = {s: 0 for s in ("allocated", "free", "allocated_unhealthy")}
    for (_, _, state), n in acc.node_devices.items():
        total[state] += n
    assert sum(acc.allocatable_devices.values()) == total["allocated"] + total["free"]
    held_ids = {d.device_id for p in r.pods for c in p.containers for d in c.devices}
    known = held_ids | {d.device_id for d in r.allocatable.devices} if r.allocatable else held_ids
    assert sum(total.values()) == len(known)
    assert total["allocated"] + total["allocated_unhealthy"] == len(held_ids)


def test_device_states_per_id() -> None:
    """Each device id gets one state: free, allocated, or allocated_unhealthy."""
    alloc = Allocatable(devices=(DeviceRef(GPU, "g0", (0,)), DeviceRef(GPU, "g1", (0,))))
    r = reading(
        (
            pod("a", ContainerAlloc("c", devices=(DeviceRef(GPU, "g0", (0,)),))),
            pod("b", ContainerAlloc("c", devices=(DeviceRef(GPU, "g9", (1,)),))),
        ),
        alloc,
    )
    states = {(s.device_id, s.numa, s.state) for s in account(r, topo()).device_states}
    assert states == {
        ("g0", "0", "allocated"),
        ("g1", "0", "free"),
        ("g9", "1", "allocated_unhealthy"),
    }
