"""Device telemetry from sysfs: trees the simulator writes, and this machine's own /sys."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from podres_exporter.core.errors import SourceError
from podres_exporter.core.ids import normalize_pci
from podres_exporter.core.telemetry import NetReading, PciReading, SysfsDevices
from podres_exporter.sources.cputopology import read_topology
from podres_exporter.sources.devices import (
    iommu_group,
    net_interface_names,
    pci_function_addresses,
    read_devices,
)
from podres_sim import write_sysfs
from podres_sim.host import (
    Aer,
    AmdGpu,
    DeviceTreeSpec,
    IbPort,
    InfinibandHca,
    IntelGpu,
    NetStats,
    NicPf,
    NicVf,
    NvidiaGpu,
    VirtualNic,
    write_device_tree,
)
from podres_sim.scenario import NodeSpec

PF = "0000:3b:00.0"
VF0 = "0000:3b:01.0"
VF1 = "0000:3b:01.1"
VF_DOWN = "0000:3b:01.2"
HCA = "0000:5e:00.0"
AMD = "0000:c3:00.0"
I915 = "0000:4d:00.0"
XE = "0000:8a:00.0"
NVIDIA = "0000:18:00.0"
NVIDIA_NO_NUMA = "0000:9b:00.0"

SPECS: list[DeviceTreeSpec] = [
    VirtualNic("lo"),
    VirtualNic("veth3f2a1b", operstate="up"),
    VirtualNic("cni0", operstate="up"),
    NicPf(
        PF,
        "ens1f0",
        numa=0,
        stats=NetStats(rx_bytes=5000, tx_bytes=6000, rx_packets=50, tx_packets=60),
        aer=Aer(correctable={"RxErr": 3, "BadTLP": 1}, fatal={"MalfTLP": 2}),
        temperature_celsius=55.5,
        vfs=(
            NicVf(
                VF0,
                "ens1f0v0",
                stats=NetStats(
                    rx_bytes=1000,
                    tx_bytes=2000,
                    rx_packets=10,
                    tx_packets=20,
                    rx_errors=1,
                    tx_errors=2,
                    rx_dropped=3,
                    tx_dropped=4,
                ),
            ),
            NicVf(VF1, None, driver="vfio-pci"),
            NicVf(VF_DOWN, "ens1f0v2", operstate="down", carrier=None, speed_mbps=None),
        ),
    ),
    InfinibandHca(
        HCA,
        device="mlx5_0",
        numa=0,
        interface="ibp94s0",
        ports=(
            IbPort(
                1,
                "ACTIVE",
                counters={"port_xmit_data": 123456, "symbol_error": 2},
                hw_counters={"out_of_buffer": 7},
            ),
            IbPort(2, "DOWN", rate="10 Gb/sec (4X SDR)"),
        ),
    ),
    AmdGpu(
        AMD,
        card="card0",
        numa=1,
        connectors=("DP-1", "HDMI-A-1"),
        busy_percent=37,
        vram_used_bytes=8 * 2**30,
        vram_total_bytes=64 * 2**30,
        power_watts=123.456,
        temperature_celsius=45.0,
    ),
    IntelGpu(I915, card="card1", numa=0, act_freq_mhz=1450, cur_freq_mhz=1500, energy_joules=12.5),
    IntelGpu(
        XE,
        card="card2",
        render="renderD130",
        numa=1,
        driver="xe",
        act_freq_mhz=900,
        energy_joules=None,
        power_watts=80.25,
        temperature_celsius=61.0,
    ),
    NvidiaGpu(NVIDIA, numa=1),
    NvidiaGpu(NVIDIA_NO_NUMA, numa=None),
]
ENDPOINTS = {PF, VF0, VF1, VF_DOWN, HCA, AMD, I915, XE, NVIDIA, NVIDIA_NO_NUMA}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_device_tree(tmp_path / "sys", SPECS)


def pci_of(devices: SysfsDevices, address: str) -> PciReading:
    return next(p for p in devices.pci if p.address == address)


def net_of(devices: SysfsDevices, name: str) -> NetReading:
    return next(n for n in devices.net if n.interface == name)


def real(tree: Path, address: str) -> Path:
    return (tree / "bus/pci/devices" / address).resolve()


# --------------------------------------------------------------------------- PCI


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


# --------------------------------------------------------------------------- net


def test_net_interfaces_with_a_pci_device_only(tree: Path) -> None:
    """By default every PCI-backed netdev is read, and lo, veths and bridges are not."""
    devices = read_devices(tree)
    assert [n.interface for n in devices.net] == ["ens1f0", "ens1f0v0", "ens1f0v2", "ibp94s0"]
    vf = net_of(devices, "ens1f0v0")
    assert vf == NetReading(
        interface="ens1f0v0",
        pci_address=VF0,
        operstate="up",
        carrier=True,
        speed_mbps=25000,
        rx_bytes=1000,
        tx_bytes=2000,
        rx_packets=10,
        tx_packets=20,
        rx_errors=1,
        tx_errors=2,
        rx_dropped=3,
        tx_dropped=4,
    )
    assert net_of(devices, "ibp94s0").pci_address == HCA


def test_link_down_has_no_carrier_and_no_speed(tree: Path) -> None:
    """An administratively down link: carrier unreadable and speed -1 both read None."""
    down = net_of(read_devices(tree), "ens1f0v2")
    assert (down.operstate, down.carrier, down.speed_mbps) == ("down", None, None)
    assert down.rx_bytes == 0


# --------------------------------------------------------------------------- InfiniBand


def test_infiniband_ports(tree: Path) -> None:
    """Each port: state word, rate, and every integer of counters/ and hw_counters/."""
    devices = read_devices(tree)
    assert [(p.device, p.port) for p in devices.infiniband] == [("mlx5_0", 1), ("mlx5_0", 2)]
    active, down = devices.infiniband
    assert (active.state, active.rate, active.pci_address) == ("ACTIVE", "200 Gb/sec (4X HDR)", HCA)
    assert active.counters["port_xmit_data"] == 123456
    assert active.counters["symbol_error"] == 2
    assert active.counters["out_of_buffer"] == 7
    assert active.counters["lifespan"] == 12
    assert active.counters["link_downed"] == 0
    assert (down.state, down.rate) == ("DOWN", "10 Gb/sec (4X SDR)")
    assert pci_of(devices, HCA).infiniband_devices == ("mlx5_0",)
    assert pci_of(devices, HCA).class_id == "0x020700"


# --------------------------------------------------------------------------- DRM


def test_amdgpu_card(tree: Path) -> None:
    """amdgpu: busy percent as a ratio, VRAM, hwmon power W and temperature °C."""
    devices = read_devices(tree)
    assert [c.card for c in devices.drm] == ["card0", "card1", "card2"]
    amd = devices.drm[0]
    assert (amd.pci_address, amd.driver) == (AMD, "amdgpu")
    assert amd.busy_ratio == 0.37
    assert (amd.vram_used_bytes, amd.vram_total_bytes) == (8 * 2**30, 64 * 2**30)
    assert amd.power_watts == 123.456
    assert amd.temperature_celsius == 45.0
    assert (amd.energy_joules_total, amd.frequency_hz) == (None, None)
    pci = pci_of(devices, AMD)
    assert pci.drm_cards == ("card0",)
    assert (pci.power_watts, pci.temperature_celsius) == (123.456, 45.0)


def test_amdgpu_power_input(tmp_path: Path) -> None:
    """Newer amdgpu exposes power1_input instead of power1_average: read the same."""
    write_device_tree(tmp_path, [AmdGpu(AMD, power_file="power1_input", power_watts=300.5)])
    assert read_devices(tmp_path).drm[0].power_watts == 300.5


def test_intel_cards(tree: Path) -> None:
    """i915: gt_act_freq_mhz in Hz, energy µJ in J; xe: tile0/gt0/freq0/act_freq, hwmon power."""
    by_card = {c.card: c for c in read_devices(tree).drm}
    i915 = by_card["card1"]
    assert (i915.driver, i915.pci_address) == ("i915", I915)
    assert i915.frequency_hz == 1450e6
    assert i915.energy_joules_total == 12.5
    assert (i915.busy_ratio, i915.vram_total_bytes, i915.power_watts) == (None, None, None)
    xe = by_card["card2"]
    assert (xe.driver, xe.frequency_hz, xe.power_watts) == ("xe", 900e6, 80.25)
    assert (xe.temperature_celsius, xe.energy_joules_total) == (61.0, None)


def test_intel_current_frequency_when_no_actual(tmp_path: Path) -> None:
    """Without gt_act_freq_mhz the requested (current) frequency is reported."""
    write_device_tree(tmp_path, [IntelGpu(I915, act_freq_mhz=None, cur_freq_mhz=800)])
    assert read_devices(tmp_path).drm[0].frequency_hz == 800e6


# --------------------------------------------------------------------------- selection


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


def test_selection_by_interface(tree: Path) -> None:
    """Given interfaces: exactly those that exist, virtual ones included on request."""
    devices = read_devices(tree, pci_addresses=[], interfaces=["ens1f0", "lo", "nope", "../x"])
    assert [(n.interface, n.pci_address) for n in devices.net] == [("ens1f0", PF), ("lo", None)]
    assert devices.pci == ()


def test_empty_selection_reads_nothing(tree: Path) -> None:
    """An empty address list selects no function, port, card or interface."""
    assert read_devices(tree, pci_addresses=[]) == SysfsDevices()


# ---------------------------------------------------------------------- listings


def test_pci_function_addresses_lists_every_function(tree: Path) -> None:
    """Every function (bridges too), normalized and sorted; names that are no address
    are left out."""
    (tree / "bus/pci/devices/not-a-function").mkdir()
    os.symlink(real(tree, PF), tree / "bus/pci/devices/3B:00.1")
    listed = pci_function_addresses(tree)
    assert listed == sorted(listed)
    assert ENDPOINTS | {"0000:3a:01.0", "0000:3b:00.1"} <= set(listed)
    assert all(normalize_pci(a) == a for a in listed)


def test_net_interface_names_lists_every_interface(tree: Path) -> None:
    """Every interface under class/net, virtual ones included, sorted."""
    assert net_interface_names(tree) == sorted(os.listdir(tree / "class/net"))
    assert {"lo", "veth3f2a1b", "cni0", "ens1f0", "ens1f0v0", "ibp94s0"} <= set(
        net_interface_names(tree)
    )


def test_listings_of_a_missing_tree_are_empty(tmp_path: Path) -> None:
    assert pci_function_addresses(tmp_path / "nope") == []
    assert net_interface_names(tmp_path / "nope") == []


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


# --------------------------------------------------------------------------- robustness


def replace_with(path: Path, kind: str) -> None:
    """Make ``path`` unreadable as a file: a directory, a dangling link, or garbage."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "dir":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to("does-not-exist")
    else:
        path.write_text(kind)


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


