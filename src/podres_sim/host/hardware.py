"""The hardware a simulated host's device tree is written from: NICs (SR-IOV PFs and
their VFs), InfiniBand HCAs, AMD, Intel and NVIDIA GPUs and virtual interfaces, as
frozen specs in natural units (watts, degrees Celsius, joules, MHz).

``devtree.write_device_tree`` lays them out the way the kernel does;
``layout.devices_for_scenario`` derives them from a scenario.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

__all__ = [
    "VF_LINK",
    "Aer",
    "AmdGpu",
    "DeviceTreeSpec",
    "IbPort",
    "InfinibandHca",
    "IntelGpu",
    "NetStats",
    "NicPf",
    "NicVf",
    "NvidiaGpu",
    "PcieLink",
    "VirtualNic",
]


def _empty() -> Mapping[str, int]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NetStats:
    """The counters of ``net/<if>/statistics`` (the other statistics files are 0)."""

    rx_bytes: int = 0
    tx_bytes: int = 0
    rx_packets: int = 0
    tx_packets: int = 0
    rx_errors: int = 0
    tx_errors: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0


@dataclass(frozen=True, slots=True)
class PcieLink:
    """The PCIe link of a function. A speed of None reads ``Unknown``, as a VF's does."""

    speed_gts: float | None = 16.0
    width: int = 16
    max_speed_gts: float | None = 16.0
    max_width: int = 16


VF_LINK = PcieLink(None, 0, None, 0)


@dataclass(frozen=True, slots=True)
class Aer:
    """AER counters to write, by name; the kernel's other names are written as 0."""

    correctable: Mapping[str, int] = field(default_factory=_empty)
    nonfatal: Mapping[str, int] = field(default_factory=_empty)
    fatal: Mapping[str, int] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class NicVf:
    """An SR-IOV virtual function of a ``NicPf``; ``interface`` None: no netdev (vfio-pci)."""

    address: str
    interface: str | None
    driver: str = "iavf"
    vendor_id: str = "0x8086"
    device_id: str = "0x1889"
    stats: NetStats = NetStats()
    operstate: str = "up"
    carrier: bool | None = True
    speed_mbps: int | None = 25000
    link: PcieLink = VF_LINK


@dataclass(frozen=True, slots=True)
class NicPf:
    """A NIC's physical function, with its VFs (written as siblings, same NUMA node)."""

    address: str
    interface: str | None
    numa: int | None = 0
    vfs: tuple[NicVf, ...] = ()
    driver: str = "ice"
    vendor_id: str = "0x8086"
    device_id: str = "0x159b"
    class_id: str = "0x020000"
    link: PcieLink = PcieLink()
    aer: Aer | None = Aer()
    stats: NetStats = NetStats()
    operstate: str = "up"
    carrier: bool | None = True
    speed_mbps: int | None = 25000
    temperature_celsius: float | None = None


@dataclass(frozen=True, slots=True)
class IbPort:
    """One port of an HCA. ``counters`` / ``hw_counters`` override the zero defaults."""

    port: int = 1
    state: str = "ACTIVE"  # DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER
    rate: str = "200 Gb/sec (4X HDR)"
    link_layer: str = "InfiniBand"
    counters: Mapping[str, int] = field(default_factory=_empty)
    hw_counters: Mapping[str, int] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class InfinibandHca:
    """An InfiniBand / RDMA HCA function; ``interface``: its IPoIB or Ethernet netdev."""

    address: str
    device: str = "mlx5_0"
    numa: int | None = 0
    ports: tuple[IbPort, ...] = (IbPort(),)
    interface: str | None = None
    driver: str = "mlx5_core"
    vendor_id: str = "0x15b3"
    device_id: str = "0x101b"
    class_id: str = "0x020700"
    link: PcieLink = PcieLink()
    aer: Aer | None = Aer()
    stats: NetStats = NetStats()
    temperature_celsius: float | None = None


@dataclass(frozen=True, slots=True)
class AmdGpu:
    """An amdgpu card: busy percent and VRAM in the PCI directory, hwmon beside them."""

    address: str
    card: str = "card0"
    numa: int | None = 0
    render: str | None = "renderD128"
    connectors: tuple[str, ...] = ()  # "DP-1" -> class/drm/card0-DP-1
    driver: str = "amdgpu"
    vendor_id: str = "0x1002"
    device_id: str = "0x74a1"
    class_id: str = "0x038000"
    link: PcieLink = PcieLink(32.0, 16, 32.0, 16)
    aer: Aer | None = Aer()
    busy_percent: int | None = 0
    vram_used_bytes: int | None = 0
    vram_total_bytes: int | None = 192 * 2**30
    power_watts: float | None = 150.0
    power_file: Literal["power1_average", "power1_input"] = "power1_average"
    energy_joules: float | None = None
    temperature_celsius: float | None = 40.0


@dataclass(frozen=True, slots=True)
class IntelGpu:
    """An Intel card: i915 GT frequency in ``card<N>/``, xe in ``device/tile0/gt0/freq0/``."""

    address: str
    card: str = "card1"
    numa: int | None = 0
    driver: Literal["i915", "xe"] = "i915"
    render: str | None = "renderD129"
    connectors: tuple[str, ...] = ()
    vendor_id: str = "0x8086"
    device_id: str = "0x56c0"
    class_id: str = "0x038000"
    link: PcieLink = PcieLink()
    aer: Aer | None = Aer()
    act_freq_mhz: int | None = 1300
    cur_freq_mhz: int | None = 1300
    energy_joules: float | None = 0.0
    power_watts: float | None = None
    temperature_celsius: float | None = None


@dataclass(frozen=True, slots=True)
class NvidiaGpu:
    """An NVIDIA data-centre GPU: a 3D-controller function with no sysfs telemetry."""

    address: str
    numa: int | None = 0
    driver: str = "nvidia"
    vendor_id: str = "0x10de"
    device_id: str = "0x2330"
    class_id: str = "0x030200"
    link: PcieLink = PcieLink(32.0, 16, 32.0, 16)
    aer: Aer | None = Aer()


@dataclass(frozen=True, slots=True)
class VirtualNic:
    """A virtual interface (lo, a veth, a bridge): ``devices/virtual/net``, no device link."""

    interface: str
    operstate: str = "unknown"
    stats: NetStats = NetStats()


DeviceTreeSpec = NicPf | InfinibandHca | AmdGpu | IntelGpu | NvidiaGpu | VirtualNic
