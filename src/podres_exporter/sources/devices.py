"""Device telemetry read from sysfs under a configurable root (``--path.sysfs``).

``read_devices`` reads, in the kernel's layout:

* PCI functions, ``bus/pci/devices/<address>``: NUMA node, ids, driver, SR-IOV
  parent, PCIe link, AER counters, hwmon temperature and power, and the names of
  the net / InfiniBand / DRM devices the function carries;
* network interfaces, ``class/net/<name>``: state, carrier, speed, statistics;
* InfiniBand / RDMA ports, ``class/infiniband/<dev>/ports/<n>``: state, rate,
  ``counters/`` and ``hw_counters/``;
* DRM cards, ``class/drm/card<N>``: amdgpu busy and VRAM, Intel GT frequency, hwmon.

Only what is selected is read: this runs on every poll, on nodes with hundreds of
interfaces. Sysfs is a moving target: a file that is missing or unreadable
(``EINVAL`` for the carrier of a link that is administratively down, ``ENODEV`` for
a device going away, ``EACCES``), or whose content does not parse, leaves its field
None (its counter absent); a device that vanishes between the listing and the
reading is left out. Only an unusable root raises SourceError.

A poller passes a :class:`StaticCache` to read each PCI function's static attributes
(class, vendor and device ids, NUMA node, SR-IOV parent, maximum link) once instead of
on every poll: they are kept while the function's directory is the same one (its inode
and mtime), so a function that is removed, replaced or hot-plugged is read anew, and one
no longer listed leaves the cache. The cache also keeps the changing attributes' files
open between polls (:class:`OpenFiles`: one ``pread`` a file instead of an open, a read
and a close), and takes the devices each PCI function carries from the class
directories (``class/net`` ...) rather than listing the function's own.

For a caller that selects by rules of its own (the device plugin),
``pci_function_addresses`` and ``net_interface_names`` list what there is, and
``iommu_group`` reads a PCI function's IOMMU group.
"""

from __future__ import annotations

import errno
import math
import os
import re
import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from podres_exporter.core.errors import SourceError
from podres_exporter.core.ids import normalize_pci
from podres_exporter.core.telemetry import (
    DrmCardReading,
    IbPortReading,
    NetReading,
    PciReading,
    SysfsDevices,
)

__all__ = [
    "SELECTED_CLASS_PREFIXES",
    "StaticCache",
    "iommu_group",
    "net_interface_names",
    "pci_function_addresses",
    "read_devices",
]

# PCI class codes (the top 16 bits of ``class``) read when no address is given:
# network controllers (0x02xx, InfiniBand 0x0207 among them), display and 3D
# controllers (0x03xx), processing accelerators (0x12xx), and the InfiniBand class
# of the serial-bus controllers (0x0c06) that older HCAs report.
SELECTED_CLASS_PREFIXES: tuple[int, ...] = (0x02, 0x03, 0x12)
_SELECTED_SUBCLASSES: tuple[int, ...] = (0x0C06,)

_CARD = re.compile(r"^card(\d+)$")
_HWMON = re.compile(r"^hwmon(\d+)$")
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


# ----------------------------------------------------------------------- file access


# A sysfs attribute is at most a page: most are read whole by the first read.
_CHUNK = 4096
_os_open = os.open  # every file and directory this module opens (the tests count them)


def _read_fd(fd: int) -> bytes:
    data = os.read(fd, _CHUNK)
    if len(data) < _CHUNK:
        return data
    chunks = [data]
    while data:
        data = os.read(fd, _CHUNK)
        chunks.append(data)
    return b"".join(chunks)


def _read_bytes(path: str, dir_fd: int | None = None) -> bytes | None:
    """The content of a sysfs file (``path`` relative to ``dir_fd`` when given); None
    when it cannot be read.

    Plain ``os`` calls, not ``open()``: a poll of a large node reads thousands of
    attributes, and a file object costs several times the three system calls."""
    try:
        fd = _os_open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:  # ENOENT, EACCES ...
        return None
    try:
        return _read_fd(fd)
    except OSError:  # EINVAL, ENODEV, EIO, EISDIR ...
        return None
    finally:
        os.close(fd)


