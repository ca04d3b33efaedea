"""Per-CPU time, process cgroups and the kubelet's log names, under configurable roots.

Per-CPU time is parsed from ``<procfs>/stat`` directly rather than through psutil:
psutil returns per-CPU times as a list that skips offline CPUs (so a position is
not a CPU id) and reads only the procfs set in a module-wide global.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from podres_exporter.attribution import build_index, parse_cgroup
from podres_exporter.errors import SourceError
from podres_exporter.telemetry import CgroupRef, ContainerIndex, CpuTimes

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
