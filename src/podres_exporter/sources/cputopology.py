"""The node's CPU topology, read from sysfs under a configurable root (``--path.sysfs``):
the online CPUs and the NUMA node of each, each CPU's SMT siblings
(``cpu<N>/topology/thread_siblings_list``) and the NUMA distances (``node<N>/distance``).

The siblings and the distances are facts beside the CPU map, not part of it: a file of
theirs that is missing or unreadable leaves that CPU's siblings, or that node's
distances, unknown (not in the topology) and fails nothing.

A poller passes a :class:`TopologyCache`: the per-node CPU lists change only when a CPU
goes on or offline (which changes ``online``) or a node appears or goes, so while
``online`` and the node directory's names are what they were, the last topology is
served again and the nodes' files are not read.

Every file is read through a ``read_text`` function (``Path.read_text`` unless a
caller, a test counting the reads, passes another).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

from podres_exporter.core.cpulist import parse_cpulist
from podres_exporter.core.errors import SourceError
from podres_exporter.core.model import NodeTopology

_NODE_DIR = re.compile(r"^node(\d+)$")


def _read(path: Path, read_text: Callable[[Path], str]) -> str:
    try:
        return read_text(path)
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


class TopologyCache:
    """The last topology read, with the ``online`` text and node names it was read under."""

    def __init__(self) -> None:
        self.key: tuple[str, tuple[str, ...]] | None = None
        self.topology: NodeTopology | None = None


def read_topology(
    sysfs: str | Path,
    cache: TopologyCache | None = None,
    *,
    read_text: Callable[[Path], str] = Path.read_text,
) -> NodeTopology:
    """Online CPUs and their NUMA nodes under ``sysfs``.

    ``cache``: the topology of the last read with this cache, served again while the
    online CPUs and the node names are unchanged; None reads every file.

    ``read_text``: reads each file's text (raising OSError when it cannot).

    Without ``devices/system/node`` (a kernel built without NUMA) every CPU is on
    node 0. Raises SourceError when a CPU list cannot be read or parsed, or the node
    directory cannot be listed (never another OSError: a file vanishing while read is
    a SourceError too).
    """
    root = Path(sysfs)
    online_path = root / "devices/system/cpu/online"
    online_text = _read(online_path, read_text)
    node_root = root / "devices/system/node"
    names = tuple(sorted(_node_entries(node_root)))
    key = (online_text, names)
    if cache is not None and cache.key == key and cache.topology is not None:
        return cache.topology
    try:
        online = parse_cpulist(online_text)
    except ValueError as err:
        raise SourceError(f"{online_path}: {err}") from err
    mapping: dict[int, int] = {}
    for name in names:
        match = _NODE_DIR.match(name)
        if not match:
            continue
        path = node_root / name / "cpulist"
        try:
            cpus = parse_cpulist(_read(path, read_text))
        except ValueError as err:
            raise SourceError(f"{path}: {err}") from err
        for cpu in cpus:
            mapping[cpu] = int(match.group(1))
    if not mapping:
        mapping = dict.fromkeys(online, 0)
    topology = NodeTopology(
        online_cpus=online,
        cpu_to_numa=MappingProxyType(mapping),
        thread_siblings=_thread_siblings(root, online, read_text),
        numa_distances=_numa_distances(node_root, names, read_text),
    )
    if cache is not None:
        cache.key, cache.topology = key, topology
    return topology


def _optional(path: Path, read_text: Callable[[Path], str]) -> str | None:
    """The text of ``path``, or None when it cannot be read."""
    try:
        return read_text(path)
    except OSError:
        return None


def _thread_siblings(
    root: Path, online: frozenset[int], read_text: Callable[[Path], str]
) -> MappingProxyType[int, frozenset[int]]:
    """Each online CPU's SMT siblings on its physical core, itself included; a CPU whose
    ``thread_siblings_list`` cannot be read or parsed is left out."""
    siblings: dict[int, frozenset[int]] = {}
    for cpu in sorted(online):
        text = _optional(
            root / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", read_text
        )
        if text is None:
            continue
        try:
            found = parse_cpulist(text)
        except ValueError:
            continue
        siblings[cpu] = found | {cpu}
    return MappingProxyType(siblings)


def _numa_distances(
    node_root: Path, names: tuple[str, ...], read_text: Callable[[Path], str]
) -> MappingProxyType[int, MappingProxyType[int, int]]:
    """Each NUMA node's distance to every node: ``node<N>/distance`` lists one number per
    online node, in node order. A node whose file cannot be read, or lists another count
    of numbers than there are nodes, is left out."""
    nodes = sorted(int(m.group(1)) for n in names if (m := _NODE_DIR.match(n)))
    distances: dict[int, MappingProxyType[int, int]] = {}
    for node in nodes:
        text = _optional(node_root / f"node{node}" / "distance", read_text)
        if text is None:
            continue
        try:
            values = [int(v) for v in text.split()]
        except ValueError:
            continue
        if len(values) == len(nodes):
            distances[node] = MappingProxyType(dict(zip(nodes, values, strict=True)))
    return MappingProxyType(distances)