def _read(path: str, dir_fd: int | None = None) -> str | None:
    """The stripped text of a sysfs file; None when it cannot be read."""
    return _parse_text(_read_bytes(path, dir_fd))


# A directory opened to read its attributes relative to it: one lookup of its path for
# them all (sysfs paths run through symlinks: ``class/net/eth0`` -> ``devices/...``).
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def _open_dir(path: str, dir_fd: int | None = None) -> int | None:
    """A directory's O_PATH descriptor (the caller closes it); None when it is not one."""
    try:
        return _os_open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None


def _int(path: str, dir_fd: int | None = None) -> int | None:
    """An integer attribute; None when it cannot be read or does not parse."""
    return _parse_int(_read_bytes(path, dir_fd))


def _parse_int(data: bytes | None) -> int | None:
    if data is None:
        return None
    try:
        return int(data)  # the bytes as they are: int() takes ASCII digits and whitespace
    except ValueError:
        return None


def _parse_text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace").strip()


# ----------------------------------------------------------------- files kept open

# A directory's identity: device, inode and mtime (a replaced device is a new directory).
_DirId = tuple[int, int, int]

_FILE_FLAGS = os.O_RDONLY | os.O_CLOEXEC


class _FdDir:
    """A directory's attributes, each opened, read and closed relative to the
    directory's descriptor (a read without a cache)."""

    __slots__ = ("fd",)
    owner = None  # no files held

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, name: str) -> bytes | None:
        return _read_bytes(name, self.fd)


class _HeldDir:
    """The attribute files of one directory, kept open from one read to the next and
    read again with ``pread`` at offset 0: sysfs then calls the attribute's ``show()``
    anew, so the value is as fresh as a new open's, for one system call instead of
    three and no path lookup.

    Valid while the directory has the same identity (:data:`_DirId`): a device that
    goes makes its open attributes fail with ``ENODEV`` and a new one at the same path
    is a new directory. On a file system other than sysfs a file replaced by a rename
    changes the directory's mtime, so it is opened anew too."""

    __slots__ = ("_owner", "device", "files", "ident", "lost", "missing", "path")

    def __init__(self, owner: OpenFiles, path: str, ident: _DirId) -> None:
        self.files: dict[str, int] = {}
        self.missing: set[str] = set()  # names not there (tried again now and then)
        self.lost = 0  # reads that found a file gone (ENODEV) or not there (ENOENT)
        # The PCI function its ``device`` link names, once read (a network interface's
        # parent device does not change while its directory is the same one).
        self.device: tuple[str | None] | None = None
        self.ident = ident
        self.path = path
        # No reference cycle: the files close as soon as their owner is dropped.
        self._owner = weakref.ref(owner)

    @property
    def owner(self) -> OpenFiles | None:
        return self._owner()

    def read(self, name: str) -> bytes | None:
        fd = self.files.get(name)
        if fd is None and name in self.missing:
            return None
        if fd is not None:
            try:
                data = os.pread(fd, _CHUNK, 0)
            except OSError as err:
                if err.errno != errno.ENODEV:
                    return None  # EINVAL (the speed of a link that is down), EIO ...
                # The attribute went (its device, or a group of attributes, removed):
                # drop it, and look the name up again in case it was re-created.
                self.lost += 1
                del self.files[name]
                os.close(fd)
                if (owner := self._owner()) is not None:
                    owner.held -= 1
            else:
                return data if len(data) < _CHUNK else _pread_rest(fd, data)
        try:
            fd = _os_open(f"{self.path}/{name}", _FILE_FLAGS)
        except OSError as err:
            if err.errno == errno.ENOENT:
                self.lost += 1
                self.missing.add(name)
            return None
        try:
            value: bytes | None = _read_fd(fd)
        except OSError:
            value = None  # kept open all the same: the file is there, its value not now
        owner = self._owner()
        if owner is not None and owner.admit():
            self.files[name] = fd
        else:
            os.close(fd)
        return value

    def close(self) -> int:
        """Close the files held; how many there were."""
        for fd in self.files.values():
            os.close(fd)
        count = len(self.files)
        self.files.clear()
        return count


