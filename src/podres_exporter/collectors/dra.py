"""Dynamic resources (DRA claims) used by containers: ``podres_container_dynamic_resource_info``."""

from __future__ import annotations

from typing import Final

from podres_exporter.accounting import HeldClaim
from podres_exporter.collectors.base import PartCollector, accounting
from podres_exporter.collectors.families import HOLDER_LABELS, holder_values, info

_LABELS = (*HOLDER_LABELS, "claim_namespace", "claim_name", "driver", "pool", "device")


def _claim(c: HeldClaim) -> list[str]:
    return [*holder_values(c.holder), c.claim_namespace, c.claim_name, c.driver, c.pool, c.device]


COLLECTOR: Final = PartCollector(
    "dra",
    "dynamic-resource (DRA) claims and their devices per container",
    accounting,
    lambda acc: [
        info(
            "podres_container_dynamic_resource",
            "One series per device of a DRA claim used by a container.",
            _LABELS,
            acc.claims,
            _claim,
        )
    ],
)
