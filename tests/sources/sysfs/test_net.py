"""Network interfaces (``sources/sysfs/net.py``): the PCI-backed ones by default, any by
name, their state, carrier, speed and statistics."""

from __future__ import annotations

import os
from pathlib import Path

from podres_exporter.core.ids import normalize_pci
from podres_exporter.core.telemetry import NetReading
from podres_exporter.sources.sysfs import net_interface_names, read_devices
from tests.sources.sysfs.support import HCA, PF, SYS, VF0, net_of, read_or_none


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


def test_selection_by_interface(tree: Path) -> None:
    """Given interfaces: exactly those that exist, virtual ones included on request."""
    devices = read_devices(tree, pci_addresses=[], interfaces=["ens1f0", "lo", "nope", "../x"])
    assert [(n.interface, n.pci_address) for n in devices.net] == [("ens1f0", PF), ("lo", None)]
    assert devices.pci == ()


def test_net_interface_names_lists_every_interface(tree: Path) -> None:
    """Every interface under class/net, virtual ones included, sorted."""
    assert net_interface_names(tree) == sorted(os.listdir(tree / "class/net"))
    assert {"lo", "veth3f2a1b", "cni0", "ens1f0", "ens1f0v0", "ibp94s0"} <= set(
        net_interface_names(tree)
    )


# -------------------------------------------------------------------- this machine


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