def _pread_rest(fd: int, first: bytes) -> bytes:
    chunks = [first]
    offset = len(first)
    while True:
        data = os.pread(fd, _CHUNK, offset)
        if not data:
            return b"".join(chunks)
        chunks.append(data)
        offset += len(data)


_RETRY_MISSING_EVERY = 30  # reads: 5 minutes at a 10 s poll

DEFAULT_OPEN_FILES = 4096
"""How many attribute files a poller keeps open at most (see :class:`OpenFiles`)."""


class OpenFiles:
    """The counter files of the devices a poller reads, kept open between polls.

    A large GPU node has some 2,000 of them (11 per network interface); opening,
    reading and closing each costs three system calls and a path lookup (15 µs on
    sysfs), re-reading an open one a single ``pread`` (2 µs). The price is kernel
    memory: sysfs keeps a page-sized buffer for each file read while it is open (about
    4 KiB, charged to the container's memory cgroup), and a descriptor each. At most
    ``capacity`` files are held (0: none, every file opened and closed at every
    read); beyond it, files are read the plain way. A directory not seen by a read is
    closed at its end, so what is held follows the node.
    """

    def __init__(self, capacity: int = DEFAULT_OPEN_FILES) -> None:
        self.capacity = capacity
        self.held = 0  # descriptors open
        self._dirs: dict[str, _HeldDir] = {}
        self._seen: set[str] = set()
        self._reads = 0

    def __len__(self) -> int:
        return self.held

    def __del__(self) -> None:
        self.close()

    def admit(self) -> bool:
        """Whether one more file may be kept (counted when it may)."""
        if self.held >= self.capacity:
            return False
        self.held += 1
        return True

    def directory(self, path: str) -> _HeldDir | None:
        """The held files of the directory at ``path`` (links followed), checked
        against its identity once per read; None when it is gone."""
        if path in self._seen:
            held = self._dirs.get(path)
            if held is not None:
                return held
        try:
            st = os.stat(path)
        except OSError:
            return None
        ident = (st.st_dev, st.st_ino, st.st_mtime_ns)
        self._seen.add(path)
        held = self._dirs.get(path)
        if held is not None:
            if held.ident == ident:
                return held
            self.held -= held.close()
        held = self._dirs[path] = _HeldDir(self, path, ident)
        return held

    def begin(self) -> None:
        self._seen = set()
        self._reads += 1
        if self._reads % _RETRY_MISSING_EVERY == 0:
            # A sysfs directory's mtime does not follow its entries: look for the
            # attributes that were not there again, now and then.
            for held in self._dirs.values():
                held.missing.clear()

    def end(self) -> None:
        """Close the directories the read did not see."""
        for path in self._dirs.keys() - self._seen:
            self.held -= self._dirs.pop(path).close()

    def close(self) -> None:
        for held in self._dirs.values():
            self.held -= held.close()
        self._dirs.clear()


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _link_name(path: str, dir_fd: int | None = None) -> str | None:
    """The last component of a symlink's target (``driver`` -> ``"ice"``)."""
    try:
        target = os.readlink(path, dir_fd=dir_fd)
    except OSError:
        return None
    return os.path.basename(target.rstrip("/")) or None


def _device_pci_address(directory: str) -> str | None:
    """The PCI function the ``device`` symlink of ``directory`` points to, if any.

    The link points to the function itself, or, for virtio devices, to a
    ``virtioN`` device whose parent is the PCI function.
    """
    device_link = os.path.join(directory, "device")
    name = _link_name(device_link)
    if name is None:
        return None
    address = normalize_pci(name)
    if address is not None:
        return address
    if name.startswith("virtio"):
        parent = os.path.basename(os.path.dirname(os.path.realpath(device_link)))
        return normalize_pci(parent)
    return None


def _numbered(directory: str, pattern: re.Pattern[str]) -> list[str]:
    """The entries of ``directory`` that ``pattern`` matches (``hwmon3``, ``card0``), by
    the number it captures."""
    found = [(int(m.group(1)), name) for name in _listdir(directory) if (m := pattern.match(name))]
    return [name for _, name in sorted(found)]


def _hwmon_dirs(parent: str) -> list[str]:
    """``parent/hwmon/hwmonN`` directories, by N."""
    base = os.path.join(parent, "hwmon")
    return [os.path.join(base, name) for name in _numbered(base, _HWMON)]


