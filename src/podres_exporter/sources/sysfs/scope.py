"""What one read of the devices is (:class:`ReadScope`), handed to each class's reader."""

from __future__ import annotations

from typing import NamedTuple

from podres_exporter.sources.sysfs.attributes import AttributeReader
from podres_exporter.sources.sysfs.cache import StaticCache
from podres_exporter.sources.sysfs.files import OpenFiles

__all__ = ["ReadScope"]


class ReadScope(NamedTuple):
    """One read: the sysfs root, the reader every file is opened through, the PCI
    functions selected (None: every function of a selected class), and the cache kept
    from the last read (None: every file read, none held open)."""

    root: str
    reader: AttributeReader
    selection: frozenset[str] | None
    cache: StaticCache | None = None

    @property
    def files(self) -> OpenFiles | None:
        """The counter files held open between reads; None without a cache."""
        return None if self.cache is None else self.cache.files
