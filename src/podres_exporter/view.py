"""A Snapshot with its accounting and telemetry join: what every renderer reads. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from podres_exporter.accounting import Accounting, account
from podres_exporter.ids import DEFAULT_GPU_RESOURCES
from podres_exporter.join import Joined, join
from podres_exporter.model import ApiVersion, KubeletReading, Snapshot, Support


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

        When ``previous`` holds the same reading on the same topology (a failed poll
        re-publishes the last good reading), its accounting is reused, not redone.
        ``previous`` also carries what rates and idle times need: the last CPU times
        and since when each held device has been idle.
        """
        reading = snapshot.reading
        acc: Accounting | None = None
        if reading is not None:
            same = previous is not None and previous.snapshot.reading is reading
            if same and previous is not None and previous.snapshot.topology == snapshot.topology:
                acc = previous.accounting
            else:
                acc = account(reading, snapshot.topology)
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
        )
        return cls(snapshot, acc, joined)
