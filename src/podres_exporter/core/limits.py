"""What one kubelet answer may put into the model: limits, trimming, duplicate pods.

A pod-resources answer under gRPC's receive limit can still list a million device ids in
one container, or 200,000 pods: converted whole, such an answer costs gigabytes and a poll
of many seconds. The client converts an answer through a :class:`Trim`, which hands out
each repeated field only up to its limit (a slice, so what lies past it never becomes an
object of ours) and counts what it left out, per kind. The kinds are anomalies
(``podres_data_anomalies{kind}``): the rest of the answer is served as usual.

The limits (:class:`AnswerLimits`) are settings. Their defaults hold the largest nodes we
support (5,000 pods, 8 GPUs shared among their pods, hundreds of CPUs) with room to spare,
so a real node is never trimmed; a node that is trimmed says so in its anomalies.

:func:`merge_duplicates` merges pods the kubelet listed more than once (the API carries no
pod UID, so the same namespace and name is the same pod). Pure: no I/O, no logging.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TypeVar

from podres_exporter.core.model import PodAlloc

_T = TypeVar("_T")

# Anomaly kinds: what one answer listed beyond a limit (counted in dropped entries), and
# the copies of pods listed more than once.
PODS_OVER_LIMIT = "pods_over_limit"
CONTAINERS_OVER_LIMIT = "containers_over_limit"
DEVICES_OVER_LIMIT = "devices_over_limit"
CPUS_OVER_LIMIT = "cpus_over_limit"
ENTRIES_OVER_LIMIT = "entries_over_limit"
DUPLICATE_POD = "duplicate_pod"
ANSWER_ANOMALIES = (
    PODS_OVER_LIMIT,
    CONTAINERS_OVER_LIMIT,
    DEVICES_OVER_LIMIT,
    CPUS_OVER_LIMIT,
    ENTRIES_OVER_LIMIT,
    DUPLICATE_POD,
)


@dataclass(frozen=True, slots=True)
class AnswerLimits:
    """How much of one kubelet answer is kept. Each is a count of entries.

    ``pods``: pods of one List answer (the 20,000-pod node of the benchmarks, and more).
    ``containers``: containers of one pod (init and sidecar containers included).
    ``devices``: device ids of one container (and of each of its memory blocks, claims and
    claim devices): 8 GPUs, or a shared resource's replicas, fit many times over.
    ``cpus``: CPU ids of one set: a container's, a pod's, the allocatable CPUs.
    ``entries``: everything one answer lists, summed (pods, containers, device and CPU ids,
    memory blocks, claims and their devices): the bound of the whole answer's cost (the
    benchmarks' 5,000-pod node lists 70,000, their 20,000-pod node 120,000). The
    allocatable resources have a budget of the same size of their own.
    """

    pods: int = 25_000
    containers: int = 100
    devices: int = 1_024
    cpus: int = 4_096
    entries: int = 131_072


DEFAULT_LIMITS = AnswerLimits()
"""The defaults, as the settings give them."""

UNLIMITED = AnswerLimits(pods=2**62, containers=2**62, devices=2**62, cpus=2**62, entries=2**62)
"""No limit at all: converting for a test that compares against the whole answer."""


class Trim:
    """Hands out one answer's entries up to the limits, counting what it leaves out.

    ``left`` is the rest of the answer's budget of entries. Not thread-safe: one
    conversion uses it.
    """

    def __init__(self, limits: AnswerLimits) -> None:
        self.limits = limits
        self.left = limits.entries
        self.dropped: Counter[str] = Counter()

    def take(self, items: Sequence[_T], most: int, kind: str) -> Sequence[_T]:
        """The first ``items`` up to ``most`` and the budget left; the rest counted as
        ``kind`` (past ``most``) or ``entries_over_limit`` (past the budget)."""
        n = len(items)
        keep = min(n, most)
        if keep < n:
            self.dropped[kind] += n - keep
        if keep > self.left:
            self.dropped[ENTRIES_OVER_LIMIT] += keep - self.left
            keep = self.left
        self.left -= keep
        return items if keep == n else items[:keep]

    def charge(self, cost: int, dropped: Mapping[str, int]) -> None:
        """Count a part converted before (its entries and what was dropped from it)."""
        self.left -= cost
        self.dropped.update(dropped)

    def frozen(self) -> Mapping[str, int]:
        """What was dropped, per kind (only the kinds that dropped something)."""
        return MappingProxyType({k: v for k, v in self.dropped.items() if v})


def merge_duplicates(pods: Sequence[PodAlloc]) -> tuple[tuple[PodAlloc, ...], int]:
    """One pod per (namespace, name), in the order of first appearance, and how many
    copies were merged. A later copy adds the containers the first did not name (an
    identical copy adds nothing); the rest of the first is kept."""
    first: dict[tuple[str, str], int] = {}
    out: list[PodAlloc] = []
    copies = 0
    for pod in pods:
        key = (pod.namespace, pod.name)
        at = first.get(key)
        if at is None:
            first[key] = len(out)
            out.append(pod)
            continue
        copies += 1
        kept = out[at]
        if pod is kept or pod == kept:
            continue
        names = {c.name for c in kept.containers}
        extra = tuple(c for c in pod.containers if c.name not in names)
        if extra:
            out[at] = replace(kept, containers=kept.containers + extra)
    return tuple(out), copies
