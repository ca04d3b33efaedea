"""A fake sysfs device tree for a simulated node: PCI functions, NICs, HCAs, GPUs.

``write_device_tree`` lays a list of device specs out the way the kernel does, so the
exporter's device reader walks the same links it walks on a real node::

    devices/pci0000:ae/0000:ae:01.0/                      PCIe root port (a bridge)
    devices/pci0000:ae/0000:ae:01.0/0000:af:00.0/         the endpoint: vendor, device,
        class, numa_node, current_link_*, aer_dev_*, driver -> bus/pci/drivers/ice,
        virtfnN -> ../0000:af:02.N (SR-IOV PF), physfn -> ../0000:af:00.0 (VF),
        net/<if>/{operstate,carrier,speed,statistics/*}, infiniband/<dev>/ports/<n>/,
        drm/card<N>/, hwmon/hwmon<K>/
    bus/pci/devices/<address> -> ../../../devices/...     every function, bridges too
    bus/pci/drivers/<driver>/<address> -> the function
    class/{net,infiniband,drm,hwmon}/<name> -> the device directory
    devices/virtual/net/<if>/                             lo, veths, bridges

Quantities are given in natural units (watts, degrees Celsius, joules, MHz) and
written in the kernel's (microwatts, millidegrees, microjoules). Files the kernel
cannot answer are left out: a link's ``carrier`` is not written when the spec says
None (the kernel answers EINVAL there), a hwmon value that is None has no file.

``devices_for_scenario`` derives a plausible tree from a scenario's devices, and
``bump_counters`` advances every traffic counter and energy meter in a written tree,
so the demo's NIC counters move over time. It writes the CPU / NUMA files of
``sim.sysfs.write_sysfs`` not at all: both can share one root.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from podres_sim.scenario import DeviceSpec, NodeSpec, Scenario

__all__ = [
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
    "bump_counters",
    "devices_for_scenario",
    "interface_name",
    "write_device_tree",
]


def _empty() -> Mapping[str, int]:
    return MappingProxyType({})


# ------------------------------------------------------------------------------ specs


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

# ---------------------------------------------------------------------- kernel names

_AER_CORRECTABLE = (
    "RxErr",
    "BadTLP",
    "BadDLLP",
    "Rollover",
    "Timeout",
    "NonFatalErr",
    "CorrIntErr",
    "HeaderOF",
)
_AER_UNCORRECTABLE = (
    "Undefined",
    "DLP",
    "SDES",
    "TLP",
    "FCP",
    "CmpltTO",
    "CmpltAbrt",
    "UnxCmplt",
    "RxOF",
    "MalfTLP",
    "ECRC",
    "UnsupReq",
    "ACSViol",
    "UncorrIntErr",
    "BlockedTLP",
    "AtomicOpBlocked",
    "TLPBlockedErr",
    "PoisonTLPBlocked",
)
_NET_EXTRA_STATS = (
    "collisions",
    "multicast",
    "rx_compressed",
    "rx_crc_errors",
    "rx_fifo_errors",
    "rx_frame_errors",
    "rx_length_errors",
    "rx_missed_errors",
    "rx_nohandler",
    "rx_over_errors",
    "tx_aborted_errors",
    "tx_carrier_errors",
    "tx_compressed",
    "tx_fifo_errors",
    "tx_heartbeat_errors",
    "tx_window_errors",
)
_IB_COUNTERS = (
    "VL15_dropped",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
)
_IB_HW_COUNTERS = (
    "duplicate_request",
    "implied_nak_seq_err",
    "lifespan",
    "local_ack_timeout_err",
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "rnr_nak_retry_err",
    "rp_cnp_handled",
)
_IB_STATES = {"NOP": 0, "DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
_PCI_ADDRESS = re.compile(r"^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])$")


def _address(text: str) -> tuple[int, int, int, int] | None:
    """``"0000:af:02.1"`` (or ``"af:02.1"``, any case) -> (domain, bus, slot, function)."""
    match = _PCI_ADDRESS.match(text.strip().lower())
    if match is None:
        return None
    domain, bus, slot, function = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(slot, 16), int(function)


def _format(domain: int, bus: int, slot: int, function: int) -> str:
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function}"


def interface_name(address: str) -> str:
    """The systemd path-based name of a PCI function's netdev: ``0000:af:02.1`` ->
    ``enp175s2f1`` (``P1enp...`` outside domain 0)."""
    parts = _address(address)
    if parts is None:
        raise ValueError(f"not a PCI address: {address!r}")
    domain, bus, slot, function = parts
    prefix = f"P{domain}" if domain else ""
    return f"{prefix}enp{bus}s{slot}f{function}"


def _mac(key: str) -> str:
    digest = hashlib.sha256(key.encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def _speed(gts: float | None) -> str:
    return "Unknown" if gts is None else f"{gts:.1f} GT/s PCIe"


# ----------------------------------------------------------------------------- writer


class _Writer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.next_hwmon = 0
        self.ifindex = 0
        self.ports: dict[str, Path] = {}

    # -- primitives

    def write(self, path: Path, value: object) -> None:
        if path.is_symlink():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n", encoding="ascii")

    def link(self, link: Path, target: Path) -> None:
        if link.is_symlink() or link.is_file():
            link.unlink()
        elif link.is_dir():
            shutil.rmtree(link)
        link.parent.mkdir(parents=True, exist_ok=True)
        target.mkdir(parents=True, exist_ok=True)
        # Relative, and naming the target, as the kernel's links do: "../../../0000:af:00.0".
        os.symlink(os.path.join(os.path.relpath(target.parent, link.parent), target.name), link)

    # -- PCI

    def root_port(self, address: str, numa: int | None) -> Path:
        """The directory endpoints on ``address``'s bus hang from (bus 0: the host bridge)."""
        domain, bus, _, _ = _address(address) or (0, 0, 0, 0)
        if bus == 0:
            return self.root / "devices" / f"pci{domain:04x}:00"
        port = _format(domain, bus - 1, 1, 0)
        if port not in self.ports:
            parent = self.root / "devices" / f"pci{domain:04x}:{bus - 1:02x}"
            self.ports[port] = self.function(
                parent,
                port,
                numa=numa,
                vendor_id="0x8086",
                device_id="0x352a",
                class_id="0x060400",
                driver="pcieport",
                link=PcieLink(),
                aer=Aer(),
            )
        return self.ports[port]

    def function(
        self,
        parent: Path,
        address: str,
        *,
        numa: int | None,
        vendor_id: str,
        device_id: str,
        class_id: str,
        driver: str | None,
        link: PcieLink,
        aer: Aer | None,
    ) -> Path:
        d = parent / address
        self.write(d / "vendor", vendor_id)
        self.write(d / "device", device_id)
        self.write(d / "class", class_id)
        self.write(d / "numa_node", -1 if numa is None else numa)
        self.write(d / "enable", 1)
        self.write(d / "current_link_speed", _speed(link.speed_gts))
        self.write(d / "current_link_width", link.width)
        self.write(d / "max_link_speed", _speed(link.max_speed_gts))
        self.write(d / "max_link_width", link.max_width)
        self.write(
            d / "uevent",
            "\n".join(
                ([f"DRIVER={driver}"] if driver else [])
                + [
                    f"PCI_CLASS={int(class_id, 16):X}",
                    f"PCI_ID={vendor_id[2:].upper()}:{device_id[2:].upper()}",
                    f"PCI_SLOT_NAME={address}",
                ]
            ),
        )
        if aer is not None:
            self.aer(d / "aer_dev_correctable", _AER_CORRECTABLE, aer.correctable, "COR")
            self.aer(d / "aer_dev_nonfatal", _AER_UNCORRECTABLE, aer.nonfatal, "NONFATAL")
            self.aer(d / "aer_dev_fatal", _AER_UNCORRECTABLE, aer.fatal, "FATAL")
        self.link(d / "subsystem", self.root / "bus" / "pci")
        self.link(self.root / "bus" / "pci" / "devices" / address, d)
        if driver:
            drivers = self.root / "bus" / "pci" / "drivers" / driver
            self.link(d / "driver", drivers)
            self.link(drivers / address, d)
        return d

    def aer(self, path: Path, names: Sequence[str], counts: Mapping[str, int], kind: str) -> None:
        values = {name: 0 for name in names} | dict(counts)
        total = sum(values.values())
        lines = [f"{name} {count}" for name, count in values.items()]
        self.write(path, "\n".join([*lines, f"TOTAL_ERR_{kind} {total}"]))

    def hwmon(self, device: Path, name: str, values: Mapping[str, int | None]) -> Path:
        d = device / "hwmon" / f"hwmon{self.next_hwmon}"
        self.next_hwmon += 1
        self.write(d / "name", name)
        for key, value in values.items():
            if value is not None:
                self.write(d / key, value)
        self.link(d / "device", device)
        self.link(self.root / "class" / "hwmon" / d.name, d)
        return d

    # -- net

    def netdev(
        self,
        device: Path | None,
        name: str,
        *,
        operstate: str,
        carrier: bool | None,
        speed: int | None,
        stats: NetStats,
        kind: int = 1,
    ) -> None:
        if device is None:
            d = self.root / "devices" / "virtual" / "net" / name
        else:
            d = device / "net" / name
            self.link(d / "device", device)
        self.ifindex += 1
        self.write(d / "ifindex", self.ifindex)
        self.write(d / "iflink", self.ifindex)
        self.write(d / "type", kind)
        self.write(d / "mtu", 65536 if name == "lo" else 1500)
        self.write(d / "address", "00:00:00:00:00:00" if name == "lo" else _mac(name))
        self.write(d / "operstate", operstate)
        if carrier is not None:  # the kernel answers EINVAL: leave the file out
            self.write(d / "carrier", int(carrier))
        if device is not None:
            self.write(d / "speed", -1 if speed is None else speed)
            self.write(d / "duplex", "full" if speed is not None else "unknown")
        for key in _NET_EXTRA_STATS:
            self.write(d / "statistics" / key, 0)
        for f in fields(NetStats):
            self.write(d / "statistics" / f.name, getattr(stats, f.name))
        self.link(d / "subsystem", self.root / "class" / "net")
        self.link(self.root / "class" / "net" / name, d)

    # -- InfiniBand

    def infiniband(self, device: Path, hca: InfinibandHca) -> None:
        d = device / "infiniband" / hca.device
        guid = hashlib.sha256(hca.address.encode()).hexdigest()
        self.write(d / "node_type", "1: CA")
        self.write(d / "node_guid", f"{guid[0:4]}:{guid[4:8]}:{guid[8:12]}:{guid[12:16]}")
        self.write(d / "fw_ver", "20.39.1002")
        self.write(d / "hca_type", "MT4123")
        self.write(d / "board_id", "MT_0000000223")
        self.link(d / "device", device)
        for port in hca.ports:
            p = d / "ports" / str(port.port)
            code = _IB_STATES.get(port.state, 1)
            self.write(p / "state", f"{code}: {port.state}")
            self.write(p / "phys_state", "5: LinkUp" if code >= 2 else "3: Disabled")
            self.write(p / "rate", port.rate)
            self.write(p / "link_layer", port.link_layer)
            self.write(p / "lid", f"0x{port.port:x}")
            self.write(p / "sm_lid", "0x1")
            counters = dict.fromkeys(_IB_COUNTERS, 0) | dict(port.counters)
            for key, value in counters.items():
                self.write(p / "counters" / key, value)
            hw = dict.fromkeys(_IB_HW_COUNTERS, 0) | {"lifespan": 12} | dict(port.hw_counters)
            for key, value in hw.items():
                self.write(p / "hw_counters" / key, value)
        self.link(self.root / "class" / "infiniband" / hca.device, d)

    # -- DRM

    def drm(self, device: Path, card: str, render: str | None, connectors: Iterable[str]) -> Path:
        drm = device / "drm"
        minor = int(card[4:]) if card[4:].isdigit() else 0
        c = drm / card
        self.write(c / "dev", f"226:{minor}")
        self.link(c / "device", device)
        self.link(c / "subsystem", self.root / "class" / "drm")
        self.link(self.root / "class" / "drm" / card, c)
        for connector in connectors:
            con = c / f"{card}-{connector}"
            self.write(con / "status", "connected")
            self.write(con / "enabled", "enabled")
            self.link(self.root / "class" / "drm" / con.name, con)
        if render is not None:
            r = drm / render
            self.write(r / "dev", f"226:{render[7:] or 128}")
            self.link(r / "device", device)
            self.link(self.root / "class" / "drm" / render, r)
        self.write(self.root / "class" / "drm" / "version", "drm 1.1.0 20060810")
        return c

    # -- specs

    def spec(self, spec: DeviceTreeSpec) -> None:
        if isinstance(spec, VirtualNic):
            self.netdev(
                None,
                spec.interface,
                operstate=spec.operstate,
                carrier=True,
                speed=None,
                stats=spec.stats,
                kind=772 if spec.interface == "lo" else 1,
            )
            return
        parent = self.root_port(spec.address, spec.numa)
        d = self.function(
            parent,
            spec.address,
            numa=spec.numa,
            vendor_id=spec.vendor_id,
            device_id=spec.device_id,
            class_id=spec.class_id,
            driver=spec.driver,
            link=spec.link,
            aer=spec.aer,
        )
        if isinstance(spec, NicPf):
            self.nic(parent, d, spec)
        elif isinstance(spec, InfinibandHca):
            if spec.interface is not None:
                ipoib = spec.ports[0].link_layer == "InfiniBand" if spec.ports else False
                self.netdev(
                    d,
                    spec.interface,
                    operstate="up",
                    carrier=True,
                    speed=None,
                    stats=spec.stats,
                    kind=32 if ipoib else 1,
                )
            self.infiniband(d, spec)
            self.hwmon(d, "mlx5", {"temp1_input": _milli(spec.temperature_celsius)})
        elif isinstance(spec, AmdGpu):
            self.amd(d, spec)
        elif isinstance(spec, IntelGpu):
            self.intel(d, spec)

    def nic(self, parent: Path, d: Path, pf: NicPf) -> None:
        self.ethernet(d, pf)
        if pf.temperature_celsius is not None:
            self.hwmon(d, pf.driver, {"temp1_input": _milli(pf.temperature_celsius)})
        if pf.vfs:
            self.write(d / "sriov_totalvfs", max(64, len(pf.vfs)))
            self.write(d / "sriov_numvfs", len(pf.vfs))
        for i, vf in enumerate(pf.vfs):
            v = self.function(
                parent,
                vf.address,
                numa=pf.numa,
                vendor_id=vf.vendor_id,
                device_id=vf.device_id,
                class_id=pf.class_id,
                driver=vf.driver,
                link=vf.link,
                aer=None,
            )
            self.link(v / "physfn", d)
            self.link(d / f"virtfn{i}", v)
            self.ethernet(v, vf)

    def ethernet(self, d: Path, function: NicPf | NicVf) -> None:
        """The Ethernet netdev of a NIC's physical or virtual function, if it has one."""
        if function.interface is not None:
            self.netdev(
                d,
                function.interface,
                operstate=function.operstate,
                carrier=function.carrier,
                speed=function.speed_mbps,
                stats=function.stats,
            )

    def amd(self, d: Path, gpu: AmdGpu) -> None:
        for key, value in (
            ("gpu_busy_percent", gpu.busy_percent),
            ("mem_info_vram_used", gpu.vram_used_bytes),
            ("mem_info_vram_total", gpu.vram_total_bytes),
        ):
            if value is not None:
                self.write(d / key, value)
        self.write(d / "mem_busy_percent", 0)
        hwmon = self.hwmon(
            d,
            "amdgpu",
            {
                "temp1_input": _milli(gpu.temperature_celsius),
                gpu.power_file: _micro(gpu.power_watts),
                "energy1_input": _micro(gpu.energy_joules),
            },
        )
        self.write(hwmon / "temp1_label", "edge")
        self.drm(d, gpu.card, gpu.render, gpu.connectors)

    def intel(self, d: Path, gpu: IntelGpu) -> None:
        card = self.drm(d, gpu.card, gpu.render, gpu.connectors)
        if gpu.driver == "i915":
            freq = {"gt_act_freq_mhz": gpu.act_freq_mhz, "gt_cur_freq_mhz": gpu.cur_freq_mhz}
            base = card
        else:
            freq = {"act_freq": gpu.act_freq_mhz, "cur_freq": gpu.cur_freq_mhz}
            base = d / "tile0" / "gt0" / "freq0"
        for key, value in freq.items():
            if value is not None:
                self.write(base / key, value)
        self.hwmon(
            d,
            gpu.driver,
            {
                "energy1_input": _micro(gpu.energy_joules),
                "power1_input": _micro(gpu.power_watts),
                "temp1_input": _milli(gpu.temperature_celsius),
            },
        )


