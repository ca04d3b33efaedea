"""Admitting a pod the way the kubelet v1.28 does: the Topology Manager's scope walks
the containers (or the pod), asks each hint provider for hints, merges them under the
policy, and the CPU, memory and device managers allocate along the chosen affinity.

``admit`` decides; ``apply`` returns the node after the admission (the CPUs, devices and
memory taken, chosen closely enough to the kubelet's choice for counting);
``count_fits`` counts how many more pods of one shape admit, by repeated ``apply``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from podres_exporter.core.topology.model import Decision, NodeState, Pod

__all__ = ["Assignment", "admit", "apply", "assign", "count_fits"]


@dataclass(frozen=True)
class Assignment:
    """What one container got: exclusive CPU ids, device ids per resource, and pinned
    memory per (type, NUMA node) in bytes."""

    container: str
    init: bool
    cpus: tuple[int, ...] = ()
    devices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    memory: Mapping[tuple[str, int], int] = field(default_factory=dict)


def admit(node: NodeState, pod: Pod) -> Decision:
    """The kubelet's admission decision for ``pod`` on ``node``."""
    raise NotImplementedError


def assign(node: NodeState, pod: Pod) -> tuple[Decision, NodeState, tuple[Assignment, ...]]:
    """Admit ``pod`` and, when admitted, the node after it and each container's share
    (the node unchanged and no shares when refused)."""
    raise NotImplementedError


def apply(node: NodeState, pod: Pod, decision: Decision | None = None) -> NodeState:
    """The node after admitting ``pod`` (``decision`` from ``admit``; recomputed when
    omitted). The node unchanged when the pod is refused."""
    raise NotImplementedError


def count_fits(node: NodeState, pod: Pod, limit: int) -> int:
    """How many more pods of this shape the node admits, one after the other, at most
    ``limit``."""
    raise NotImplementedError
