"""The device trees the sysfs tests read, and helpers to look into them and to count what
a read opens."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from podres_exporter.core.telemetry import NetReading, PciReading, SysfsDevices
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
    interface_name,
)

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


EXTRA_PF = "0000:e1:00.0"


def large_specs(pfs: int = 4, vfs: int = 8) -> list[DeviceTreeSpec]:
    """The test tree plus NICs with many SR-IOV VFs and an HCA, as on a large node."""
    nics: list[DeviceTreeSpec] = []
    for bus in range(0x60, 0x60 + 2 * pfs, 2):  # (bus - 1):01.0 is each bus's root port
        functions = tuple(
            NicVf(f"0000:{bus:02x}:{2 + f // 8:02x}.{f % 8}", None) for f in range(vfs)
        )
        address = f"0000:{bus:02x}:00.0"
        nics.append(NicPf(address, interface_name(address), numa=bus % 2, vfs=functions))
    hca = InfinibandHca("0000:d1:00.0", device="mlx5_9", ports=(IbPort(1), IbPort(2)))
    return [*SPECS, *nics, hca]


def pci_of(devices: SysfsDevices, address: str) -> PciReading:
    return next(p for p in devices.pci if p.address == address)


def net_of(devices: SysfsDevices, name: str) -> NetReading:
    return next(n for n in devices.net if n.interface == name)


def real(tree: Path, address: str) -> Path:
    return (tree / "bus/pci/devices" / address).resolve()


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


class OpenedFiles:
    """An opener (``os.open``'s shape) that records the paths of the files, not
    directories, that a read opens through it."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, path: str, flags: int, *, dir_fd: int | None = None) -> int:
        if not flags & os.O_DIRECTORY:
            self.paths.append(path)
        return os.open(path, flags, dir_fd=dir_fd)


# ------------------------------------------------------------------- this machine

SYS = Path("/sys")


SELECTED_CLASSES = (0x02, 0x03, 0x12)


def read_or_none(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
