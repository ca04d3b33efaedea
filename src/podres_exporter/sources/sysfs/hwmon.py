"""Hardware monitors of a device, ``<device>/hwmon/hwmonN`` (``class/hwmon``): the
temperature, power and energy a PCI function or a DRM card reports."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from podres_exporter.core.ids import normalize_pci
from podres_exporter.sources.sysfs.attributes import AttributeReader, numbered, parse_int
from podres_exporter.sources.sysfs.files import OpenFiles

__all__ = ["HWMON", "first_int", "hwmon_by_function", "hwmon_dirs", "scaled"]

HWMON = re.compile(r"^hwmon(\d+)$")


def hwmon_dirs(parent: str) -> list[str]:
    """``parent/hwmon/hwmonN`` directories, by N."""
    base = os.path.join(parent, "hwmon")
    return [os.path.join(base, name) for name in numbered(base, HWMON)]


def first_int(
    reader: AttributeReader,
    dirs: Iterable[str],
    names: Iterable[str],
    files: OpenFiles | None = None,
) -> int | None:
    """The first readable integer among ``dir/name`` for each dir, then each name
    (through the files ``files`` holds, when given)."""
    wanted = tuple(names)
    for directory in dirs:
        held = files.directory(directory) if files is not None else None
        for name in wanted:
            if held is not None:
                value = parse_int(held.read(name))
            elif files is None:
                value = reader.read_int(os.path.join(directory, name))
            else:
                break  # the directory is gone
            if value is not None:
                return value
    return None


def scaled(value: int | None, divisor: float) -> float | None:
    """A hwmon value in its unit (millidegrees, microwatts, microjoules) divided out."""
    return None if value is None else value / divisor


def hwmon_by_function(root: str) -> dict[str, list[str]]:
    """``class/hwmon``'s devices by the PCI function they hang off (address ->
    ``hwmonN`` names, by N): each entry links to ``.../<function>/hwmon/hwmonN``."""
    base = f"{root}/class/hwmon"
    found: dict[str, list[str]] = {}
    for name in numbered(base, HWMON):
        try:
            parts = os.readlink(f"{base}/{name}").rstrip("/").split("/")
        except OSError:
            continue
        if len(parts) >= 3 and parts[-2] == "hwmon" and parts[-1] == name:  # noqa: PLR2004
            address = normalize_pci(parts[-3])
            if address is not None:
                found.setdefault(address, []).append(name)
    return found