def _milli(value: float | None) -> int | None:
    return None if value is None else round(value * 1000)


def _micro(value: float | None) -> int | None:
    return None if value is None else round(value * 1_000_000)


def write_device_tree(root: str | Path, devices: Iterable[DeviceTreeSpec]) -> Path:
    """Write ``devices`` under ``root`` in the kernel's sysfs layout; return ``root``.

    Files and links already there are overwritten, so a test can rewrite a device;
    nothing is removed. Raises ValueError for an address that is not a PCI address
    or that two functions share (a function's root port, ``<bus-1>:01.0``, counts).
    """
    root = Path(root)
    specs = list(devices)
    addresses: list[str] = []
    for spec in specs:
        if isinstance(spec, VirtualNic):
            continue
        addresses.append(spec.address)
        if isinstance(spec, NicPf):
            addresses.extend(vf.address for vf in spec.vfs)
    for address in addresses:
        if _address(address) is None or address != address.lower() or len(address) != 12:
            raise ValueError(f"not a full lower-case PCI address: {address!r}")
    ports = set()
    for address in addresses:
        domain, bus, _, _ = _address(address) or (0, 0, 0, 0)
        if bus:
            ports.add(_format(domain, bus - 1, 1, 0))
    clashes = sorted({a for a in addresses if addresses.count(a) > 1} | (ports & set(addresses)))
    if clashes:
        raise ValueError(f"PCI addresses used twice (a root port counts): {clashes}")
    root.mkdir(parents=True, exist_ok=True)
    writer = _Writer(root)
    for spec in specs:
        writer.spec(spec)
    return root


