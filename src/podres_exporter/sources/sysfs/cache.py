"""What a poller keeps from one read of the devices to the next (:class:`StaticCache`),
and what it keeps of a PCI function (:class:`PciStatic`).

Each kept value is keyed by its directory's path and valid while the directory has the
same identity (device, inode, mtime), so a device that is removed, replaced or
hot-plugged is read anew; a value that could not be read is not kept; and a read drops
the values of the directories it did not ask for, so memory follows the node, not its
hot-plug history.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from podres_exporter.sources.sysfs.attributes import AttributeReader
from podres_exporter.sources.sysfs.files import DEFAULT_OPEN_FILES, DirId, OpenFiles

__all__ = ["Kept", "PciStatic", "StaticCache"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PciStatic:
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

    @property
    def complete(self) -> bool:
        """Whether the ids were read (else it is read again next time)."""
        return bool(self.vendor_id and self.device_id)


class Kept(Generic[T]):
    """Values read once per directory identity."""

    __slots__ = ("_seen", "_values")

    def __init__(self) -> None:
        self._values: dict[str, tuple[DirId, T]] = {}
        self._seen: set[str] = set()

    def __len__(self) -> int:
        return len(self._values)

    def get(
        self, path: str, ident: DirId, load: Callable[[str], T], keep: Callable[[T], bool]
    ) -> T:
        """The value kept for ``path`` while its directory is ``ident``; else
        ``load(path)``'s, kept when ``keep`` says it is complete."""
        self._seen.add(path)
        hit = self._values.get(path)
        if hit is not None and hit[0] == ident:
            return hit[1]
        value = load(path)
        if keep(value):
            self._values[path] = (ident, value)
        else:
            self._values.pop(path, None)
        return value

    def begin(self) -> None:
        self._seen = set()

    def end(self) -> None:
        """Forget the values the read did not ask for."""
        for key in self._values.keys() - self._seen:
            del self._values[key]


class StaticCache:
    """What a poller keeps from one read of the devices to the next: the static
    attributes of the PCI functions (``pci_classes``, ``pci_statics``), and the counter
    files held open (``files``, at most ``open_files`` of them).

    Pass one cache to one kind of read (the same selection every time). Reads with one
    cache are serialized; :meth:`close` (from any thread) closes the held files, at the
    end of a read in progress.
    """

    def __init__(self, open_files: int = DEFAULT_OPEN_FILES) -> None:
        self.files = OpenFiles(open_files)
        self.pci_classes: Kept[str | None] = Kept()
        self.pci_statics: Kept[PciStatic] = Kept()
        self._lock = threading.Lock()
        self._closed = False

    def __len__(self) -> int:
        return len(self.pci_classes) + len(self.pci_statics)

    def begin(self, reader: AttributeReader) -> None:
        """Start a read whose files open through ``reader``: nothing seen yet."""
        self._lock.acquire()
        self.pci_classes.begin()
        self.pci_statics.begin()
        self.files.begin(reader)

    def end(self) -> None:
        """End a read: forget what it did not see."""
        try:
            self.pci_classes.end()
            self.pci_statics.end()
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
