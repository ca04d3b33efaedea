"""Network interfaces, ``class/net/<name>``: operational state, carrier, speed and the
``statistics/`` counters, with the PCI function behind each."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from podres_exporter.core.telemetry import NetReading
from podres_exporter.sources.sysfs.attributes import (
    AttributeDir,
    AttributeReader,
    FdDir,
    device_pci_address,
    listdir,
    parse_int,
    parse_text,
)
from podres_exporter.sources.sysfs.files import OpenFiles
from podres_exporter.sources.sysfs.scope import ReadScope

__all__ = ["net_interface_names", "read_interfaces"]

_NET_STATS = (
    "rx_bytes",
    "tx_bytes",
    "rx_packets",
    "tx_packets",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
)


def net_interface_names(sysfs_root: str | Path) -> list[str]:
    """Every network interface under ``class/net`` (virtual ones too), sorted; empty when
    the directory cannot be listed."""
    return sorted(listdir(os.path.join(os.fspath(sysfs_root), "class", "net")))


def read_interfaces(
    scope: ReadScope,
    interfaces: Iterable[str] | None,
    found: dict[str, list[str]] | None = None,
) -> tuple[NetReading, ...]:
    """The interfaces named in ``interfaces``, or (None) those of the PCI functions
    selected (of every PCI function, without a selection); ``found`` (when given, and
    ``interfaces`` None) gets the names of each PCI function's (address -> names)."""
    root, reader, selection, files = scope.root, scope.reader, scope.selection, scope.files
    base = f"{root}/class/net"
    chosen: list[tuple[str, str | None]] = []
    if interfaces is not None:
        for name in sorted({i.strip() for i in interfaces}):
            if _valid_name(name):
                chosen.append((name, device_pci_address(f"{base}/{name}")))
    else:
        for name in sorted(listdir(base)):
            address = _net_address(f"{base}/{name}", files)
            if address is None:
                continue
            if found is not None:
                found.setdefault(address, []).append(name)
            if selection is None or address in selection:
                chosen.append((name, address))
    if files is None:
        readings = [_read_net(root, reader, name, address) for name, address in chosen]
    else:
        readings = [_read_net_held(root, name, address, files) for name, address in chosen]
    return tuple(r for r in readings if r is not None)


def _read_net(
    root: str, reader: AttributeReader, name: str, pci_address: str | None
) -> NetReading | None:
    """The interface ``name``, read without a cache."""
    path = os.path.join(root, "class", "net", name)
    fd = reader.open_dir(path)
    if fd is None:
        return None
    try:
        stats_fd = reader.open_dir("statistics", fd)
        try:
            statistics = None if stats_fd is None else FdDir(reader, stats_fd)
            reading, complete = _net_reading(name, pci_address, FdDir(reader, fd), statistics)
        finally:
            if stats_fd is not None:
                os.close(stats_fd)
    finally:
        os.close(fd)
    return reading if complete or os.path.isdir(path) else None


def _read_net_held(
    root: str, name: str, pci_address: str | None, files: OpenFiles
) -> NetReading | None:
    """The interface ``name``, its attributes read from the files ``files`` holds."""
    path = f"{root}/class/net/{name}"
    held = files.directory(path)
    if held is None:
        return None
    statistics = files.directory(f"{path}/statistics")
    reading, complete = _net_reading(name, pci_address, held, statistics)
    return reading if complete or os.path.isdir(path) else None


def _net_reading(
    name: str,
    pci_address: str | None,
    attrs: AttributeDir,
    statistics: AttributeDir | None,
) -> tuple[NetReading, bool]:
    """The interface's reading, and whether every attribute was read: with one
    missing, the interface may have gone (or never was) while it was read, which only
    its directory tells."""
    carrier = parse_int(attrs.read("carrier"))
    speed = parse_int(attrs.read("speed"))
    if statistics is None:
        stats: dict[str, int | None] = dict.fromkeys(_NET_STATS)
    else:
        stats = {stat: parse_int(statistics.read(stat)) for stat in _NET_STATS}
    operstate = parse_text(attrs.read("operstate"))
    reading = NetReading(
        interface=name,
        pci_address=pci_address,
        operstate=operstate or "unknown",
        carrier=None if carrier is None else carrier != 0,
        speed_mbps=speed if speed is not None and speed >= 0 else None,
        **stats,
    )
    return reading, operstate is not None and None not in stats.values()


def _valid_name(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..")


def _net_address(path: str, files: OpenFiles | None) -> str | None:
    """The PCI function of the interface at ``path``; with ``files``, its ``device``
    link is read once per interface directory."""
    if files is None:
        return device_pci_address(path)
    held = files.directory(path)
    if held is None:
        return None
    if held.device is None:
        held.device = (device_pci_address(path),)
    return held.device[0]