# ---------------------------------------------------------------------------- scenario


def _stats(key: str, *, active: bool = True) -> NetStats:
    rng = random.Random(key)
    scale = 1 if active else 1000
    rx_packets = rng.randint(10**5, 10**8) // scale
    tx_packets = rng.randint(10**5, 10**8) // scale
    return NetStats(
        rx_bytes=rx_packets * rng.randint(80, 1500),
        tx_bytes=tx_packets * rng.randint(80, 1500),
        rx_packets=rx_packets,
        tx_packets=tx_packets,
        rx_errors=rng.choice((0, 0, 0, 1, 3)),
        tx_errors=0,
        rx_dropped=rng.randint(0, 200),
        tx_dropped=rng.choice((0, 0, 2)),
    )


def _numa(spec: DeviceSpec) -> int | None:
    return spec.numa[0] if spec.numa else None


def _nics(devices: Sequence[DeviceSpec], used: set[tuple[int, int]]) -> list[DeviceTreeSpec]:
    """A PF per PCI bus carrying VF device ids, at ``<bus>:00.0`` (or the next free function)."""
    groups: dict[tuple[int, int], dict[str, DeviceSpec]] = {}
    for dev in devices:
        parts = _address(dev.id)
        if parts is None:
            continue
        domain, bus, _, _ = parts
        groups.setdefault((domain, bus), {}).setdefault(_format(*parts), dev)
    out: list[DeviceTreeSpec] = []
    for (domain, bus), vfs in groups.items():
        used.update({(domain, bus), (domain, bus - 1)})
        free = (
            _format(domain, bus, slot, fn)
            for slot in range(32)
            for fn in range(8)
            if _format(domain, bus, slot, fn) not in vfs
        )
        pf_address = next(free, None)
        if pf_address is None:
            raise ValueError(f"no PCI function left for the PF on bus {bus:02x}")
        first = next(iter(vfs.values()))
        vendor = first.resource.split("/", 1)[0]
        mellanox = vendor not in ("intel.com",)
        no_netdev = any(word in first.resource for word in ("dpdk", "vfio"))
        out.append(
            NicPf(
                address=pf_address,
                interface=interface_name(pf_address),
                numa=_numa(first),
                driver="mlx5_core" if mellanox else "ice",
                vendor_id="0x15b3" if mellanox else "0x8086",
                device_id="0x101d" if mellanox else "0x159b",
                stats=_stats(pf_address),
                vfs=tuple(
                    NicVf(
                        address=address,
                        interface=None if no_netdev else interface_name(address),
                        driver="vfio-pci" if no_netdev else "mlx5_core" if mellanox else "iavf",
                        vendor_id="0x15b3" if mellanox else "0x8086",
                        device_id="0x101e" if mellanox else "0x1889",
                        stats=_stats(address, active=dev.healthy),
                        operstate="up" if dev.healthy else "down",
                        carrier=dev.healthy,
                        speed_mbps=25000 if dev.healthy else None,
                    )
                    for address, dev in sorted(vfs.items())
                ),
            )
        )
    return out