def _first_int(
    dirs: Iterable[str], names: Iterable[str], files: OpenFiles | None = None
) -> int | None:
    """The first readable integer among ``dir/name`` for each dir, then each name
    (through the files ``files`` holds, when given)."""
    wanted = tuple(names)
    for directory in dirs:
        held = files.directory(directory) if files is not None else None
        for name in wanted:
            if held is not None:
                value = _parse_int(held.read(name))
            elif files is None:
                value = _int(os.path.join(directory, name))
            else:
                break  # the directory is gone
            if value is not None:
                return value
    return None


def _scaled(value: int | None, divisor: float) -> float | None:
    return None if value is None else value / divisor


# ---------------------------------------------------------------------- static cache


@dataclass(frozen=True, slots=True)
class _PciStatic:
    """What a PCI function's sysfs files say that does not change while it exists."""

    vendor_id: str
    device_id: str
    numa_node: int | None
    physfn: str | None
    max_link_speed_gts: float | None
    max_link_width: int | None
    # Whether it reports AER (its aer_dev_* files exist: a PCIe capability of the
    # function; SR-IOV VFs often have none). Without, its counters are not tried.
    aer: bool = True


class StaticCache:
    """What a poller keeps from one read of the devices to the next: the static
    attributes of the PCI functions, and the counter files held open
    (:class:`OpenFiles`, at most ``open_files`` of them).

    Each static entry is keyed by the function's sysfs path and valid while its
    directory has the same identity (device, inode, mtime). An attribute that could not
    be read is not kept (read again next time). Each read drops the entries of the
    functions it did not see, so memory follows the node, not its hot-plug history.
    Pass one cache to one kind of read (the same selection every time). Reads with one
    cache are serialized; :meth:`close` (from any thread) closes the held files, at the
    end of a read in progress.
    """

    def __init__(self, open_files: int = DEFAULT_OPEN_FILES) -> None:
        self.files = OpenFiles(open_files)
        self._classes: dict[str, tuple[_DirId, str]] = {}
        self._statics: dict[str, tuple[_DirId, _PciStatic]] = {}
        self._seen_classes: set[str] = set()
        self._seen_statics: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False

    def __len__(self) -> int:
        return len(self._classes) + len(self._statics)

    def begin(self) -> None:
        """Start a read: nothing seen yet."""
        self._lock.acquire()
        self._seen_classes = set()
        self._seen_statics = set()
        self.files.begin()

    def end(self) -> None:
        """End a read: forget what it did not see."""
        try:
            for key in self._classes.keys() - self._seen_classes:
                del self._classes[key]
            for key in self._statics.keys() - self._seen_statics:
                del self._statics[key]
            if self._closed:
                self.files.close()
            else:
                self.files.end()
        finally:
            self._lock.release()

    def close(self) -> None:
        """Close the held files (now, or when the read in progress ends); later reads
        hold none."""
        self._closed = True
        self.files.capacity = 0
        if self._lock.acquire(blocking=False):
            try:
                self.files.close()
            finally:
                self._lock.release()

    def pci_class(self, path: str, ident: _DirId) -> str | None:
        """The ``class`` file of the function at ``path``, whose directory has the
        identity ``ident``, read once per directory."""
        self._seen_classes.add(path)
        hit = self._classes.get(path)
        if hit is not None and hit[0] == ident:
            return hit[1]
        value = _read(f"{path}/class")
        if value is None:
            self._classes.pop(path, None)
        else:
            self._classes[path] = (ident, value)
        return value

    def pci_static(self, path: str, ident: _DirId) -> _PciStatic:
        """The static attributes of the function at ``path``, whose directory has the
        identity ``ident``, read once per directory."""
        self._seen_statics.add(path)
        hit = self._statics.get(path)
        if hit is not None and hit[0] == ident:
            return hit[1]
        fd = _open_dir(path)
        if fd is None:  # gone: nothing kept
            return _PciStatic("", "", None, None, None, None, aer=False)
        try:
            value = _read_pci_static(fd)
        finally:
            os.close(fd)
        if value.vendor_id and value.device_id:
            self._statics[path] = (ident, value)
        else:
            self._statics.pop(path, None)
        return value


