"""Allocate content and preferred allocation: tables, then properties (hypothesis)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podres_exporter.core.errors import AllocationError
from podres_exporter.deviceplugin.allocate import (
    DeviceNode,
    allocate,
    pci_env_name,
    preferred_allocation,
)
from podres_exporter.deviceplugin.config import DiscoverKind, ResourceConfig, parse_config
from podres_exporter.deviceplugin.inventory import Device, Hardware, ResourceInventory, device_id

GPU = [f"GPU-0c5a1f2e-8a7f-4c1e-9b3d-{i:012d}" for i in range(8)]


def resource(name: str, kind: str, **fields: Any) -> ResourceConfig:
    discover = {"kind": kind, **fields.pop("discover", {})}
    if kind == "pci":
        discover.setdefault("vendor", "0x8086")
    if kind == "netdev":
        discover.setdefault("pattern", "*")
    if kind == "dev":
        discover.setdefault("glob", "*")
    return parse_config({"resource": [{"name": name, "discover": discover, **fields}]}).resources[0]


def make_inventory(
    res: ResourceConfig,
    hardware: Sequence[Hardware],
    topology: Mapping[tuple[str, str], int] | None = None,
) -> ResourceInventory:
    devices: list[Device] = []
    for hw in hardware:
        replicas = range(res.replicas) if res.replicas > 1 else [None]
        devices.extend(
            Device(device_id(hw.key, r), hw.key, r, hw.healthy, hw.numa_nodes) for r in replicas
        )
    return ResourceInventory.of(res.name, devices, {h.key: h for h in hardware}, topology)


def gpu_hw(i: int, numa: int = 0, **kw: Any) -> Hardware:
    return Hardware(
        GPU[i], DiscoverKind.NVML, numa_nodes=(numa,), gpu_uuid=GPU[i], topology_key=GPU[i], **kw
    )


def vf_hw(address: str, numa: int = 0, **kw: Any) -> Hardware:
    return Hardware(address, DiscoverKind.PCI, numa_nodes=(numa,), pci_address=address, **kw)


# ------------------------------------------------------------------------ Allocate


def test_gpus_get_nvidia_visible_devices_with_replicas_resolved() -> None:
    """Replicas of one GPU name it once; order follows the request."""
    res = resource("nvidia.com/gpu", "nvml", replicas=2)
    inv = make_inventory(res, [gpu_hw(0), gpu_hw(1)])
    alloc = allocate(res, inv, [f"{GPU[1]}::0", f"{GPU[0]}::1", f"{GPU[1]}::1"])
    assert dict(alloc.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{GPU[1]},{GPU[0]}"}
    assert alloc.devices == () and alloc.cdi_devices == ()


def test_vfio_functions_get_their_iommu_group_and_the_vfio_container() -> None:
    """vfio-pci VFs: PCIDEVICE_<RESOURCE> and /dev/vfio/<group> + /dev/vfio/vfio, rw."""
    res = resource("intel.com/sriov_vf", "pci", cdi="intel.com/net")
    inv = make_inventory(
        res,
        [
            vf_hw("0000:af:02.0", driver="vfio-pci", iommu_group="40"),
            vf_hw("0000:af:02.1", driver="vfio-pci", iommu_group="41"),
            vf_hw("0000:af:02.2", driver="iavf"),
        ],
    )
    alloc = allocate(res, inv, ["0000:af:02.1", "0000:af:02.0", "0000:af:02.2"])
    assert dict(alloc.envs) == {
        "PCIDEVICE_INTEL_COM_SRIOV_VF": "0000:af:02.1,0000:af:02.0,0000:af:02.2"
    }
    assert alloc.devices == (
        DeviceNode("/dev/vfio/41", "/dev/vfio/41", "rw"),
        DeviceNode("/dev/vfio/40", "/dev/vfio/40", "rw"),
        DeviceNode("/dev/vfio/vfio", "/dev/vfio/vfio", "rw"),
    )
    assert alloc.cdi_devices == (
        "intel.com/net=0000:af:02.1",
        "intel.com/net=0000:af:02.0",
        "intel.com/net=0000:af:02.2",
    )


@pytest.mark.parametrize(
    ("resource_name", "env"),
    [
        ("intel.com/sriov_netdevice", "PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE"),
        ("example.com/a-b.c", "PCIDEVICE_EXAMPLE_COM_A_B_C"),
    ],
)
def test_the_pci_variable_is_named_like_the_sriov_plugin_names_it(
    resource_name: str, env: str
) -> None:
    """Resource name upper-cased, every non-alphanumeric an underscore."""
    assert pci_env_name(resource_name) == env


def test_netdevs_dev_nodes_and_env_overrides() -> None:
    """netdev -> PODRES_NETDEVICES; dev -> the node rw at /dev; env overrides last."""
    net = resource("example.com/nic", "netdev", env={"PODRES_NETDEVICES": "forced", "X": "1"})
    net_inv = make_inventory(net, [Hardware("ens1", DiscoverKind.NETDEV, interface="ens1")])
    assert dict(allocate(net, net_inv, ["ens1"]).envs) == {"PODRES_NETDEVICES": "forced", "X": "1"}
    plain = resource("example.com/nic2", "netdev")
    assert dict(
        allocate(plain, make_inventory(plain, list(net_inv.hardware.values())), ["ens1"]).envs
    ) == {"PODRES_NETDEVICES": "ens1"}
    dev = resource("example.com/render", "dev", cdi="example.com/render")
    dev_inv = make_inventory(
        dev, [Hardware("renderD128", DiscoverKind.DEV, dev_path="dri/renderD128")]
    )
    alloc = allocate(dev, dev_inv, ["renderD128"])
    assert alloc.devices == (DeviceNode("/dev/dri/renderD128", "/dev/dri/renderD128", "rw"),)
    assert alloc.cdi_devices == ("example.com/render=renderD128",)
    assert dict(alloc.envs) == {}


def test_unknown_ids_are_refused_by_name() -> None:
    """Unknown ids: AllocationError (reason unknown) naming each of them."""
    res = resource("nvidia.com/gpu", "nvml")
    inv = make_inventory(res, [gpu_hw(0)])
    with pytest.raises(AllocationError) as info:
        allocate(res, inv, [GPU[0], "GPU-nope", "nvidia7"])
    assert info.value.reason == "unknown"
    assert "GPU-nope, nvidia7" in str(info.value)
    assert "nvidia.com/gpu" in str(info.value)


def test_unhealthy_ids_are_refused_with_the_reason() -> None:
    """Unhealthy ids: AllocationError (reason unhealthy) naming the id and why."""
    res = resource("nvidia.com/gpu", "nvml")
    inv = make_inventory(res, [gpu_hw(0), gpu_hw(1, healthy=False, reason="critical XID 79")])
    with pytest.raises(AllocationError) as info:
        allocate(res, inv, [GPU[0], GPU[1]])
    assert info.value.reason == "unhealthy"
    assert f"{GPU[1]} (critical XID 79)" in str(info.value)


# ------------------------------------------------------------ preferred allocation


def test_preferred_keeps_to_one_numa_node_when_it_can() -> None:
    """Two devices from node 1 (which has two) rather than one from each node."""
    res = resource("intel.com/vf", "pci")
    inv = make_inventory(
        res, [vf_hw("0000:17:02.0", 0), vf_hw("0000:af:02.0", 1), vf_hw("0000:af:02.1", 1)]
    )
    available = ["0000:17:02.0", "0000:af:02.0", "0000:af:02.1"]
    assert preferred_allocation(inv, available, [], 2) == ("0000:af:02.0", "0000:af:02.1")
    assert preferred_allocation(inv, available, [], 1) == ("0000:17:02.0",)


def test_preferred_honours_must_include_and_its_numa_node() -> None:
    """must-include is always in; the rest come from its NUMA node first."""
    res = resource("intel.com/vf", "pci")
    inv = make_inventory(
        res,
        [vf_hw("0000:17:02.0", 0), vf_hw("0000:17:02.1", 0), vf_hw("0000:af:02.0", 1)],
    )
    got = preferred_allocation(
        inv, ["0000:17:02.0", "0000:af:02.0", "0000:17:02.1"], ["0000:af:02.0"], 2
    )
    assert got == ("0000:17:02.0", "0000:af:02.0")


def test_preferred_spreads_replicas_over_distinct_gpus_first() -> None:
    """With replicas, each GPU is used once before any is used twice."""
    res = resource("nvidia.com/gpu", "nvml", replicas=4)
    inv = make_inventory(res, [gpu_hw(0), gpu_hw(1), gpu_hw(2)])
    got = preferred_allocation(inv, [d.id for d in inv.devices], [], 3)
    assert got == (f"{GPU[0]}::0", f"{GPU[1]}::0", f"{GPU[2]}::0")
    got = preferred_allocation(inv, [d.id for d in inv.devices], [f"{GPU[1]}::2"], 2)
    assert got == (f"{GPU[0]}::0", f"{GPU[1]}::2")


def test_preferred_picks_the_nvlinked_pair() -> None:
    """Of four GPUs on one node, the pair joined by NVLink wins over lower ids."""
    res = resource("nvidia.com/gpu", "nvml")
    topo: dict[tuple[str, str], int] = {}
    for a in range(4):
        for b in range(4):
            if a != b:
                topo[(GPU[a], GPU[b])] = 40
    topo[(GPU[2], GPU[3])] = topo[(GPU[3], GPU[2])] = -4
    inv = make_inventory(res, [gpu_hw(i) for i in range(4)], topo)
    assert preferred_allocation(inv, GPU[:4], [], 2) == (GPU[2], GPU[3])
    assert preferred_allocation(inv, GPU[:4], [GPU[0]], 2) == (GPU[0], GPU[1])
    topo[(GPU[0], GPU[3])] = topo[(GPU[3], GPU[0])] = -12
    inv = make_inventory(res, [gpu_hw(i) for i in range(4)], topo)
    assert preferred_allocation(inv, GPU[:4], [], 2) == (GPU[0], GPU[3])
    assert preferred_allocation(inv, GPU[:4], [], 3) == (GPU[0], GPU[2], GPU[3])


def test_preferred_prefers_a_closer_pcie_path() -> None:
    """Without NVLink, a shared PCIe switch (SINGLE) beats the host bridge."""
    res = resource("nvidia.com/gpu", "nvml")
    topo = {}
    for a in range(3):
        for b in range(3):
            if a != b:
                topo[(GPU[a], GPU[b])] = 30
    topo[(GPU[1], GPU[2])] = topo[(GPU[2], GPU[1])] = 10
    inv = make_inventory(res, [gpu_hw(i) for i in range(3)], topo)
    assert preferred_allocation(inv, GPU[:3], [], 2) == (GPU[1], GPU[2])


@pytest.mark.parametrize(
    ("available", "must", "size", "expected"),
    [
        (["b", "a", "c"], [], 2, ("a", "b")),  # ties: lowest ids
        (["a", "b"], [], 5, ("a", "b")),  # more than there is: all of them
        (["a", "b", "c"], ["c"], 1, ("c",)),
        (["a", "b", "c"], ["c", "b"], 1, ("b", "c")),  # never fewer than must-include
        (["a", "b"], [], 0, ()),
        ([], [], 3, ()),
        (["x", "unknown-id"], [], 1, ("unknown-id",)),  # ids we do not know are still ids
    ],
)
def test_preferred_edge_cases(
    available: list[str], must: list[str], size: int, expected: tuple[str, ...]
) -> None:
    """Sizes beyond the pool, must-include beyond the size, empty inputs, unknown ids."""
    res = resource("example.com/d", "dev")
    hw = [Hardware(k, DiscoverKind.DEV, dev_path=k) for k in ("a", "b", "c", "x")]
    assert preferred_allocation(make_inventory(res, hw), available, must, size) == expected


# ---------------------------------------------------------------------- properties


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ResourceInventory, list[str], list[str], int]:
    """A random inventory (NUMA nodes, replicas, topology), availability and request."""
    replicas = draw(st.integers(1, 4))
    res = resource("nvidia.com/gpu", "nvml", replicas=replicas)
    count = draw(st.integers(1, 6))
    hardware = [gpu_hw(i, draw(st.integers(0, 2))) for i in range(count)]
    topo = {}
    for a in range(count):
        for b in range(a + 1, count):
            level = draw(st.sampled_from([-4, -1, 0, 10, 20, 30, 40, 50, None]))
            if level is not None:
                topo[(GPU[a], GPU[b])] = topo[(GPU[b], GPU[a])] = level
    inv = make_inventory(res, hardware, topo)
    ids = [d.id for d in inv.devices]
    available = draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids)))
    must = draw(st.lists(st.sampled_from(available), unique=True)) if available else []
    size = draw(st.integers(0, len(ids) + 1))
    return inv, available, must, size


@settings(max_examples=150, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_preferred_allocation_properties(
    case: tuple[ResourceInventory, list[str], list[str], int], rnd: random.Random
) -> None:
    """Result is within available, holds must-include, has the right size, and is the
    same for the same request in any order."""
    inv, available, must, size = case
    got = preferred_allocation(inv, available, must, size)
    assert set(got) <= set(available)
    assert set(must) <= set(got)
    assert len(got) == len(set(got))
    assert len(got) == max(len(must), min(size, len(available)))
    shuffled_available, shuffled_must = list(available), list(must)
    rnd.shuffle(shuffled_available)
    rnd.shuffle(shuffled_must)
    assert preferred_allocation(inv, shuffled_available, shuffled_must, size) == got


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_preferred_allocation_uses_distinct_gpus_before_sharing(
    case: tuple[ResourceInventory, list[str], list[str], int],
) -> None:
    """Without must-include, no GPU is used twice while an available GPU is unused."""
    inv, available, _, size = case
    got = preferred_allocation(inv, available, [], size)
    used = [inv.by_id[i].hardware for i in got]
    if len(set(used)) < len(used):
        offered = {inv.by_id[i].hardware for i in available}
        # the NUMA narrowing may exclude some GPUs; within the chosen nodes all are used
        nodes = {n for i in got for n in inv.by_id[i].numa_nodes}
        eligible = {h for h in offered if set(inv.hardware[h].numa_nodes) <= nodes}
        assert set(used) == eligible