def _gpus(
    devices: Sequence[DeviceSpec], used: set[tuple[int, int]], numa_nodes: int
) -> list[DeviceTreeSpec]:
    """An NVIDIA function per GPU UUID, on a bus in its NUMA node's share of 0x10..0xef."""
    gpus: dict[str, DeviceSpec] = {}
    for dev in devices:
        if dev.resource.startswith("nvidia.com/") and dev.id.startswith("GPU-"):
            gpus.setdefault(dev.id.split("::", 1)[0], dev)  # time-slicing: "<uuid>::<n>"
    span = 0xE0 // max(numa_nodes, 1)
    out: list[DeviceTreeSpec] = []
    for dev in gpus.values():
        numa = _numa(dev)
        lo = 0x10 + span * min(numa or 0, max(numa_nodes - 1, 0))
        strided = range(lo + 8, lo + span, 0x12)
        candidates = [*strided, *range(lo, lo + span), *range(2, 0x100)]
        bus = next((b for b in candidates if (0, b) not in used and (0, b - 1) not in used), None)
        if bus is None:
            raise ValueError("no free PCI bus left for another GPU")
        used.update({(0, bus), (0, bus - 1)})
        out.append(NvidiaGpu(address=_format(0, bus, 0, 0), numa=numa))
    return out