# ------------------------------------------------------------------------------- PCI


def _class_selected(class_id: str | None) -> bool:
    if class_id is None:
        return False
    try:
        code = int(class_id, 16)
    except ValueError:
        return False
    return (code >> 16) in SELECTED_CLASS_PREFIXES or (code >> 8) in _SELECTED_SUBCLASSES


def _link_speed(path: str, dir_fd: int | None = None) -> float | None:
    return _parse_link_speed(_read_bytes(path, dir_fd))


def _parse_link_speed(data: bytes | None) -> float | None:
    """``"16.0 GT/s PCIe"`` / ``"8 GT/s"`` -> GT/s; ``"Unknown"`` -> None."""
    text = _parse_text(data)
    if not text:
        return None
    try:
        speed = float(text.split()[0])
    except ValueError:
        return None
    return speed if math.isfinite(speed) and speed > 0 else None


def _link_width(path: str, dir_fd: int | None = None) -> int | None:
    return _parse_link_width(_read_bytes(path, dir_fd))


def _parse_link_width(data: bytes | None) -> int | None:
    width = _parse_int(data)
    return width if width is not None and width > 0 else None


_AER_FILES = ("aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal")
_NO_AER: Mapping[str, int] = MappingProxyType({})


def _parse_aer(data: bytes | None) -> Mapping[str, int]:
    """``aer_dev_*`` lines ``"Name count"`` -> {name: count}; empty when absent."""
    counts: dict[str, int] = {}
    for line in (_parse_text(data) or "").splitlines():
        parts = line.split()
        if len(parts) == 2:  # noqa: PLR2004 - the file's lines are NAME VALUE
            try:
                counts[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return MappingProxyType(counts)


def _numa(path: str, dir_fd: int | None = None) -> int | None:
    node = _int(path, dir_fd)
    return node if node is not None and node >= 0 else None


def _read_pci_static(dir_fd: int) -> _PciStatic:
    """The static attributes of the function open as ``dir_fd``."""
    physfn = _link_name("physfn", dir_fd)
    return _PciStatic(
        vendor_id=(_read("vendor", dir_fd) or "").lower(),
        device_id=(_read("device", dir_fd) or "").lower(),
        numa_node=_numa("numa_node", dir_fd),
        physfn=normalize_pci(physfn) if physfn else None,
        max_link_speed_gts=_link_speed("max_link_speed", dir_fd),
        max_link_width=_link_width("max_link_width", dir_fd),
        aer=_exists(_AER_FILES[0], dir_fd),
    )


def _exists(path: str, dir_fd: int) -> bool:
    try:
        os.stat(path, dir_fd=dir_fd)
    except OSError:
        return False
    return True


class _Children(NamedTuple):
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
    static: _PciStatic


def _read_pci(root: str, address: str, class_id: str | None) -> PciReading | None:
    """The function at ``address``, read without a cache."""
    path = os.path.join(root, "bus", "pci", "devices", address)
    fd = _open_dir(path)
    if fd is None:
        return None
    try:
        if class_id is None:
            class_id = _read("class", fd)
        known = _Known(address, class_id, _read_pci_static(fd))
        reading = _read_pci_at(path, _FdDir(fd), known, None)
    finally:
        os.close(fd)
    if not os.path.isdir(path):  # it went away while we read it
        return None
    return reading


def _read_pci_at(
    path: str, attrs: _FdDir | _HeldDir, known: _Known, children: _Children | None
) -> PciReading:
    """The function at ``path``, its changing attributes read through ``attrs`` (and
    its hwmon values through the files ``attrs``'s owner holds, when it has one); the
    devices it carries listed from its directory, or taken from ``children``."""
    files = attrs.owner
    static = known.static
    driver = _link_name(f"{path}/driver")
    if children is None:
        hwmons = _hwmon_dirs(path)
        nets = _listdir(f"{path}/net")
        if driver == "virtio-pci":  # virtio-net hangs its interface off a virtioN child
            for child in _listdir(path):
                if child.startswith("virtio"):
                    nets.extend(_listdir(f"{path}/{child}/net"))
        hcas = _listdir(f"{path}/infiniband")
        cards = [n for n in _listdir(f"{path}/drm") if _CARD.match(n)]
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
        temperature_celsius=_scaled(_first_int(hwmons, ("temp1_input",), files), 1000),
        power_watts=_scaled(_first_int(hwmons, ("power1_average", "power1_input"), files), 1e6),
        net_interfaces=tuple(sorted(set(nets))),
        infiniband_devices=tuple(sorted(hcas)),
        drm_cards=tuple(sorted(cards, key=lambda n: int(n[4:]))),
    )


