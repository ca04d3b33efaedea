"""A Snapshot with its accounting and telemetry join: what every renderer reads. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from podres_exporter.core.accounting import Accounting, account
from podres_exporter.core.ids import DEFAULT_GPU_RESOURCES
from podres_exporter.core.join import Joined, join
from podres_exporter.core.model import (
    ApiVersion,
    KubeletReading,
    NodeTopology,
    PodLiveness,
    RequestStats,
    Support,
)
from podres_exporter.core.podidentity import PodIdentity
from podres_exporter.core.telemetry import Telemetry


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one poll knows, immutable, shared by every scrape until the next.

    ``reading`` is the last good kubelet reading (possibly from an earlier poll);
    ``kubelet_up`` says whether THIS poll reached the kubelet. ``generation``
    increases with every published Snapshot. ``liveness``: the node's facts on which
    listed pods still run, read beside the kubelet (None: not read; every holder counts).
    ``identity``: every pod's UID, phase, owner, allowed labels and device health, merged
    over the pod-identity routes (None: no route is read).
    """

    generation: int
    taken_at: float
    topology: NodeTopology
    reading: KubeletReading | None
    kubelet_up: bool
    kubelet_error: str | None = None
    stats: RequestStats = field(default_factory=RequestStats)
    suspect_empty_readings: int = 0
    telemetry: Telemetry | None = None
    liveness: PodLiveness | None = None  # which listed pods still run; None: not read
    identity: PodIdentity | None = None  # whose each pod is; None: no route read

    @property
    def ready(self) -> bool:
        """True once a kubelet reading has been taken."""
        return self.reading is not None


@dataclass(frozen=True, slots=True)
class NodeView:
    """One published state: the snapshot, its accounting and its join (once a reading exists)."""

    snapshot: Snapshot
    accounting: Accounting | None
    joined: Joined | None = None

    @classmethod
    def of(
        cls,
        snapshot: Snapshot,
        previous: NodeView | None = None,
        *,
        gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES,
    ) -> NodeView:
        """Account and join ``snapshot`` once; every scrape and view shares the result.

        When ``previous`` holds the same kubelet state on the same topology (a failed
        poll re-publishes the last good reading; on a quiet node most polls change
        nothing: :func:`same_state`), its accounting and the NUMA alignment of its join
        are reused, not redone: the same objects, so the collectors that read only them
        reuse their families too.
        ``previous`` also carries what rates and idle times need: the last CPU times
        and since when each held device has been idle.
        """
        reading = snapshot.reading
        before = previous.snapshot if previous is not None else None
        # The same kubelet state on the same topology: what was derived from it is reused.
        unchanged = (
            before is not None
            and before.reading is not None
            and reading is not None
            and same_state(before.reading, reading)
            and before.topology == snapshot.topology
            and before.liveness == snapshot.liveness
        )
        acc: Accounting | None = None
        if reading is not None:
            if unchanged and previous is not None and previous.accounting is not None:
                acc = previous.accounting
            else:
                acc = account(reading, snapshot.topology, snapshot.liveness)
        if snapshot.telemetry is None:
            return cls(snapshot, acc)
        # Without any kubelet reading yet, devices still flow, with no holders.
        basis = reading or KubeletReading(
            ApiVersion.V1, (), None, Support.UNKNOWN, snapshot.taken_at
        )
        joined = join(
            acc or account(basis, snapshot.topology),
            basis,
            snapshot.topology,
            snapshot.telemetry,
            now=snapshot.taken_at,
            previous=previous.snapshot.telemetry if previous is not None else None,
            idle_before=previous.joined.idle_since() if previous and previous.joined else None,
            gpu_resources=gpu_resources,
            before=previous.joined if previous is not None else None,
            unchanged=unchanged,
        )
        return cls(snapshot, acc, joined)


def same_state(a: KubeletReading, b: KubeletReading) -> bool:
    """Whether two readings hold the same kubelet state, cheaply: the same pod objects
    (the client hands back the very object of a pod whose message did not change; the
    kubelet lists pods in no fixed order) and equal allocatable resources. False only
    costs a recomputation."""
    if a is b:
        return True
    return (
        a.api_version is b.api_version
        and a.allocatable_support is b.allocatable_support
        and len(a.pods) == len(b.pods)
        and a.allocatable == b.allocatable
        and sorted(map(id, a.pods)) == sorted(map(id, b.pods))
    )
