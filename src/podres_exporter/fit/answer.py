"""The answer of ``podres fit``: per node, would the kubelet admit the pod, where, and how
many more; over the fleet, where it fits and how many in all. Pure.

The kubelet's answer is :func:`~podres_exporter.core.topology.admit` and
:func:`~podres_exporter.core.topology.count_fits` on each node's state
(:mod:`.state`); nodes whose states are alike (the same counts) are answered once. The
scheduler's check, where kube-state-metrics gives it (:class:`~.source.SchedulerFacts`),
is the NodeResourcesFit filter's: for each resource the pod requests, and for the pod
count, the node's allocatable less what its pending and running pods request
(``pkg/scheduler/framework/plugins/noderesources/fit.go``, ``fitsRequest``). The pod's
request is the larger of its app containers' sum and its largest init container
(``k8s.io/component-helpers/resource``: ``PodRequests``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from podres_exporter.core.topology import CPU, Decision, Pod, admit, count_fits
from podres_exporter.fit.source import SchedulerFacts, ksm_name
from podres_exporter.fit.state import NodeFacts

__all__ = ["FleetAnswer", "NodeAnswer", "SchedulerVerdict", "answer", "pod_requests"]

PODS = "pods"


@dataclass(frozen=True, slots=True)
class SchedulerVerdict:
    """The scheduler's check on one node: whether the pod fits its allocatable, the
    resources short (kube-state-metrics' names), and how many such pods fit (None: no
    resource bounds them)."""

    fits: bool
    short: tuple[str, ...]
    count: int | None


@dataclass(frozen=True, slots=True)
class NodeAnswer:
    """One node's answer. ``more``: how many pods of the shape the node admits now, one
    after another (the kubelet's count, bounded by the scheduler's where known); ``capped``:
    the count stopped at the limit asked for. ``scheduler`` None: not checked."""

    facts: NodeFacts
    decision: Decision
    scheduler: SchedulerVerdict | None
    more: int
    capped: bool

    @property
    def node(self) -> str:
        return self.facts.node

    @property
    def fits(self) -> bool:
        """Admitted by the kubelet, and by the scheduler's check where it was made."""
        return self.decision.admitted and (self.scheduler is None or self.scheduler.fits)


@dataclass(frozen=True, slots=True)
class FleetAnswer:
    """Every node's answer (by name), whether the scheduler's check was made, and the
    fleet's totals."""

    nodes: tuple[NodeAnswer, ...]
    scheduler_checked: bool

    @property
    def fitting(self) -> tuple[NodeAnswer, ...]:
        return tuple(a for a in self.nodes if a.fits)

    @property
    def more(self) -> int:
        return sum(a.more for a in self.nodes)

    @property
    def capped(self) -> bool:
        return any(a.capped for a in self.nodes)


def pod_requests(pod: Pod) -> dict[str, int]:
    """The pod's effective request per resource, in the topology model's units: the
    larger of the app containers' sum and the largest init container."""
    out: dict[str, int] = {}
    names = {r for c in (*pod.containers, *pod.init_containers) for r in (*c.requests, *c.limits)}
    for r in names:
        app = sum(c.request(r) for c in pod.containers)
        init = max((c.request(r) for c in pod.init_containers), default=0)
        out[r] = max(app, init)
    return out


def _in_ksm_units(resource: str, amount: int) -> float:
    return amount / 1000 if resource == CPU else float(amount)


def scheduler_verdict(
    node: str, requests: Mapping[str, int], facts: SchedulerFacts
) -> SchedulerVerdict | None:
    """The scheduler's check of a pod requesting ``requests`` on ``node``; None when
    kube-state-metrics has no allocatable for the node."""
    allocatable = facts.allocatable.get(node)
    if not allocatable:
        return None
    used = facts.requested.get(node, {})
    short: list[str] = []
    counts: list[int] = []
    wanted = {ksm_name(r): _in_ksm_units(r, a) for r, a in requests.items() if a > 0}
    wanted[PODS] = 1.0
    in_use = {**used, PODS: float(facts.pods.get(node, 0))}
    for resource, amount in sorted(wanted.items()):
        left = allocatable.get(resource, 0.0) - in_use.get(resource, 0.0)
        # A tolerance for the float sums of fractional cores (0.1 + 0.2).
        n = max(0, math.floor(left / amount + 1e-9))
        counts.append(n)
        if n < 1:
            short.append(resource)
    return SchedulerVerdict(not short, tuple(short), min(counts) if counts else None)


def answer(
    facts: Iterable[NodeFacts],
    pod: Pod,
    scheduler: SchedulerFacts | None,
    *,
    limit: int,
) -> FleetAnswer:
    """Each node's answer to ``pod``, counts bounded by ``limit``, nodes sorted by name."""
    requests = pod_requests(pod)
    seen: dict[tuple[object, ...], tuple[Decision, int]] = {}
    out: list[NodeAnswer] = []
    for f in sorted(facts, key=lambda f: f.node):
        known = seen.get(f.key)
        if known is None:
            decision = admit(f.state, pod)
            known = (decision, count_fits(f.state, pod, limit) if decision.admitted else 0)
            seen[f.key] = known
        decision, count = known
        verdict = None if scheduler is None else scheduler_verdict(f.node, requests, scheduler)
        capped = count >= limit
        if verdict is not None and verdict.count is not None and verdict.count < count:
            count, capped = verdict.count, False
        if verdict is not None and not verdict.fits:
            count = 0
        out.append(NodeAnswer(f, decision, verdict, count, capped))
    return FleetAnswer(tuple(out), scheduler is not None)