def devices_for_scenario(scenario: Scenario | NodeSpec) -> list[DeviceTreeSpec]:
    """A plausible device tree for a scenario's devices, the same on every call.

    Device ids that are PCI addresses (``0000:af:02.1``) become SR-IOV VFs with
    netdevs named as systemd names them (``enp175s2f1``), under one PF per bus at
    ``<bus>:00.0`` (or the first function the VFs leave free); a VF of an unhealthy
    device has its link down. ``nvidia.com/*`` GPU UUIDs (time-sliced replicas
    ``<uuid>::<n>`` count once) become NVIDIA 3D controllers on the device's NUMA
    node. ``lo`` is there too; every other device is skipped.
    """
    node = scenario.node if isinstance(scenario, Scenario) else scenario
    used: set[tuple[int, int]] = set()
    nics = _nics(node.devices, used)
    gpus = _gpus(node.devices, used, node.numa_nodes)
    return [VirtualNic("lo", stats=_stats("lo")), *nics, *gpus]


# ---------------------------------------------------------------------------- counters


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None


def _add(root: Path, path: Path, delta: int) -> None:
    """Add ``delta`` (at least 0) to the integer in ``path``."""
    try:
        value = int(path.read_bytes())
    except (OSError, ValueError):
        return
    if delta != 0:
        _rewrite(root, path, f"{value + delta}\n".encode("ascii"))


