"""InfiniBand / RDMA ports, ``class/infiniband/<device>/ports/<n>``: state, rate and the
``counters/`` and ``hw_counters/`` of each, with the PCI function behind the device."""

from __future__ import annotations

import os
from types import MappingProxyType

from podres_exporter.core.telemetry import IbPortReading
from podres_exporter.sources.sysfs.attributes import (
    AttributeReader,
    device_pci_address,
    listdir,
    parse_int,
    parse_text,
)
from podres_exporter.sources.sysfs.files import OpenFiles
from podres_exporter.sources.sysfs.scope import ReadScope

__all__ = ["read_ports"]


def read_ports(
    scope: ReadScope, found: dict[str, list[str]] | None = None
) -> tuple[IbPortReading, ...]:
    """The ports of the devices of the PCI functions selected (of every device,
    without a selection); ``found`` (when given) gets each PCI function's devices."""
    selection = scope.selection
    base = os.path.join(scope.root, "class", "infiniband")
    out: list[IbPortReading] = []
    for device in sorted(listdir(base)):
        device_dir = os.path.join(base, device)
        address = device_pci_address(device_dir)
        if found is not None and address is not None:
            found.setdefault(address, []).append(device)
        if selection is not None and address not in selection:
            continue
        ports = sorted(int(p) for p in listdir(os.path.join(device_dir, "ports")) if p.isdigit())
        readings = [_read_port(scope, device_dir, device, port, address) for port in ports]
        if os.path.isdir(device_dir):
            out.extend(readings)
    return tuple(out)


def _read_port(
    scope: ReadScope, device_dir: str, device: str, port: int, address: str | None
) -> IbPortReading:
    reader, files = scope.reader, scope.files
    path = os.path.join(device_dir, "ports", str(port))
    held = files.directory(path) if files is not None else None
    if held is not None:
        state, rate = parse_text(held.read("state")), parse_text(held.read("rate"))
    else:
        state = reader.read_text(os.path.join(path, "state"))
        rate = reader.read_text(os.path.join(path, "rate"))
    counters = _counters(reader, os.path.join(path, "counters"), files)
    counters.update(_counters(reader, os.path.join(path, "hw_counters"), files))
    state = state or ""
    return IbPortReading(
        device=device,
        port=port,
        pci_address=address,
        state=state.partition(":")[2].strip() if ":" in state else state,
        rate=rate or "",
        counters=MappingProxyType(dict(sorted(counters.items()))),
    )


def _counters(reader: AttributeReader, directory: str, files: OpenFiles | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    names = listdir(directory)
    held = files.directory(directory) if files is not None and names else None
    for name in names:
        if held is not None:
            value = parse_int(held.read(name))
        else:
            value = reader.read_int(os.path.join(directory, name))
        if value is not None:
            counts[name] = value
    return counts
