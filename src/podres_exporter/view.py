"""A Snapshot together with its accounting: what every renderer reads. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from podres_exporter.accounting import Accounting, account
from podres_exporter.model import Snapshot


@dataclass(frozen=True, slots=True)
class NodeView:
    """One published state: the snapshot and, once a reading exists, its accounting."""

    snapshot: Snapshot
    accounting: Accounting | None

    @classmethod
    def of(cls, snapshot: Snapshot, previous: NodeView | None = None) -> NodeView:
        """Account ``snapshot`` once; every scrape and view shares the result.

        When ``previous`` holds the same reading on the same topology (a failed poll
        re-publishes the last good reading), its accounting is reused, not redone.
        """
        if (
            previous is not None
            and previous.snapshot.reading is snapshot.reading
            and previous.snapshot.topology == snapshot.topology
        ):
            return cls(snapshot, previous.accounting)
        acc = account(snapshot.reading, snapshot.topology) if snapshot.reading else None
        return cls(snapshot, acc)
