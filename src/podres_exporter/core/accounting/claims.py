"""DRA: one row per claim device and holder; distinct devices per driver and pool.

Per driver and pool, the distinct devices used, and apart from them those shared (used
through several shares, or by several claims; a part of the used ones). Claims with the
same ``share_id`` on one device are one share of it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from podres_exporter.core.accounting.holders import holdings
from podres_exporter.core.model import Holder, PodAlloc


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


def dra_devices(
    pods: Iterable[PodAlloc],
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """Distinct DRA devices per driver and pool: those used, and those shared.

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
    used: dict[tuple[str, str], int] = {}
    shared: dict[tuple[str, str], int] = {}
    for (driver, pool, _), by in shares.items():
        used[(driver, pool)] = used.get((driver, pool), 0) + 1
        shared[(driver, pool)] = shared.get((driver, pool), 0) + (len(by) > 1)
    return used, shared
