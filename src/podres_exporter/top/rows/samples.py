"""What ``podres top`` reads: samples in a :class:`Reading`, and those grouped per node.

Samples carrying a ``node`` label (or else an ``instance`` label, as Prometheus adds)
are grouped by it; samples with neither belong to the reading's ``origin``. The sort
keys and label helpers every table of top uses live here too.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from podres_exporter.core.model import Holder

# A per-CPU busy share (0-1) the source computed itself (Prometheus: rate() of
# podres_cpu_busy_seconds_total), with that metric's labels.
BUSY_RATIO = "podres_cpu_busy_ratio"
BUSY_COUNTER = "podres_cpu_busy_seconds_total"
CPU_SOURCE_STAMP = "podres_source_last_success_timestamp_seconds"
# One series per device of a DRA claim and the container using it.
DRA_INFO = "podres_container_dynamic_resource_info"
DRA_DEVICES = "podres_dra_devices"  # distinct DRA devices in use per driver and pool
DRA_SHARED = "podres_dra_shared_devices"  # of those, the ones used through several shares

# The metrics top reads; the Prometheus source asks for each (the busy counter as a rate).
METRICS = (
    "podres_kubelet_up",
    "podres_snapshot_age_seconds",
    "podres_pods",
    "podres_containers",
    "podres_node_cpus",
    "podres_node_allocatable_cpus",
    "podres_cpu_assignment_info",
    "podres_pod_shared_pool_cpus",
    "podres_node_devices",
    "podres_node_allocatable_devices",
    "podres_node_device_info",
    "podres_container_device_info",
    DRA_INFO,
    DRA_DEVICES,
    DRA_SHARED,
    "podres_node_memory_bytes",
    "podres_node_allocatable_memory_bytes",
    "podres_container_memory_bytes",
    "podres_container_numa_aligned",
    "podres_device_resolution_info",
    "podres_gpu_healthy",
    "podres_gpu_shared",
    "podres_gpu_utilization_ratio",
    "podres_gpu_memory_used_bytes",
    "podres_gpu_memory_total_bytes",
    "podres_gpu_holder_sm_utilization_ratio",
    "podres_gpu_holder_memory_used_bytes",
    "podres_drm_busy_ratio",
    "podres_pod_info",
    CPU_SOURCE_STAMP,
    BUSY_COUNTER,
)


class AnySample(Protocol):
    """What :func:`build` reads of a sample: a :class:`Sample`, or a collector's own
    (``prometheus_client``'s), taken as it is by the local source."""

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def value(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Sample:
    """One metric sample: full sample name (``..._total`` included), labels, value."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Reading:
    """Every sample of one read of a source, when it was taken (Unix seconds) and from where.

    ``origin`` names the node of samples that carry no ``node`` or ``instance`` label
    (the local node, or the exporter's ``host:port``).
    """

    samples: tuple[AnySample, ...]
    at: float
    origin: str


def node_of(labels: Mapping[str, str], origin: str) -> str:
    """The node a sample belongs to: its ``node`` label, else ``instance``, else ``origin``."""
    return labels.get("node") or labels.get("instance") or origin


# Holders made so far, by (namespace, pod, container): a container's series share one, and
# a plain tuple is made faster than a Holder. Emptied when it grows past _HOLDERS_KEPT.
_HOLDERS: dict[tuple[str, str, str], Holder] = {}
_HOLDERS_KEPT = 1 << 16


def holder_of(labels: Mapping[str, str]) -> Holder | None:
    key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
    if not key[1]:
        return None
    h = _HOLDERS.get(key)
    if h is None:
        if len(_HOLDERS) >= _HOLDERS_KEPT:
            _HOLDERS.clear()
        h = _HOLDERS[key] = Holder(*key)
    return h


def numas(label: str) -> tuple[str, ...]:
    """``"0,1"`` -> ("0", "1"); ``"none"`` and empty -> ()."""
    if label in ("", "none"):
        return ()
    return tuple(p for p in label.split(",") if p)


_NUMBERED = re.compile(r"^(\D*)(\d+)$")


# Remembered: a frame sorts every device id by it several times (its rows, then a view).
@lru_cache(maxsize=1 << 17)
def natural_key(text: str) -> tuple[Any, ...]:
    """Sort ``kvm2`` before ``kvm10`` (a name then a number); anything else as text."""
    m = _NUMBERED.match(text)
    return (m.group(1), int(m.group(2)), "") if m else (text, -1, text)


def numa_key(numa: str) -> tuple[Any, ...]:
    """Sort NUMA nodes in natural order, ``none`` (a device with no NUMA node) last."""
    return (numa == "none", natural_key(numa))


class Index:
    """The samples of one node by metric name."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[AnySample]] = defaultdict(list)

    def get(self, name: str) -> list[AnySample]:
        return self.by_name.get(name, [])

    def scalar(self, name: str) -> float | None:
        found = self.get(name)
        return found[0].value if found else None


def group(reading: Reading) -> dict[str, Index]:
    """The samples of each node (:func:`node_of`), by name; in one pass, the hot loop of
    a large node's reading."""
    nodes: dict[str, Index] = {}
    origin = reading.origin
    last_key, last = "", None
    for s in reading.samples:
        labels = s.labels
        key = labels.get("node") or labels.get("instance") or origin
        if key != last_key or last is None:
            last = nodes.get(key)
            if last is None:
                last = nodes[key] = Index()
            last_key = key
        last.by_name[s.name].append(s)
    return nodes


def dra_device(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """A DRA claim device as a (resource, device id) pair: its driver, and ``pool/device``
    (how the DRA API names a device within its driver); None for a claim naming no device."""
    driver, device = labels.get("dra_driver", ""), labels.get("dra_device", "")
    if not driver and not device:
        return None
    return driver, f"{labels.get('dra_pool', '')}/{device}"


def claim_of(labels: Mapping[str, str]) -> str:
    """A DRA claim's ``namespace/name``."""
    return f"{labels.get('claim_namespace', '')}/{labels.get('claim_name', '')}"


def by_uuid(samples: Iterable[AnySample]) -> dict[str, float]:
    """The value of each sample by its ``uuid`` label (a GPU's)."""
    return {s.labels.get("uuid", ""): s.value for s in samples}
