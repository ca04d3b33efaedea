"""Which rows a view of ``podres top`` shows, and in which order. Pure.

:class:`Options` holds the view, its sort column and direction and the filters;
:func:`select` applies them to the rows :func:`~.rows.build` made. The same
selection feeds the table (:mod:`.render`) and ``-o json`` (:mod:`.jsonout`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from podres_exporter.top.rows import ContainerRow, DeviceRow, TopData, natural_key, numa_key

VIEWS = ("containers", "devices")
SORT_KEYS: Mapping[str, tuple[str, ...]] = {
    "containers": ("name", "cpus", "busy", "numa", "devices", "gpu", "gmem", "memory", "owner"),
    "devices": ("resource", "id", "numa", "health", "holder", "util"),
}
ALL_SORT_KEYS = tuple(dict.fromkeys(k for keys in SORT_KEYS.values() for k in keys))


@dataclass(frozen=True, slots=True)
class Options:
    """What to show: the view, its sort column and direction, the filters, wide or not.

    A filter matches as a substring, or as a glob when it has ``*?[``; empty matches all.
    ``namespace`` and ``pod`` match a device's holders in the devices view; ``resource``
    matches the resources a container holds in the containers view; ``owner`` a
    container's workload (``Kind/name``, from ``podres_pod_info``) in the containers view.
    """

    view: str = "containers"
    sort: str = ""
    reverse: bool = False
    namespace: str = ""
    pod: str = ""
    resource: str = ""
    wide: bool = False
    owner: str = ""

    @property
    def sort_key(self) -> str:
        """The sort column in effect: ``sort`` when the view has it, else the view's first."""
        keys = SORT_KEYS[self.view]
        return self.sort if self.sort in keys else keys[0]

    def filters(self) -> tuple[tuple[str, str], ...]:
        """The filters set, as (name, pattern)."""
        return tuple(
            (k, v)
            for k, v in (
                ("namespace", self.namespace),
                ("pod", self.pod),
                ("resource", self.resource),
                ("owner", self.owner),
            )
            if v
        )


def matches(pattern: str, value: str) -> bool:
    """Empty matches all; ``*?[`` make a glob; otherwise a substring."""
    if not pattern:
        return True
    if any(c in pattern for c in "*?["):
        return fnmatchcase(value, pattern)
    return pattern in value


def _keep_container(r: ContainerRow, o: Options) -> bool:
    return (
        matches(o.namespace, r.namespace)
        and matches(o.pod, r.pod)
        and (not o.resource or any(matches(o.resource, d.resource) for d in r.devices))
        and matches(o.owner, r.owner)
    )


def _keep_device(r: DeviceRow, o: Options) -> bool:
    if not matches(o.resource, r.resource):
        return False
    if o.namespace or o.pod:
        return any(matches(o.namespace, h.namespace) and matches(o.pod, h.pod) for h in r.holders)
    return True


# Sort columns: (key of a row, numeric: largest first by default).
_CONTAINER_SORTS: Mapping[str, tuple[Callable[[ContainerRow], Any], bool]] = {
    "name": (lambda r: (r.namespace, r.pod, r.container), False),
    "cpus": (lambda r: len(r.cpus) or None, True),
    "busy": (lambda r: r.busy, True),
    "numa": (lambda r: tuple(natural_key(n) for n in r.numa_nodes) or None, False),
    "devices": (lambda r: len(r.devices) or None, True),
    "gpu": (lambda r: r.gpu_util, True),
    "gmem": (lambda r: r.gpu_mem_used, True),
    "memory": (lambda r: r.pinned_bytes or None, True),
    # By workload: a workload's containers together, those with none last.
    "owner": (lambda r: r.owner or None, False),
}
_DEVICE_SORTS: Mapping[str, tuple[Callable[[DeviceRow], Any], bool]] = {
    "resource": (lambda r: (r.resource, natural_key(r.device_id)), False),
    "id": (lambda r: natural_key(r.device_id), False),
    "numa": (lambda r: numa_key(r.numa_node), False),
    "health": (lambda r: (r.healthy is not False, r.state != "allocated_unhealthy"), False),
    "holder": (lambda r: r.holders or None, False),
    "util": (lambda r: r.util, True),
}


def sort_direction(options: Options) -> str:
    """How the sort column orders rows: ``largest first``, ``smallest first``, ``A-Z``, ``Z-A``."""
    sorts: Mapping[str, tuple[Any, bool]] = (
        _CONTAINER_SORTS if options.view == "containers" else _DEVICE_SORTS
    )
    numeric = sorts[options.sort_key][1]
    if numeric:
        return "smallest first" if options.reverse else "largest first"
    return "Z-A" if options.reverse else "A-Z"


def _sorted(rows: Sequence[Any], key: Callable[[Any], Any], descending: bool) -> list[Any]:
    """Sort by ``key``; rows whose key is None go last in either direction (stable).

    Each row's key is computed once (a large node has 50,000 device rows).
    """
    keys = [key(r) for r in rows]
    known = [r for k, r in zip(keys, rows, strict=True) if k is not None]
    known_keys = [k for k in keys if k is not None]
    unknown = [r for k, r in zip(keys, rows, strict=True) if k is None]
    order = sorted(range(len(known)), key=known_keys.__getitem__, reverse=descending)
    return [known[i] for i in order] + unknown


def select(
    data: TopData, options: Options
) -> tuple[tuple[ContainerRow, ...], tuple[DeviceRow, ...]]:
    """The container and device rows of every node, filtered and sorted as ``options`` say.

    Equal sort values keep node order, then name. The sort column applies to the view's
    rows; the other view's rows are in their default order (by name, by resource).
    """
    containers = [r for n in data.nodes for r in n.containers if _keep_container(r, options)]
    devices = [r for n in data.nodes for r in n.devices if _keep_device(r, options)]
    mine = options.view == "containers"
    ckey, cdesc = _CONTAINER_SORTS[options.sort_key if mine else "name"]
    dkey, ddesc = _DEVICE_SORTS["resource" if mine else options.sort_key]
    by_name, by_resource = _CONTAINER_SORTS["name"][0], _DEVICE_SORTS["resource"][0]
    # Sorted by name first unless the sort column is the name: a stable sort by the same
    # key again would change nothing.
    if ckey is not by_name:
        containers = _sorted(containers, by_name, False)
    if dkey is not by_resource:
        devices = _sorted(devices, by_resource, False)
    containers = _sorted(containers, ckey, cdesc != (options.reverse and mine))
    devices = _sorted(devices, dkey, ddesc != (options.reverse and not mine))
    return tuple(containers), tuple(devices)
