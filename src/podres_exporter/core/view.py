"""A Snapshot with its accounting and telemetry join: what every renderer reads. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from podres_exporter.core.accounting import Accounting, account
from podres_exporter.core.accounting.registered import (
    RegisteredDevices,
    hardware_numa,
    registered_devices,
)
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
from podres_exporter.core.telemetry import Telemetry


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one poll knows, immutable, shared by every scrape until the next.

    ``reading`` is the last good kubelet reading (possibly from an earlier poll);
    ``kubelet_up`` says whether THIS poll reached the kubelet. ``generation``
    increases with every published Snapshot. ``liveness``: the node's facts on which
    listed pods still run, read beside the kubelet (None: not read; every holder counts).
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
    # Every device the kubelet registered (its checkpoint), placed on NUMA nodes; None
    # while the checkpoint has not been read.
    registered: RegisteredDevices | None = None

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
        registered = _registered(snapshot, previous)
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
        return cls(snapshot, acc, joined, registered)


def _registered(snapshot: Snapshot, previous: NodeView | None) -> RegisteredDevices | None:
    """The registered devices of the snapshot's checkpoint, placed by its reading and by
    what the previous view knew; the previous view's own while the checkpoint and the
    kubelet's state are the same and the hardware could place nothing more (it places only
    the devices nothing else does: none, or the same telemetry)."""
    telemetry = snapshot.telemetry
    if telemetry is None or telemetry.device_checkpoint is None:
        return None
    checkpoint = telemetry.device_checkpoint
    before = previous.registered if previous is not None else None
    last = previous.snapshot if previous is not None else None
    if (
        before is not None
        and last is not None
        and last.telemetry is not None
        and last.telemetry.device_checkpoint is checkpoint
        and _same_reading(last.reading, snapshot.reading)
        and (
            before.all_placed
            or (
                last.telemetry.devices is telemetry.devices
                and last.telemetry.gpus is telemetry.gpus
            )
        )
    ):
        return before
    return registered_devices(checkpoint, snapshot.reading, before, hardware_numa(telemetry))


def _same_reading(a: KubeletReading | None, b: KubeletReading | None) -> bool:
    """Whether two optional readings hold the same state (:func:`same_state`)."""
    if a is None or b is None:
        return a is b
    return same_state(a, b)


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