def _pci_functions(
    root: str,
    selection: frozenset[str] | None,
    cache: StaticCache | None,
    children: _Children | None = None,
) -> tuple[PciReading, ...]:
    base = f"{root}/bus/pci/devices"
    if selection is None:
        names = [(a, n) for n in _listdir(base) if (a := normalize_pci(n)) is not None]
    else:
        names = [(a, a) for a in selection]
    readings: list[PciReading] = []
    if cache is None:
        for address, name in sorted(names):
            class_id = None
            if selection is None:
                class_id = _read(f"{base}/{name}/class")
                if not _class_selected(class_id):
                    continue
            if (uncached := _read_pci(root, address, class_id)) is not None:
                readings.append(uncached)
        return tuple(readings)
    for address, name in sorted(names):
        path = f"{base}/{name}"
        held = cache.files.directory(path)
        if held is None:
            continue
        class_id = cache.pci_class(path, held.ident)
        if selection is None and not _class_selected(class_id):
            continue
        known = _Known(address, class_id, cache.pci_static(path, held.ident))
        lost = held.lost
        reading = _read_pci_at(path, held, known, children)
        # Gone while it was read? Then a file held failed (ENODEV) or one not held was
        # not found: only then is its directory asked.
        if held.lost == lost or os.path.isdir(path):
            readings.append(reading)
    return tuple(readings)


def _hwmon_children(root: str) -> dict[str, list[str]]:
    """``class/hwmon``'s devices by the PCI function they hang off (address ->
    ``hwmonN`` names, by N): each entry links to ``.../<function>/hwmon/hwmonN``."""
    base = f"{root}/class/hwmon"
    found: dict[str, list[str]] = {}
    for name in _numbered(base, _HWMON):
        try:
            parts = os.readlink(f"{base}/{name}").rstrip("/").split("/")
        except OSError:
            continue
        if len(parts) >= 3 and parts[-2] == "hwmon" and parts[-1] == name:  # noqa: PLR2004
            address = normalize_pci(parts[-3])
            if address is not None:
                found.setdefault(address, []).append(name)
    return found


# ------------------------------------------------------------------------------- net


def _read_net(root: str, name: str, pci_address: str | None) -> NetReading | None:
    """The interface ``name``, read without a cache."""
    path = os.path.join(root, "class", "net", name)
    fd = _open_dir(path)
    if fd is None:
        return None
    try:
        stats_fd = _open_dir("statistics", fd)
        try:
            reading, complete = _net_reading(
                name, pci_address, _FdDir(fd), None if stats_fd is None else _FdDir(stats_fd)
            )
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
    attrs: _FdDir | _HeldDir,
    statistics: _FdDir | _HeldDir | None,
) -> tuple[NetReading, bool]:
    """The interface's reading, and whether every attribute was read: with one
    missing, the interface may have gone (or never was) while it was read, which only
    its directory tells."""
    carrier = _parse_int(attrs.read("carrier"))
    speed = _parse_int(attrs.read("speed"))
    if statistics is None:
        stats: dict[str, int | None] = dict.fromkeys(_NET_STATS)
    else:
        stats = {stat: _parse_int(statistics.read(stat)) for stat in _NET_STATS}
    operstate = _parse_text(attrs.read("operstate"))
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


