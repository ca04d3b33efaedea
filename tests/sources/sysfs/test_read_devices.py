"""One read of the devices (``sources/sysfs/__init__.py``): selection across the classes,
files that cannot be read, devices that go while read, and the root."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from podres_exporter.core.errors import SourceError
from podres_exporter.core.telemetry import SysfsDevices
from podres_exporter.sources.cputopology import read_topology
from podres_exporter.sources.sysfs import net_interface_names, pci_function_addresses, read_devices
from podres_sim import write_sysfs
from podres_sim.host import NvidiaGpu, write_device_tree
from podres_sim.scenario import NodeSpec
from tests.sources.sysfs.support import (
    AMD,
    HCA,
    NVIDIA,
    PF,
    VF0,
    net_of,
    pci_of,
    real,
    replace_with,
)


def test_selection_by_pci_address(tree: Path) -> None:
    """Given addresses (any case, domain optional): only those, their ports, cards and netdevs."""
    devices = read_devices(tree, pci_addresses=["0000:5E:00.0", "3b:01.0", "0000:ff:00.0", "x"])
    assert [p.address for p in devices.pci] == [VF0, HCA]
    assert [n.interface for n in devices.net] == ["ens1f0v0", "ibp94s0"]
    assert {p.device for p in devices.infiniband} == {"mlx5_0"}
    assert devices.drm == ()
    amd_only = read_devices(tree, pci_addresses=[AMD])
    assert [c.card for c in amd_only.drm] == ["card0"]
    assert (amd_only.net, amd_only.infiniband) == ((), ())


def test_empty_selection_reads_nothing(tree: Path) -> None:
    """An empty address list selects no function, port, card or interface."""
    assert read_devices(tree, pci_addresses=[]) == SysfsDevices()


def test_listings_of_a_missing_tree_are_empty(tmp_path: Path) -> None:
    """Listing a root that is not there lists nothing, and does not raise."""
    assert pci_function_addresses(tmp_path / "nope") == []
    assert net_interface_names(tmp_path / "nope") == []


def test_unreadable_files_leave_fields_none(tree: Path) -> None:
    """Files that are directories, dangling links or garbage read as None, never raise."""
    pf = real(tree, PF)
    replace_with(pf / "numa_node", "node zero\n")
    replace_with(pf / "current_link_speed", "Unknown\n")
    replace_with(pf / "current_link_width", "dir")
    replace_with(pf / "vendor", "dangling")
    replace_with(pf / "aer_dev_correctable", "RxErr 5\ngarbage\nBadTLP x\nTimeout 1 2\n")
    replace_with(pf / "aer_dev_fatal", "dir")
    replace_with(next((pf / "hwmon").iterdir()) / "temp1_input", "dangling")
    stats = real(tree, VF0) / "net/ens1f0v0/statistics"
    replace_with(stats / "rx_bytes", "dir")
    replace_with(stats / "tx_bytes", "12abc\n")
    replace_with(stats / "rx_packets", "dangling")
    replace_with(real(tree, VF0) / "net/ens1f0v0/speed", "\n")
    replace_with(real(tree, VF0) / "net/ens1f0v0/operstate", "dangling")
    port = real(tree, HCA) / "infiniband/mlx5_0/ports/1"
    replace_with(port / "counters/symbol_error", "dir")
    replace_with(port / "hw_counters/out_of_buffer", "N/A\n")
    replace_with(port / "state", "dangling")
    replace_with(real(tree, AMD) / "gpu_busy_percent", "dir")
    replace_with(real(tree, AMD) / "mem_info_vram_used", "\xff\xfe")

    devices = read_devices(tree)
    pf_reading = pci_of(devices, PF)
    assert (pf_reading.numa_node, pf_reading.vendor_id) == (None, "")
    assert (pf_reading.link_speed_gts, pf_reading.link_width) == (None, None)
    assert pf_reading.max_link_speed_gts == 16.0
    assert dict(pf_reading.aer_correctable) == {"RxErr": 5}
    assert dict(pf_reading.aer_fatal) == {}
    assert pf_reading.temperature_celsius is None
    vf = net_of(devices, "ens1f0v0")
    assert (vf.rx_bytes, vf.tx_bytes, vf.rx_packets, vf.tx_packets) == (None, None, None, 20)
    assert (vf.speed_mbps, vf.operstate, vf.carrier) == (None, "unknown", True)
    active = devices.infiniband[0]
    assert "symbol_error" not in active.counters
    assert "out_of_buffer" not in active.counters
    assert active.counters["port_xmit_data"] == 123456
    assert active.state == ""
    amd = next(c for c in devices.drm if c.card == "card0")
    assert (amd.busy_ratio, amd.vram_used_bytes, amd.vram_total_bytes) == (None, None, 64 * 2**30)


def test_device_removed_between_listing_and_reading(tree: Path) -> None:
    """A function, netdev or HCA gone with its links left dangling is skipped, no exception."""
    shutil.rmtree(real(tree, VF0))
    shutil.rmtree(real(tree, HCA) / "infiniband/mlx5_0")
    shutil.rmtree(real(tree, AMD) / "drm/card0")
    devices = read_devices(tree)
    assert VF0 not in {p.address for p in devices.pci}
    assert "ens1f0v0" not in {n.interface for n in devices.net}
    assert devices.infiniband == ()
    assert [c.card for c in devices.drm] == ["card1", "card2"]
    assert read_devices(tree, pci_addresses=[VF0], interfaces=["ens1f0v0"]) == SysfsDevices()
    assert os.path.islink(tree / "bus/pci/devices" / VF0)  # the listing still names it


def test_unusable_root_raises(tmp_path: Path) -> None:
    """Only a root that cannot be listed is an error; an empty one is no devices."""
    with pytest.raises(SourceError, match="cannot read"):
        read_devices(tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(SourceError):
        read_devices(tmp_path / "file")
    assert read_devices(tmp_path) == SysfsDevices()


def test_shares_a_root_with_the_cpu_topology(tmp_path: Path) -> None:
    """The device tree and the CPU / NUMA files of write_sysfs live under one root."""
    write_sysfs(NodeSpec.uniform(2, 4), tmp_path)
    assert read_devices(tmp_path) == SysfsDevices()
    write_device_tree(tmp_path, [NvidiaGpu(NVIDIA, numa=1)])
    assert [p.numa_node for p in read_devices(tmp_path).pci] == [1]
    assert read_topology(tmp_path).cpu_to_numa[5] == 1
