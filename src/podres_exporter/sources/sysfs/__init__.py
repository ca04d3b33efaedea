"""Device telemetry read from sysfs under a configurable root (``--path.sysfs``).

:func:`read_devices` reads, in the kernel's layout, one module per class:

* :mod:`.pci`: PCI functions, ``bus/pci/devices/<address>``;
* :mod:`.net`: network interfaces, ``class/net/<name>``;
* :mod:`.infiniband`: InfiniBand / RDMA ports, ``class/infiniband/<dev>/ports/<n>``;
* :mod:`.drm`: DRM cards, ``class/drm/card<N>``;

with :mod:`.hwmon` for the hardware monitors the first and last carry, every file
opened through one :class:`~.attributes.AttributeReader` (:mod:`.attributes`), and
what a poller keeps between reads in :mod:`.cache` (the static attributes) and
:mod:`.files` (the counter files held open).

Only what is selected is read: this runs on every poll, on nodes with hundreds of
interfaces. Sysfs is a moving target: a file that is missing or unreadable, or whose
content does not parse, leaves its field None (its counter absent); a device that
vanishes between the listing and the reading is left out. Only an unusable root
raises SourceError.

For a caller that selects by rules of its own (the device plugin),
:func:`pci_function_addresses` and :func:`net_interface_names` list what there is, and
:func:`iommu_group` reads a PCI function's IOMMU group.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from podres_exporter.core.errors import SourceError
from podres_exporter.core.ids import normalize_pci
from podres_exporter.core.telemetry import SysfsDevices
from podres_exporter.sources.sysfs.attributes import AttributeReader, Opener
from podres_exporter.sources.sysfs.cache import StaticCache
from podres_exporter.sources.sysfs.drm import read_cards
from podres_exporter.sources.sysfs.files import DEFAULT_OPEN_FILES, OpenFiles
from podres_exporter.sources.sysfs.hwmon import hwmon_by_function
from podres_exporter.sources.sysfs.infiniband import read_ports
from podres_exporter.sources.sysfs.net import net_interface_names, read_interfaces
from podres_exporter.sources.sysfs.pci import (
    SELECTED_CLASS_PREFIXES,
    Children,
    iommu_group,
    pci_function_addresses,
    read_functions,
)
from podres_exporter.sources.sysfs.scope import ReadScope

__all__ = [
    "DEFAULT_OPEN_FILES",
    "SELECTED_CLASS_PREFIXES",
    "OpenFiles",
    "Opener",
    "StaticCache",
    "iommu_group",
    "net_interface_names",
    "pci_function_addresses",
    "read_devices",
]


def read_devices(
    sysfs_root: str | Path,
    *,
    pci_addresses: Iterable[str] | None = None,
    interfaces: Iterable[str] | None = None,
    cache: StaticCache | None = None,
    opener: Opener = os.open,
) -> SysfsDevices:
    """Read the device telemetry under ``sysfs_root``.

    ``pci_addresses``: read only these PCI functions (any case, with or without the
    ``0000:`` domain; one that does not exist is simply absent), and only the
    InfiniBand ports, DRM cards and (when ``interfaces`` is None) network
    interfaces that belong to them. None: every network, display / 3D, processing
    accelerator and InfiniBand function, every InfiniBand port and DRM card.

    ``interfaces``: read only these network interfaces (those that exist), PCI or
    not. None: every interface backed by a (selected) PCI function, so not ``lo``,
    veths, bridges or other virtual devices.

    ``cache``: the static attributes kept from the last read with this cache (see
    :class:`StaticCache`); None reads every file.

    ``opener``: opens every file and directory the read opens (``os.open``'s shape).

    Raises SourceError only when ``sysfs_root`` cannot be listed.
    """
    root = os.fspath(sysfs_root)
    try:
        with os.scandir(root):
            pass
    except OSError as err:
        raise SourceError(f"cannot read {root}: {err.strerror or err}") from err
    selection: frozenset[str] | None = None
    if pci_addresses is not None:
        normalized = (normalize_pci(a) for a in pci_addresses)
        selection = frozenset(a for a in normalized if a is not None)
    reader = AttributeReader(opener)
    if cache is None:
        scope = ReadScope(root, reader, selection)
        return SysfsDevices(
            pci=read_functions(scope),
            net=read_interfaces(scope, interfaces),
            infiniband=read_ports(scope),
            drm=read_cards(scope),
        )
    cache.begin(reader)
    try:
        return _read_cached(ReadScope(root, reader, selection, cache), interfaces)
    finally:
        cache.end()


def _read_cached(scope: ReadScope, interfaces: Iterable[str] | None) -> SysfsDevices:
    # The class directories first: what they list gives each PCI function's devices
    # (unless only some interfaces are read).
    children = Children({}, {}, {}, {})
    net = read_interfaces(scope, interfaces, children.net)
    infiniband = read_ports(scope, children.infiniband)
    drm = read_cards(scope, children.drm)
    if interfaces is None:
        children.hwmon.update(hwmon_by_function(scope.root))
    pci = read_functions(scope, children if interfaces is None else None)
    return SysfsDevices(pci=pci, net=net, infiniband=infiniband, drm=drm)
