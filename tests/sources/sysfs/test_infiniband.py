"""InfiniBand ports (``sources/sysfs/infiniband.py``): state, rate and every counter."""

from __future__ import annotations

import os
from pathlib import Path

from podres_exporter.sources.sysfs import read_devices
from tests.sources.sysfs.support import HCA, SYS, pci_of


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


# -------------------------------------------------------------------- this machine


def test_real_sys_ports_exist() -> None:
    """On this machine's /sys: InfiniBand ports are the ones sysfs lists."""
    devices = read_devices(SYS)
    ib = SYS / "class/infiniband"
    ib_devices = set(os.listdir(ib)) if ib.is_dir() else set()
    assert {p.device for p in devices.infiniband} <= ib_devices
    for port in devices.infiniband:
        assert (ib / port.device / "ports" / str(port.port)).is_dir()
        assert all(isinstance(v, int) for v in port.counters.values())
