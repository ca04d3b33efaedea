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

The specs are ``host.hardware``'s; ``host.layout.devices_for_scenario`` derives a
plausible tree from a scenario's devices, and ``host.counters.bump_counters`` advances
every traffic counter and energy meter in a written tree, so the demo's NIC counters
move over time. The CPU / NUMA files are ``host.topology.write_sysfs``'s: both can
share one root.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path

from podres_sim.host.hardware import (
    Aer,
    AmdGpu,
    DeviceTreeSpec,
    InfinibandHca,
    IntelGpu,
    NetStats,
    NicPf,
    NicVf,
    PcieLink,
    VirtualNic,
)

__all__ = ["format_pci_address", "interface_name", "pci_address", "write_device_tree"]

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


def pci_address(text: str) -> tuple[int, int, int, int] | None:
    """``"0000:af:02.1"`` (or ``"af:02.1"``, any case) -> (domain, bus, slot, function)."""
    match = _PCI_ADDRESS.match(text.strip().lower())
    if match is None:
        return None
    domain, bus, slot, function = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(slot, 16), int(function)


def format_pci_address(domain: int, bus: int, slot: int, function: int) -> str:
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function}"


def interface_name(address: str) -> str:
    """The systemd path-based name of a PCI function's netdev: ``0000:af:02.1`` ->
    ``enp175s2f1`` (``P1enp...`` outside domain 0)."""
    parts = pci_address(address)
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
        domain, bus, _, _ = pci_address(address) or (0, 0, 0, 0)
        if bus == 0:
            return self.root / "devices" / f"pci{domain:04x}:00"
        port = format_pci_address(domain, bus - 1, 1, 0)
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
        if pci_address(address) is None or address != address.lower() or len(address) != 12:
            raise ValueError(f"not a full lower-case PCI address: {address!r}")
    ports = set()
    for address in addresses:
        domain, bus, _, _ = pci_address(address) or (0, 0, 0, 0)
        if bus:
            ports.add(format_pci_address(domain, bus - 1, 1, 0))
    clashes = sorted({a for a in addresses if addresses.count(a) > 1} | (ports & set(addresses)))
    if clashes:
        raise ValueError(f"PCI addresses used twice (a root port counts): {clashes}")
    root.mkdir(parents=True, exist_ok=True)
    writer = _Writer(root)
    for spec in specs:
        writer.spec(spec)
    return root