def _rewrite(root: Path, path: Path, new: bytes) -> None:
    """Write ``new`` as the content of ``path``.

    In place, as a sysfs attribute changes: the same file, so a reader that keeps it
    open and reads it again sees the new value. A text no shorter than the old one (a
    counter's, which only grows) is written over it in one write: no reader sees the
    file empty or with a character of the old text left at its end. A shorter one
    replaces the file by a rename."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if os.fstat(fd).st_size <= len(new):
            os.pwrite(fd, new, 0)
            return
    finally:
        os.close(fd)
    tmp = root / ".devtree-counter.tmp"
    tmp.write_bytes(new)
    tmp.replace(path)


def bump_counters(root: str | Path, rng: random.Random, *, seconds: float = 10.0) -> None:
    """Advance the counters of a tree ``write_device_tree`` wrote, as ``seconds`` of traffic.

    Every PCI-backed interface that is up receives and sends packets (and now and
    then drops one or counts an error), every ACTIVE InfiniBand port moves data, and
    every DRM hwmon energy meter advances by its power. Counters only grow.
    """
    root = Path(root)
    net = root / "class" / "net"
    for name in sorted(os.listdir(net)) if net.is_dir() else []:
        iface = net / name
        if not (iface / "device").exists():
            continue
        try:
            if (iface / "operstate").read_text(encoding="ascii").strip() != "up":
                continue
        except OSError:
            continue
        stats = iface / "statistics"
        for direction in ("rx", "tx"):
            packets = int(rng.uniform(100, 20_000) * seconds)
            _add(root, stats / f"{direction}_packets", packets)
            _add(root, stats / f"{direction}_bytes", packets * rng.randint(80, 1500))
            if rng.random() < 0.05:
                _add(root, stats / f"{direction}_dropped", rng.randint(1, 20))
            if rng.random() < 0.01:
                _add(root, stats / f"{direction}_errors", 1)
    ib = root / "class" / "infiniband"
    for device in sorted(os.listdir(ib)) if ib.is_dir() else []:
        ports = ib / device / "ports"
        for port in sorted(os.listdir(ports)) if ports.is_dir() else []:
            p = ports / port
            try:
                if not (p / "state").read_text(encoding="ascii").strip().endswith("ACTIVE"):
                    continue
            except OSError:
                continue
            for direction, unicast in (("rcv", "unicast_rcv"), ("xmit", "unicast_xmit")):
                packets = int(rng.uniform(1_000, 200_000) * seconds)
                _add(root, p / "counters" / f"port_{direction}_packets", packets)
                _add(root, p / "counters" / f"{unicast}_packets", packets)
                _add(root, p / "counters" / f"port_{direction}_data", packets * 1024)
    drm = root / "class" / "drm"
    for card in sorted(os.listdir(drm)) if drm.is_dir() else []:
        if not re.fullmatch(r"card\d+", card):
            continue
        hwmon = drm / card / "device" / "hwmon"
        for h in sorted(os.listdir(hwmon)) if hwmon.is_dir() else []:
            power = next(
                (
                    v
                    for v in (_read_int(hwmon / h / f) for f in ("power1_average", "power1_input"))
                    if v is not None
                ),
                round(rng.uniform(50, 300) * 1_000_000),
            )
            _add(root, hwmon / h / "energy1_input", int(power * seconds))
        busy = drm / card / "device" / "gpu_busy_percent"
        if busy.is_file():
            _rewrite(root, busy, f"{rng.randint(0, 100)}\n".encode("ascii"))
