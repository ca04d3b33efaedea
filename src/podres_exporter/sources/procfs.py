"""Per-CPU time, process cgroups and the kubelet's log names, under configurable roots.

Per-CPU time is parsed from ``<procfs>/stat`` directly rather than through psutil:
psutil returns per-CPU times as a list that skips offline CPUs (so a position is
not a CPU id) and reads only the procfs set in a module-wide global.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from podres_exporter.core.attribution import build_index, parse_cgroup
from podres_exporter.core.errors import SourceError
from podres_exporter.core.telemetry import CgroupRef, ContainerIndex, CpuTimes

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse_proc_stat(text: str, ticks_per_second: float = _TICKS) -> CpuTimes:
    """Per-CPU busy and total seconds from the text of ``/proc/stat``.

    Columns: user nice system idle iowait irq softirq steal guest guest_nice;
    guest time is already counted in user and nice, so it is not added again.
    """
    busy: dict[int, float] = {}
    total: dict[int, float] = {}
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *cols = line.split()
        try:
            cpu = int(name[3:])
            values = [int(c) for c in cols[:8]]
        except ValueError:
            continue
        values += [0] * (8 - len(values))
        idle = values[3] + values[4]
        all_ticks = sum(values)
        busy[cpu] = (all_ticks - idle) / ticks_per_second
        total[cpu] = all_ticks / ticks_per_second
    return CpuTimes(MappingProxyType(busy), MappingProxyType(total))


def read_cpu_times(procfs: str | Path) -> CpuTimes:
    """``parse_proc_stat`` of ``<procfs>/stat``; SourceError when unreadable."""
    path = Path(procfs) / "stat"
    try:
        text = path.read_text()
    except OSError as err:
        raise SourceError(f"cannot read {path}: {err.strerror or err} (set --path.procfs)") from err
    return parse_proc_stat(text)


def read_pid_cgroups(procfs: str | Path, pids: Iterable[int]) -> Mapping[int, CgroupRef]:
    """The cgroup reference of each PID; a PID that is gone (or unreadable) is left out."""
    out: dict[int, CgroupRef] = {}
    for pid in set(pids):
        try:
            text = (Path(procfs) / str(pid) / "cgroup").read_text()
        except OSError:
            continue
        out[pid] = parse_cgroup(text)
    return MappingProxyType(out)


def _names(path: str | Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def read_container_index(container_logs: str | Path, pod_logs: str | Path) -> ContainerIndex:
    """Index the names in ``/var/log/containers`` and ``/var/log/pods`` (missing dirs: empty)."""
    return build_index(_names(container_logs), _names(pod_logs))


def _mtime(path: str | Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class ContainerIndexCache:
    """:func:`read_container_index`, built again only when a log directory changed.

    A name added to or removed from a directory changes the directory's mtime, so while
    both mtimes stay the same the last index holds; it is also built again at least every
    ``max_age_s`` (a file system with coarse timestamps). Indexing thousands of names
    costs more than a poll's whole GPU reading.
    """

    def __init__(self, *, max_age_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self._max_age = max_age_s
        self._clock = clock
        self._key: tuple[int | None, int | None] | None = None
        self._built_at = 0.0
        self._index: ContainerIndex | None = None
        self.builds = 0

    def read(self, container_logs: str | Path, pod_logs: str | Path) -> ContainerIndex:
        key = (_mtime(container_logs), _mtime(pod_logs))
        now = self._clock()
        fresh = now - self._built_at < self._max_age
        if self._index is not None and key == self._key and None not in key and fresh:
            return self._index
        self._index = read_container_index(container_logs, pod_logs)
        self._key, self._built_at = key, now
        self.builds += 1
        return self._index