def _net_interfaces(
    root: str,
    interfaces: Iterable[str] | None,
    selection: frozenset[str] | None,
    files: OpenFiles | None = None,
    found: dict[str, list[str]] | None = None,
) -> tuple[NetReading, ...]:
    """The interfaces; with ``interfaces`` None, ``found`` (when given) gets the names
    of each PCI function's (address -> names)."""
    base = f"{root}/class/net"
    chosen: list[tuple[str, str | None]] = []
    if interfaces is not None:
        for name in sorted({i.strip() for i in interfaces}):
            if _valid_name(name):
                chosen.append((name, _device_pci_address(f"{base}/{name}")))
    else:
        for name in sorted(_listdir(base)):
            address = _net_address(f"{base}/{name}", files)
            if address is None:
                continue
            if found is not None:
                found.setdefault(address, []).append(name)
            if selection is None or address in selection:
                chosen.append((name, address))
    if files is None:
        readings = [_read_net(root, name, address) for name, address in chosen]
    else:
        readings = [_read_net_held(root, name, address, files) for name, address in chosen]
    return tuple(r for r in readings if r is not None)


def _net_address(path: str, files: OpenFiles | None) -> str | None:
    """The PCI function of the interface at ``path``; with ``files``, its ``device``
    link is read once per interface directory."""
    if files is None:
        return _device_pci_address(path)
    held = files.directory(path)
    if held is None:
        return None
    if held.device is None:
        held.device = (_device_pci_address(path),)
    return held.device[0]


# ------------------------------------------------------------------------ InfiniBand


