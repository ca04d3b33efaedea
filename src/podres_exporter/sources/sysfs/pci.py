"""PCI functions, ``bus/pci/devices/<address>``: NUMA node, ids, driver, SR-IOV parent,
PCIe link, AER counters, hwmon temperature and power, and the names of the net /
InfiniBand / DRM devices each function carries.

Without a selection of addresses, the functions read are those whose class is selected
(:data:`SELECTED_CLASS_PREFIXES`). With a :class:`~.cache.StaticCache`, a function's
static attributes (:class:`PciStatic`) are read once per directory, its changing ones
through the files held open, and the devices it carries come from the class directories
(:class:`Children`) instead of its own.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from podres_exporter.core.ids import normalize_pci
from podres_exporter.core.telemetry import PciReading
from podres_exporter.sources.sysfs.attributes import (
    AttributeDir,
    AttributeReader,
    FdDir,
    link_name,
    listdir,
    parse_int,
    parse_text,
)
from podres_exporter.sources.sysfs.cache import PciStatic
from podres_exporter.sources.sysfs.drm import CARD
from podres_exporter.sources.sysfs.hwmon import first_int, hwmon_dirs, scaled
from podres_exporter.sources.sysfs.scope import ReadScope

__all__ = [
    "SELECTED_CLASS_PREFIXES",
    "Children",
    "PciStatic",
    "iommu_group",
    "pci_function_addresses",
    "read_functions",
]

# PCI class codes (the top 16 bits of ``class``) read when no address is given:
# network controllers (0x02xx, InfiniBand 0x0207 among them), display and 3D
# controllers (0x03xx), processing accelerators (0x12xx), and the InfiniBand class
# of the serial-bus controllers (0x0c06) that older HCAs report.
SELECTED_CLASS_PREFIXES: tuple[int, ...] = (0x02, 0x03, 0x12)
_SELECTED_SUBCLASSES: tuple[int, ...] = (0x0C06,)

_AER_FILES = ("aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal")
_NO_AER: Mapping[str, int] = MappingProxyType({})


_GONE = PciStatic("", "", None, None, None, None, aer=False)


class Children(NamedTuple):
    """The devices each PCI function carries (address -> names), read from the class
    directories (``class/net`` ...) whose entries' links name their function: the same
    names as the function's ``net/``, ``infiniband/``, ``drm/`` and ``hwmon/``, without
    listing those four directories of every function at every poll."""

    net: dict[str, list[str]]
    infiniband: dict[str, list[str]]
    drm: dict[str, list[str]]
    hwmon: dict[str, list[str]]


class _Known(NamedTuple):
    """What is known of a PCI function before its changing attributes are read."""

    address: str
    class_id: str | None
    static: PciStatic


# ------------------------------------------------------------------------- listings


def pci_function_addresses(sysfs_root: str | Path) -> list[str]:
    """Every PCI function under ``bus/pci/devices``: normalized addresses, sorted; empty
    when the directory cannot be listed."""
    base = os.path.join(os.fspath(sysfs_root), "bus", "pci", "devices")
    return sorted(a for a in (normalize_pci(n) for n in listdir(base)) if a is not None)


def iommu_group(sysfs_root: str | Path, address: str) -> str | None:
    """The IOMMU group (``"41"``) of the PCI function at ``address`` (normalized), from
    its ``iommu_group`` link; None without an IOMMU, or when the function is gone."""
    return link_name(
        os.path.join(os.fspath(sysfs_root), "bus", "pci", "devices", address, "iommu_group")
    )


# -------------------------------------------------------------------------- reading


def read_functions(scope: ReadScope, children: Children | None = None) -> tuple[PciReading, ...]:
    """The functions selected (those of a selected class, without a selection), with
    the static attributes the scope's cache keeps (without one, every file read) and
    the devices ``children`` names (None: listed from each function's directory)."""
    root, reader, selection, cache = scope
    base = f"{root}/bus/pci/devices"
    if selection is None:
        names = [(a, n) for n in listdir(base) if (a := normalize_pci(n)) is not None]
    else:
        names = [(a, a) for a in selection]
    readings: list[PciReading] = []
    if cache is None:
        for address, name in sorted(names):
            class_id = None
            if selection is None:
                class_id = reader.read_text(f"{base}/{name}/class")
                if not _class_selected(class_id):
                    continue
            if (uncached := _read_pci(scope, address, class_id)) is not None:
                readings.append(uncached)
        return tuple(readings)
    files = cache.files
    read_class, read_static = partial(_read_class, reader), partial(_read_static_at, reader)
    for address, name in sorted(names):
        path = f"{base}/{name}"
        held = files.directory(path)
        if held is None:
            continue
        class_id = cache.pci_classes.get(path, held.ident, read_class, _is_not_none)
        if selection is None and not _class_selected(class_id):
            continue
        static = cache.pci_statics.get(path, held.ident, read_static, _is_complete)
        lost = held.lost
        reading = _read_pci_at(scope, path, held, _Known(address, class_id, static), children)
        # Gone while it was read? Then a file held failed (ENODEV) or one not held was
        # not found: only then is its directory asked.
        if held.lost == lost or os.path.isdir(path):
            readings.append(reading)
    return tuple(readings)


def _read_class(reader: AttributeReader, path: str) -> str | None:
    return reader.read_text(f"{path}/class")


def _is_not_none(value: str | None) -> bool:
    return value is not None


def _is_complete(value: PciStatic) -> bool:
    return value.complete


def _class_selected(class_id: str | None) -> bool:
    if class_id is None:
        return False
    try:
        code = int(class_id, 16)
    except ValueError:
        return False
    return (code >> 16) in SELECTED_CLASS_PREFIXES or (code >> 8) in _SELECTED_SUBCLASSES


def _read_pci(scope: ReadScope, address: str, class_id: str | None) -> PciReading | None:
    """The function at ``address``, read without a cache."""
    reader = scope.reader
    path = os.path.join(scope.root, "bus", "pci", "devices", address)
    fd = reader.open_dir(path)
    if fd is None:
        return None
    try:
        if class_id is None:
            class_id = reader.read_text("class", fd)
        known = _Known(address, class_id, _read_static(reader, fd))
        reading = _read_pci_at(scope, path, FdDir(reader, fd), known, None)
    finally:
        os.close(fd)
    if not os.path.isdir(path):  # it went away while we read it
        return None
    return reading


def _read_pci_at(
    scope: ReadScope, path: str, attrs: AttributeDir, known: _Known, children: Children | None
) -> PciReading:
    """The function at ``path``, its changing attributes read through ``attrs`` (and
    its hwmon values through the files the scope holds, when it does); the devices it
    carries listed from its directory, or taken from ``children``."""
    reader, files = scope.reader, scope.files
    static = known.static
    driver = link_name(f"{path}/driver")
    if children is None:
        hwmons = hwmon_dirs(path)
        nets = listdir(f"{path}/net")
        if driver == "virtio-pci":  # virtio-net hangs its interface off a virtioN child
            for child in listdir(path):
                if child.startswith("virtio"):
                    nets.extend(listdir(f"{path}/{child}/net"))
        hcas = listdir(f"{path}/infiniband")
        cards = [n for n in listdir(f"{path}/drm") if CARD.match(n)]
    else:
        address = known.address
        hwmons = [f"{path}/hwmon/{n}" for n in children.hwmon.get(address, ())]
        nets = children.net.get(address, [])
        hcas = children.infiniband.get(address, [])
        cards = children.drm.get(address, [])
    if static.aer:
        correctable, nonfatal, fatal = (_parse_aer(attrs.read(n)) for n in _AER_FILES)
    else:
        correctable = nonfatal = fatal = _NO_AER
    temperature = first_int(reader, hwmons, ("temp1_input",), files)
    power = first_int(reader, hwmons, ("power1_average", "power1_input"), files)
    return PciReading(
        address=known.address,
        numa_node=static.numa_node,
        vendor_id=static.vendor_id,
        device_id=static.device_id,
        class_id=(known.class_id or "").lower(),
        driver=driver,
        physfn=static.physfn,
        link_speed_gts=_parse_link_speed(attrs.read("current_link_speed")),
        link_width=_parse_link_width(attrs.read("current_link_width")),
        max_link_speed_gts=static.max_link_speed_gts,
        max_link_width=static.max_link_width,
        aer_correctable=correctable,
        aer_nonfatal=nonfatal,
        aer_fatal=fatal,
        temperature_celsius=scaled(temperature, 1000),
        power_watts=scaled(power, 1e6),
        net_interfaces=tuple(sorted(set(nets))),
        infiniband_devices=tuple(sorted(hcas)),
        drm_cards=tuple(sorted(cards, key=lambda n: int(n[4:]))),
    )


# ----------------------------------------------------------------------- static part


def _read_static_at(reader: AttributeReader, path: str) -> PciStatic:
    """The static attributes of the function at ``path``; empty when it is gone."""
    fd = reader.open_dir(path)
    if fd is None:
        return _GONE
    try:
        return _read_static(reader, fd)
    finally:
        os.close(fd)


def _read_static(reader: AttributeReader, dir_fd: int) -> PciStatic:
    """The static attributes of the function open as ``dir_fd``."""
    physfn = link_name("physfn", dir_fd)
    return PciStatic(
        vendor_id=(reader.read_text("vendor", dir_fd) or "").lower(),
        device_id=(reader.read_text("device", dir_fd) or "").lower(),
        numa_node=_numa(reader.read_int("numa_node", dir_fd)),
        physfn=normalize_pci(physfn) if physfn else None,
        max_link_speed_gts=_parse_link_speed(reader.read_bytes("max_link_speed", dir_fd)),
        max_link_width=_parse_link_width(reader.read_bytes("max_link_width", dir_fd)),
        aer=_exists(_AER_FILES[0], dir_fd),
    )


def _numa(node: int | None) -> int | None:
    return node if node is not None and node >= 0 else None  # -1: no NUMA


def _exists(path: str, dir_fd: int) -> bool:
    try:
        os.stat(path, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def _parse_link_speed(data: bytes | None) -> float | None:
    """``"16.0 GT/s PCIe"`` / ``"8 GT/s"`` -> GT/s; ``"Unknown"`` -> None."""
    text = parse_text(data)
    if not text:
        return None
    try:
        speed = float(text.split()[0])
    except ValueError:
        return None
    return speed if math.isfinite(speed) and speed > 0 else None


def _parse_link_width(data: bytes | None) -> int | None:
    width = parse_int(data)
    return width if width is not None and width > 0 else None


def _parse_aer(data: bytes | None) -> Mapping[str, int]:
    """``aer_dev_*`` lines ``"Name count"`` -> {name: count}; empty when absent."""
    counts: dict[str, int] = {}
    for line in (parse_text(data) or "").splitlines():
        parts = line.split()
        if len(parts) == 2:  # noqa: PLR2004 - the file's lines are NAME VALUE
            try:
                counts[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return MappingProxyType(counts)
