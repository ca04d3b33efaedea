"""Which container a process belongs to: pure parsing of cgroup paths and log names.

A GPU driver reports processes by PID; the kubelet reports containers by name.
Two facts of the node tie them together, both read under configurable roots:
- ``/proc/<pid>/cgroup`` names the pod UID and the container ID
  (``.../kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope`` with the
  systemd cgroup driver, ``.../kubepods/burstable/pod<uid>/<id>`` with cgroupfs);
- the kubelet's log layout names both: ``/var/log/containers/<pod>_<ns>_<container>-<id>.log``
  and ``/var/log/pods/<ns>_<pod>_<uid>/<container>/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import MappingProxyType

from podres_exporter.core.model import Holder
from podres_exporter.core.telemetry import CgroupRef, ContainerIndex

_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
_CONTAINER_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")
_CONTAINER_LOG = re.compile(
    r"^(?P<pod>[^_]+)_(?P<ns>[^_]+)_(?P<container>.+)-(?P<id>[0-9a-f]{64})\.log$"
)
_POD_DIR = re.compile(r"^(?P<ns>[^_]+)_(?P<pod>[^_]+)_(?P<uid>[0-9a-f-]{36})$")


def parse_cgroup(text: str) -> CgroupRef:
    """Read ``/proc/<pid>/cgroup`` (v1 or v2, systemd or cgroupfs driver)."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1].strip()
        uid = _POD_UID.search(path)
        if not uid:
            continue
        container = _CONTAINER_ID.search(path)
        return CgroupRef(uid.group(1).replace("_", "-"), container.group(1) if container else None)
    return CgroupRef(None, None)


def build_index(container_logs: Iterable[str], pod_dirs: Iterable[str]) -> ContainerIndex:
    """An index from the file names of ``/var/log/containers`` and ``/var/log/pods``."""
    by_id: dict[str, Holder] = {}
    for name in container_logs:
        if m := _CONTAINER_LOG.match(name):
            by_id[m.group("id")] = Holder(m.group("ns"), m.group("pod"), m.group("container"))
    by_uid: dict[str, tuple[str, str]] = {}
    for name in pod_dirs:
        if m := _POD_DIR.match(name):
            by_uid[m.group("uid")] = (m.group("ns"), m.group("pod"))
    return ContainerIndex(MappingProxyType(by_id), MappingProxyType(by_uid))


def container_of(index: ContainerIndex, ref: CgroupRef) -> Holder | None:
    """The container of a cgroup, by container ID; None when the logs do not name it."""
    if ref.container_id and ref.container_id in index.by_container_id:
        return index.by_container_id[ref.container_id]
    return None
