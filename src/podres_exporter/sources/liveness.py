"""Which listed pods still run, read from the node alone (no API-server rights needed).

Two facts, both under configurable roots (``--path.pod-logs`` and ``--path.sysfs``):

- the kubelet's log layout: ``/var/log/pods/<namespace>_<pod>_<uid>/``, one directory
  per pod UID, made when the pod starts and removed when the pod is deleted;
- the pod cgroups under ``kubepods``: ``<sysfs>/fs/cgroup/kubepods.slice/...`` with the
  systemd driver (``kubepods-burstable-pod<uid with _>.slice``), ``kubepods/.../pod<uid>``
  with the cgroupfs driver, on cgroup v2 or under a v1 controller (``cpu``,
  ``cpu,cpuacct``, ``memory``, ``systemd``). The kubelet removes a pod's cgroup once
  the pod has finished.

The rule that turns the facts into running / finished / undecided is pure and lives in
``accounting.pod_state``; this module only reads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import MappingProxyType

from podres_exporter.core.model import PodLiveness

# The v1 controllers a kubepods hierarchy may be found under; "" is the v2 unified root.
_CONTROLLERS = ("", "cpu", "cpu,cpuacct", "cpuacct,cpu", "memory", "systemd")
_KUBEPODS = ("kubepods.slice", "kubepods")
_POD_CGROUP = re.compile(
    r"^(?:kubepods(?:-[a-z]+)?-pod(?P<systemd>[0-9a-f_]{36})\.slice|pod(?P<plain>[0-9a-f-]{36}))$"
)
_LOG_DIR = re.compile(r"^(?P<ns>[^_]+)_(?P<pod>[^_]+)_(?P<uid>[0-9a-f-]{36})$")
# Where pod cgroups sit below kubepods: directly (Guaranteed), or one QoS level down.
_DEPTH = 2


def parse_pod_log_dirs(names: Iterable[str]) -> dict[tuple[str, str], frozenset[str]]:
    """The UIDs per (namespace, pod) that ``/var/log/pods`` directory names give."""
    out: dict[tuple[str, str], set[str]] = {}
    for name in names:
        m = _LOG_DIR.match(name)
        if m is not None:
            out.setdefault((m["ns"], m["pod"]), set()).add(m["uid"])
    return {k: frozenset(v) for k, v in out.items()}


def pod_uid_of_cgroup(name: str) -> str | None:
    """The pod UID a cgroup directory name carries, or None for any other directory."""
    m = _POD_CGROUP.match(name)
    if m is None:
        return None
    return m["plain"] or m["systemd"].replace("_", "-")


def _subdirs(path: Path) -> Iterator[Path]:
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    yield Path(entry.path)
    except OSError:
        return


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # EACCES and the like: no evidence, not an error
        return False


def read_live_pod_uids(cgroup_root: str | Path) -> frozenset[str] | None:
    """Pod UIDs with a cgroup under any kubepods hierarchy; None when none is found."""
    found = False
    uids: set[str] = set()
    for controller in _CONTROLLERS:
        base = Path(cgroup_root) / controller if controller else Path(cgroup_root)
        for top in _KUBEPODS:
            root = base / top
            if not _is_dir(root):
                continue
            found = True
            level = [root]
            for _ in range(_DEPTH):
                below: list[Path] = []
                for directory in level:
                    for sub in _subdirs(directory):
                        uid = pod_uid_of_cgroup(sub.name)
                        if uid is not None:
                            uids.add(uid)
                        else:
                            below.append(sub)
                level = below
    return frozenset(uids) if found else None


def read_liveness(pod_logs: str | Path, cgroup_root: str | Path) -> PodLiveness:
    """The liveness facts of the node: log-directory UIDs and live pod cgroups.

    ``pod_logs``: the kubelet's ``/var/log/pods``; ``cgroup_root``: the cgroup mount,
    ``<--path.sysfs>/fs/cgroup``. A part that cannot be read is None (undecided), never
    an error: the exporter then counts every holder, as without liveness facts.
    """
    try:
        names = os.listdir(pod_logs)
    except OSError:
        pod_uids = None
    else:
        pod_uids = MappingProxyType(parse_pod_log_dirs(names))
    return PodLiveness(pod_uids=pod_uids, live_uids=read_live_pod_uids(cgroup_root))


__all__ = ["parse_pod_log_dirs", "pod_uid_of_cgroup", "read_live_pod_uids", "read_liveness"]