def test_numa_node_minus_one_is_none(tree: Path) -> None:
    """numa_node -1 (no affinity, single-socket machines) reads None, not -1."""
    (real(tree, PF) / "numa_node").write_text("-1\n")
    assert pci_of(read_devices(tree), PF).numa_node is None


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


# --------------------------------------------------------------------------- this machine


SYS = Path("/sys")
SELECTED_CLASSES = (0x02, 0x03, 0x12)


def read_or_none(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


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


def test_real_sys_network_interfaces_are_pci_backed() -> None:
    """On this machine's /sys: PCI netdevs only, never lo, each with integer counters."""
    names = os.listdir(SYS / "class/net")
    devices = read_devices(SYS)
    returned = {n.interface: n for n in devices.net}
    assert "lo" not in returned
    assert set(returned) <= set(names)
    for name in names:
        link = SYS / "class/net" / name / "device"
        if not link.exists():
            assert name not in returned  # lo, veths, bridges, ifb ...
        elif normalize_pci(os.path.basename(os.readlink(link))):
            assert returned[name].pci_address == os.path.basename(os.readlink(link))
    for reading in returned.values():
        assert reading.pci_address is not None
        pci_dir = os.path.realpath(SYS / "bus/pci/devices" / reading.pci_address)
        device_dir = os.path.realpath(SYS / "class/net" / reading.interface / "device")
        assert device_dir == pci_dir or device_dir.startswith(pci_dir + "/")
        for value in (reading.rx_bytes, reading.tx_bytes, reading.rx_packets, reading.tx_packets):
            assert isinstance(value, int)
            assert value >= 0


def test_real_sys_every_interface_on_request() -> None:
    """Asked for every interface by name: all come back, carrier None where the kernel refuses."""
    names = sorted(os.listdir(SYS / "class/net"))
    devices = read_devices(SYS, pci_addresses=[], interfaces=names)
    assert [n.interface for n in devices.net] == names
    for reading in devices.net:
        carrier = read_or_none(SYS / "class/net" / reading.interface / "carrier")
        assert reading.carrier == (None if carrier is None else carrier != "0")
    lo = next((n for n in devices.net if n.interface == "lo"), None)
    assert lo is None or lo.pci_address is None


def test_real_sys_ports_and_cards_exist() -> None:
    """On this machine's /sys: InfiniBand ports and DRM cards are the ones sysfs lists."""
    devices = read_devices(SYS)
    ib = SYS / "class/infiniband"
    ib_devices = set(os.listdir(ib)) if ib.is_dir() else set()
    assert {p.device for p in devices.infiniband} <= ib_devices
    for port in devices.infiniband:
        assert (ib / port.device / "ports" / str(port.port)).is_dir()
        assert all(isinstance(v, int) for v in port.counters.values())
    drm = SYS / "class/drm"
    cards = {c for c in (os.listdir(drm) if drm.is_dir() else []) if re.fullmatch(r"card\d+", c)}
    assert {c.card for c in devices.drm} == cards
