"""The node's CPU topology, read from sysfs under a configurable root (``--path.sysfs``):
the online CPUs and the NUMA node of each.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import MappingProxyType

from podres_exporter.cpulist import parse_cpulist
from podres_exporter.errors import SourceError
from podres_exporter.model import NodeTopology

_NODE_DIR = re.compile(r"^node(\d+)$")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise SourceError(f"cannot read {path}: {err.strerror or err}") from err


def _node_entries(node_root: Path) -> list[str]:
    """The names in the NUMA node directory: none when there is no such directory (a
    kernel without NUMA); SourceError when it is there but cannot be listed. One call,
    so that it cannot vanish between a look and the listing."""
    try:
        return os.listdir(node_root)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:
        raise SourceError(f"cannot list {node_root}: {err.strerror or err}") from err


def read_topology(sysfs: str | Path) -> NodeTopology:
    """Online CPUs and their NUMA nodes under ``sysfs``.

    Without ``devices/system/node`` (a kernel built without NUMA) every CPU is on
    node 0. Raises SourceError when a CPU list cannot be read or parsed, or the node
    directory cannot be listed (never another OSError: a file vanishing while read is
    a SourceError too).
    """
    root = Path(sysfs)
    online_path = root / "devices/system/cpu/online"
    try:
        online = parse_cpulist(_read(online_path))
    except ValueError as err:
        raise SourceError(f"{online_path}: {err}") from err
    node_root = root / "devices/system/node"
    mapping: dict[int, int] = {}
    for name in sorted(_node_entries(node_root)):
        match = _NODE_DIR.match(name)
        if not match:
            continue
        path = node_root / name / "cpulist"
        try:
            cpus = parse_cpulist(_read(path))
        except ValueError as err:
            raise SourceError(f"{path}: {err}") from err
        for cpu in cpus:
            mapping[cpu] = int(match.group(1))
    if not mapping:
        mapping = dict.fromkeys(online, 0)
    return NodeTopology(online_cpus=online, cpu_to_numa=MappingProxyType(mapping))
