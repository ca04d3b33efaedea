"""DRA: one row per claim device and holder; distinct devices per driver and pool.

Per driver and pool, the distinct devices allocated, and those shared (used through
several shares, or by several claims). Claims with the same ``share_id`` on one device
are one share of it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from podres_exporter.core.accounting.holders import holdings
from podres_exporter.core.model import Holder, PodAlloc

DRA_STATES = ("allocated", "shared")


@dataclass(frozen=True, slots=True)
class HeldClaim:
    """One device of a DRA claim used by one holder (all strings may be empty)."""

    holder: Holder
    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str


def held_claims(pods: Iterable[PodAlloc]) -> list[HeldClaim]:
    """One row per device of each claim and holder (an empty row for a claim naming none)."""
    rows = []
    for pod in pods:
        for holder, c in holdings(pod):
            for claim in c.dynamic_resources:
                devices = claim.devices or ()
                if not devices:
                    rows.append(
                        HeldClaim(holder, claim.claim_namespace, claim.claim_name, "", "", "")
                    )
                rows.extend(
                    HeldClaim(
                        holder, claim.claim_namespace, claim.claim_name, d.driver, d.pool, d.device
                    )
                    for d in devices
                )
    return sorted(
        set(rows),
        key=lambda r: (r.holder, r.claim_namespace, r.claim_name, r.driver, r.pool, r.device),
    )


def dra_devices(pods: Iterable[PodAlloc]) -> dict[tuple[str, str, str], int]:
    """Distinct DRA devices per driver and pool, allocated and shared.

    A device is (driver, pool, device); its shares are the distinct share ids it is
    used through (a claim without one is a share of its own, by claim). Claims with
    the same share id on one device are one share. A device with several shares is
    shared. Claims from kubelets before 1.31 name no device and are left out.
    """
    shares: dict[tuple[str, str, str], set[tuple[str, ...]]] = defaultdict(set)
    for pod in pods:
        for _, c in holdings(pod):
            for claim in c.dynamic_resources:
                for d in claim.devices:
                    if not d.device:
                        continue
                    share = (
                        ("share", d.share_id)
                        if d.share_id is not None
                        else ("claim", claim.claim_namespace, claim.claim_name)
                    )
                    shares[(d.driver, d.pool, d.device)].add(share)
    counts: dict[tuple[str, str, str], int] = {}
    for (driver, pool, _), used in shares.items():
        for state in DRA_STATES:
            counts.setdefault((driver, pool, state), 0)
        counts[(driver, pool, "allocated")] += 1
        counts[(driver, pool, "shared")] += len(used) > 1
    return counts