def _counters(directory: str, files: OpenFiles | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    names = _listdir(directory)
    held = files.directory(directory) if files is not None and names else None
    for name in names:
        if held is not None:
            value = _parse_int(held.read(name))
        else:
            value = _int(os.path.join(directory, name))
        if value is not None:
            counts[name] = value
    return counts


def _read_ib_port(
    device_dir: str, device: str, port: int, address: str | None, files: OpenFiles | None
) -> IbPortReading:
    path = os.path.join(device_dir, "ports", str(port))
    held = files.directory(path) if files is not None else None
    if held is not None:
        state, rate = _parse_text(held.read("state")), _parse_text(held.read("rate"))
    else:
        state, rate = _read(os.path.join(path, "state")), _read(os.path.join(path, "rate"))
    counters = _counters(os.path.join(path, "counters"), files)
    counters.update(_counters(os.path.join(path, "hw_counters"), files))
    state = state or ""
    return IbPortReading(
        device=device,
        port=port,
        pci_address=address,
        state=state.partition(":")[2].strip() if ":" in state else state,
        rate=rate or "",
        counters=MappingProxyType(dict(sorted(counters.items()))),
    )


def _infiniband(
    root: str,
    selection: frozenset[str] | None,
    files: OpenFiles | None = None,
    found: dict[str, list[str]] | None = None,
) -> tuple[IbPortReading, ...]:
    """The ports; ``found`` (when given) gets each PCI function's devices."""
    base = os.path.join(root, "class", "infiniband")
    out: list[IbPortReading] = []
    for device in sorted(_listdir(base)):
        device_dir = os.path.join(base, device)
        address = _device_pci_address(device_dir)
        if found is not None and address is not None:
            found.setdefault(address, []).append(device)
        if selection is not None and address not in selection:
            continue
        ports = sorted(int(p) for p in _listdir(os.path.join(device_dir, "ports")) if p.isdigit())
        readings = [_read_ib_port(device_dir, device, port, address, files) for port in ports]
        if os.path.isdir(device_dir):
            out.extend(readings)
    return tuple(out)


# ------------------------------------------------------------------------------- DRM


def _drm_frequency_mhz(card_dir: str, device_dir: str) -> int | None:
    """Intel GT frequency: i915's ``gt_act_freq_mhz`` (or ``gt_cur_freq_mhz``), else xe's
    ``device/tile0/gt0/freq0/act_freq`` (or ``cur_freq``)."""
    for path in (
        os.path.join(card_dir, "gt_act_freq_mhz"),
        os.path.join(card_dir, "gt_cur_freq_mhz"),
        os.path.join(device_dir, "tile0", "gt0", "freq0", "act_freq"),
        os.path.join(device_dir, "tile0", "gt0", "freq0", "cur_freq"),
    ):
        value = _int(path)
        if value is not None:
            return value
    return None


def _read_card(root: str, card: str, address: str | None) -> DrmCardReading | None:
    card_dir = os.path.join(root, "class", "drm", card)
    device_dir = os.path.join(card_dir, "device")
    driver = _link_name(os.path.join(device_dir, "driver"))
    busy = _int(os.path.join(device_dir, "gpu_busy_percent"))
    hwmons = _hwmon_dirs(device_dir)
    mhz = _drm_frequency_mhz(card_dir, device_dir)
    reading = DrmCardReading(
        card=card,
        pci_address=address,
        driver=driver,
        busy_ratio=None if busy is None else busy / 100,
        vram_used_bytes=_int(os.path.join(device_dir, "mem_info_vram_used")),
        vram_total_bytes=_int(os.path.join(device_dir, "mem_info_vram_total")),
        frequency_hz=None if mhz is None else mhz * 1e6,
        power_watts=_scaled(_first_int(hwmons, ("power1_average", "power1_input")), 1e6),
        energy_joules_total=_scaled(_first_int(hwmons, ("energy1_input",)), 1e6),
        temperature_celsius=_scaled(_first_int(hwmons, ("temp1_input",)), 1000),
    )
    if not os.path.isdir(card_dir):
        return None
    return reading


def _drm(
    root: str, selection: frozenset[str] | None, found: dict[str, list[str]] | None = None
) -> tuple[DrmCardReading, ...]:
    """The cards; ``found`` (when given) gets each PCI function's cards."""
    base = os.path.join(root, "class", "drm")
    out: list[DrmCardReading] = []
    for card in _numbered(base, _CARD):
        address = _device_pci_address(os.path.join(base, card))
        if found is not None and address is not None:
            found.setdefault(address, []).append(card)
        if selection is not None and address not in selection:
            continue
        reading = _read_card(root, card, address)
        if reading is not None:
            out.append(reading)
    return tuple(out)


# ------------------------------------------------------------------------- listings


def pci_function_addresses(sysfs_root: str | Path) -> list[str]:
    """Every PCI function under ``bus/pci/devices``: normalized addresses, sorted; empty
    when the directory cannot be listed."""
    base = os.path.join(os.fspath(sysfs_root), "bus", "pci", "devices")
    return sorted(a for a in (normalize_pci(n) for n in _listdir(base)) if a is not None)


def net_interface_names(sysfs_root: str | Path) -> list[str]:
    """Every network interface under ``class/net`` (virtual ones too), sorted; empty when
    the directory cannot be listed."""
    return sorted(_listdir(os.path.join(os.fspath(sysfs_root), "class", "net")))


def iommu_group(sysfs_root: str | Path, address: str) -> str | None:
    """The IOMMU group (``"41"``) of the PCI function at ``address`` (normalized), from
    its ``iommu_group`` link; None without an IOMMU, or when the function is gone."""
    return _link_name(
        os.path.join(os.fspath(sysfs_root), "bus", "pci", "devices", address, "iommu_group")
    )


# ---------------------------------------------------------------------------- entry


def read_devices(
    sysfs_root: str | Path,
    *,
    pci_addresses: Iterable[str] | None = None,
    interfaces: Iterable[str] | None = None,
    cache: StaticCache | None = None,
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
    if cache is None:
        return _read_all(root, selection, interfaces, None)
    cache.begin()
    try:
        return _read_all(root, selection, interfaces, cache)
    finally:
        cache.end()


def _read_all(
    root: str,
    selection: frozenset[str] | None,
    interfaces: Iterable[str] | None,
    cache: StaticCache | None,
) -> SysfsDevices:
    if cache is None:
        return SysfsDevices(
            pci=_pci_functions(root, selection, None),
            net=_net_interfaces(root, interfaces, selection),
            infiniband=_infiniband(root, selection),
            drm=_drm(root, selection),
        )
    files = cache.files
    # The class directories first: what they list gives each PCI function's devices
    # (unless only some interfaces are read).
    children = _Children({}, {}, {}, {})
    net = _net_interfaces(root, interfaces, selection, files, children.net)
    infiniband = _infiniband(root, selection, files, children.infiniband)
    drm = _drm(root, selection, children.drm)
    if interfaces is None:
        children.hwmon.update(_hwmon_children(root))
    pci = _pci_functions(root, selection, cache, children if interfaces is None else None)
    return SysfsDevices(pci=pci, net=net, infiniband=infiniband, drm=drm)
