"""The simulator's sysfs device tree: specs from a scenario, the written layout, moving counters."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from podres_exporter.sources.sysfs import read_devices
from podres_sim import load_builtin
from podres_sim.host import (
    NetStats,
    NicPf,
    NicVf,
    NvidiaGpu,
    VirtualNic,
    bump_counters,
    devices_for_scenario,
    interface_name,
    write_device_tree,
)
from podres_sim.scenario import DeviceSpec, NodeSpec

SRIOV = "intel.com/sriov_netdevice"


def demo_vf_ids() -> dict[str, DeviceSpec]:
    return {d.id: d for d in load_builtin("demo").node.devices_of(SRIOV)}


def test_interface_names_follow_systemd_path_naming() -> None:
    """A function's netdev is named enp<bus>s<slot>f<function>, domain prefixed when not 0."""
    assert interface_name("0000:af:02.1") == "enp175s2f1"
    assert interface_name("0001:03:00.0") == "P1enp3s0f0"
    with pytest.raises(ValueError, match="not a PCI address"):
        interface_name("GPU-1234")


def test_demo_sriov_ids_become_vfs_under_one_pf() -> None:
    """Every SR-IOV device id of the demo is a VF with a netdev, under a PF on the same bus."""
    specs = devices_for_scenario(load_builtin("demo"))
    pfs = [s for s in specs if isinstance(s, NicPf)]
    assert len(pfs) == 1
    pf = pfs[0]
    assert (pf.address, pf.interface, pf.numa) == ("0000:af:00.0", "enp175s0f0", 1)
    ids = demo_vf_ids()
    assert [vf.address for vf in pf.vfs] == sorted(ids)
    assert [vf.interface for vf in pf.vfs] == [f"enp175s2f{i}" for i in range(8)]
    unhealthy = {vf.address for vf in pf.vfs if vf.operstate == "down"}
    assert unhealthy == {i for i, d in ids.items() if not d.healthy} == {"0000:af:02.7"}


def test_demo_gpus_become_nvidia_functions() -> None:
    """One NVIDIA function per GPU UUID (time-sliced replicas once), on its NUMA node."""
    node = load_builtin("demo").node
    specs = devices_for_scenario(node)
    gpus = [s for s in specs if isinstance(s, NvidiaGpu)]
    uuids = {d.id.split("::")[0]: d for d in node.devices if d.id.startswith("GPU-")}
    assert len(gpus) == len(uuids) == 5
    assert sorted(g.numa for g in gpus if g.numa is not None) == sorted(
        d.numa[0] for d in uuids.values() if d.numa
    )
    addresses = [g.address for g in gpus]
    assert len(set(addresses)) == len(addresses)
    assert all(a.endswith(":00.0") for a in addresses)
    assert [s for s in specs if isinstance(s, VirtualNic)] == [specs[0]]  # lo; MIG, kvm: none


def test_devices_for_scenario_is_deterministic(tmp_path: Path) -> None:
    """Same scenario, same specs, byte-identical trees."""
    scenario = load_builtin("demo")
    assert devices_for_scenario(scenario) == devices_for_scenario(load_builtin("demo"))
    trees = [write_device_tree(tmp_path / n, devices_for_scenario(scenario)) for n in "ab"]

    def snapshot(root: Path) -> dict[str, str]:
        out = {}
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                key = str(path.relative_to(root))
                out[key] = (
                    os.readlink(path)
                    if path.is_symlink()
                    else ("" if path.is_dir() else path.read_text())
                )
        return out

    assert snapshot(trees[0]) == snapshot(trees[1])


def test_demo_tree_reads_back(tmp_path: Path) -> None:
    """The written demo tree reads back: same addresses, NUMA nodes, PF relation, netdevs."""
    specs = devices_for_scenario(load_builtin("demo"))
    devices = read_devices(write_device_tree(tmp_path, specs))
    pf = next(s for s in specs if isinstance(s, NicPf))
    gpus = {g.address: g for g in specs if isinstance(g, NvidiaGpu)}
    ids = demo_vf_ids()
    pci = {p.address: p for p in devices.pci}
    assert set(pci) == {pf.address, *ids, *gpus}
    for address, dev in ids.items():
        assert pci[address].physfn == pf.address
        assert pci[address].numa_node == (dev.numa[0] if dev.numa else None)
        assert pci[address].net_interfaces == (interface_name(address),)
    assert pci[pf.address].physfn is None
    assert pci[pf.address].numa_node == pf.numa
    for address, gpu in gpus.items():
        assert (pci[address].numa_node, pci[address].class_id) == (gpu.numa, "0x030200")
    net = {n.interface: n for n in devices.net}
    assert set(net) == {interface_name(a) for a in [pf.address, *ids]}
    assert all(net[interface_name(a)].pci_address == a for a in ids)
    down = net["enp175s2f7"]
    assert (down.operstate, down.carrier, down.speed_mbps) == ("down", False, None)
    vf = next(v for v in pf.vfs if v.address == "0000:af:02.1")
    assert net["enp175s2f1"].rx_bytes == vf.stats.rx_bytes


