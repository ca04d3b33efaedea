"""PCI functions (``sources/sysfs/pci.py``): which are read, their ids, NUMA node, link,
AER and hwmon values, and the listings the device plugin selects from."""

from __future__ import annotations

import os
from pathlib import Path

from podres_exporter.core.ids import normalize_pci
from podres_exporter.sources.sysfs import iommu_group, pci_function_addresses, read_devices
from tests.sources.sysfs.support import (
    ENDPOINTS,
    NVIDIA,
    NVIDIA_NO_NUMA,
    PF,
    SELECTED_CLASSES,
    SYS,
    VF0,
    VF1,
    pci_of,
    read_or_none,
    real,
)


def test_default_selection_is_nics_gpus_and_accelerators(tree: Path) -> None:
    """Without addresses, every network / display / accelerator function is read, no bridges."""
    devices = read_devices(tree)
    assert {p.address for p in devices.pci} == ENDPOINTS
    assert any(p.class_id == "0x060400" for p in read_devices(tree, pci_addresses=["3a:01.0"]).pci)
    assert [p.address for p in devices.pci] == sorted(ENDPOINTS)


def test_pf_reading(tree: Path) -> None:
    """A PF: ids, NUMA node, driver, PCIe link, AER counters, hwmon temperature, its netdev."""
    pf = pci_of(read_devices(tree), PF)
    assert (pf.vendor_id, pf.device_id, pf.class_id) == ("0x8086", "0x159b", "0x020000")
    assert pf.numa_node == 0
    assert pf.driver == "ice"
    assert pf.physfn is None
    assert (pf.link_speed_gts, pf.link_width) == (16.0, 16)
    assert (pf.max_link_speed_gts, pf.max_link_width) == (16.0, 16)
    assert pf.aer_correctable["RxErr"] == 3
    assert pf.aer_correctable["TOTAL_ERR_COR"] == 4
    assert pf.aer_fatal["MalfTLP"] == 2
    assert pf.aer_nonfatal["TOTAL_ERR_NONFATAL"] == 0
    assert pf.temperature_celsius == 55.5
    assert pf.power_watts is None
    assert pf.net_interfaces == ("ens1f0",)


def test_vf_reading(tree: Path) -> None:
    """A VF names its PF (physfn), shares its NUMA node, and has no link of its own."""
    devices = read_devices(tree)
    vf = pci_of(devices, VF0)
    assert vf.physfn == PF
    assert vf.numa_node == 0
    assert vf.driver == "iavf"
    assert (vf.link_speed_gts, vf.link_width, vf.max_link_speed_gts) == (None, None, None)
    assert dict(vf.aer_correctable) == {}
    assert vf.net_interfaces == ("ens1f0v0",)
    vfio = pci_of(devices, VF1)
    assert (vfio.driver, vfio.physfn, vfio.net_interfaces) == ("vfio-pci", PF, ())


def test_nvidia_gpu_numa_and_no_telemetry(tree: Path) -> None:
    """An NVIDIA 3D controller has its NUMA node (-1 reads None) and nothing from hwmon."""
    devices = read_devices(tree)
    gpu = pci_of(devices, NVIDIA)
    assert (gpu.class_id, gpu.driver, gpu.numa_node) == ("0x030200", "nvidia", 1)
    assert (gpu.link_speed_gts, gpu.link_width) == (32.0, 16)
    assert (gpu.temperature_celsius, gpu.power_watts, gpu.drm_cards) == (None, None, ())
    assert pci_of(devices, NVIDIA_NO_NUMA).numa_node is None


def test_numa_node_minus_one_is_none(tree: Path) -> None:
    """numa_node -1 (no affinity, single-socket machines) reads None, not -1."""
    (real(tree, PF) / "numa_node").write_text("-1\n")
    assert pci_of(read_devices(tree), PF).numa_node is None


# ------------------------------------------------------------------------ listings


def test_pci_function_addresses_lists_every_function(tree: Path) -> None:
    """Every function (bridges too), normalized and sorted; names that are no address
    are left out."""
    (tree / "bus/pci/devices/not-a-function").mkdir()
    os.symlink(real(tree, PF), tree / "bus/pci/devices/3B:00.1")
    listed = pci_function_addresses(tree)
    assert listed == sorted(listed)
    assert ENDPOINTS | {"0000:3a:01.0", "0000:3b:00.1"} <= set(listed)
    assert all(normalize_pci(a) == a for a in listed)


def test_iommu_group_is_the_target_of_the_link(tree: Path) -> None:
    """The group's number from ``iommu_group``; None without one, or for a function gone."""
    group = tree / "kernel/iommu_groups/41"
    group.mkdir(parents=True)
    link = real(tree, VF1) / "iommu_group"
    os.symlink(os.path.relpath(group, link.parent), link)
    assert iommu_group(tree, VF1) == "41"
    assert iommu_group(str(tree), VF1) == "41"
    assert iommu_group(tree, VF0) is None
    assert iommu_group(tree, "0000:ff:1f.7") is None


# -------------------------------------------------------------------- this machine


def test_real_sys_pci_functions_match_the_listing() -> None:
    """On this machine's /sys: exactly the NIC / GPU / accelerator functions, as the files say."""
    listed = os.listdir(SYS / "bus/pci/devices") if (SYS / "bus/pci/devices").is_dir() else []
    expected = set()
    for address in listed:
        class_id = read_or_none(SYS / "bus/pci/devices" / address / "class")
        code = int(class_id, 16) if class_id else 0
        if code >> 16 in SELECTED_CLASSES or code >> 8 == 0x0C06:
            expected.add(address)
    devices = read_devices(SYS)
    assert {p.address for p in devices.pci} == expected
    for p in devices.pci:
        d = SYS / "bus/pci/devices" / p.address
        numa = read_or_none(d / "numa_node")
        assert p.numa_node == (None if numa in (None, "-1") else int(numa or ""))
        assert p.vendor_id == read_or_none(d / "vendor")
        driver = os.path.basename(os.readlink(d / "driver")) if (d / "driver").exists() else None
        assert p.driver == driver
        assert set(p.net_interfaces) <= set(os.listdir(SYS / "class/net"))
    everything = read_devices(SYS, pci_addresses=listed)
    assert sorted(p.address for p in everything.pci) == sorted(listed)