def test_bump_counters_moves_up_links_only(tmp_path: Path) -> None:
    """bump_counters grows the counters of up PCI netdevs and leaves down links alone."""
    root = write_device_tree(tmp_path, devices_for_scenario(load_builtin("demo")))
    before = {n.interface: n for n in read_devices(root).net}
    bump_counters(root, random.Random(1), seconds=10)
    after = {n.interface: n for n in read_devices(root).net}
    for name, old in before.items():
        new = after[name]
        for key in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "rx_errors"):
            assert getattr(new, key) >= getattr(old, key)
        if old.operstate == "up":
            assert (new.rx_bytes or 0) > (old.rx_bytes or 0)
            assert (new.tx_packets or 0) > (old.tx_packets or 0)
        else:
            assert new == old
    assert not any(p.name.endswith(".tmp") for p in root.iterdir())


def test_bump_counters_is_deterministic_per_seed(tmp_path: Path) -> None:
    """The same seed moves the counters by the same amounts."""
    specs = devices_for_scenario(load_builtin("demo"))
    roots = [write_device_tree(tmp_path / n, specs) for n in "ab"]
    for root in roots:
        bump_counters(root, random.Random(7))
    assert read_devices(roots[0]) == read_devices(roots[1])


def test_pf_takes_the_first_free_function() -> None:
    """A VF id at <bus>:00.0 pushes the PF to 00.1; short ids count; dpdk VFs have no netdev."""
    node = NodeSpec.uniform(
        2,
        2,
        devices=[
            DeviceSpec("example.com/sriov_dpdk", "3b:00.0", (0,)),
            DeviceSpec("example.com/sriov_dpdk", "0000:3b:00.2", (0,)),
            DeviceSpec("nvidia.com/gpu", "GPU-aaaa", None),
            DeviceSpec("nvidia.com/mig-1g.10gb", "MIG-bbbb", (1,)),
            DeviceSpec("example.com/widget", "widget-0", (1,)),
        ],
    )
    specs = devices_for_scenario(node)
    pf = next(s for s in specs if isinstance(s, NicPf))
    assert pf.address == "0000:3b:00.1"
    assert [(vf.address, vf.interface, vf.driver) for vf in pf.vfs] == [
        ("0000:3b:00.0", None, "vfio-pci"),
        ("0000:3b:00.2", None, "vfio-pci"),
    ]
    gpus = [s for s in specs if isinstance(s, NvidiaGpu)]
    assert [g.numa for g in gpus] == [None]
    assert len(specs) == 3  # lo, the PF, the GPU


def test_write_rejects_bad_and_clashing_addresses(tmp_path: Path) -> None:
    """Addresses must be full and lower-case, and no two functions (root ports too) may clash."""
    with pytest.raises(ValueError, match="lower-case"):
        write_device_tree(tmp_path, [NvidiaGpu("0000:AF:00.0")])
    with pytest.raises(ValueError, match="used twice"):
        write_device_tree(tmp_path, [NvidiaGpu("0000:18:01.0"), NvidiaGpu("0000:19:00.0")])
    with pytest.raises(ValueError, match="used twice"):
        write_device_tree(tmp_path, [NicPf("0000:18:00.0", "x", vfs=(NicVf("0000:18:00.0", "y"),))])


def test_rewriting_a_tree_overwrites_its_values(tmp_path: Path) -> None:
    """Writing the tree again with other values replaces files and links in place."""
    write_device_tree(tmp_path, [NicPf("0000:3b:00.0", "ens1f0", stats=NetStats(rx_bytes=1))])
    write_device_tree(
        tmp_path, [NicPf("0000:3b:00.0", "ens1f0", numa=1, stats=NetStats(rx_bytes=99))]
    )
    devices = read_devices(tmp_path)
    assert devices.net[0].rx_bytes == 99
    assert devices.pci[0].numa_node == 1
