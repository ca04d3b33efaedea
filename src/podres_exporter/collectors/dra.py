"""Dynamic resources (DRA claims) used by containers."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from podres_exporter.accounting import HeldClaim
from podres_exporter.collectors.base import RenderContext
from podres_exporter.collectors.families import HOLDER_LABELS, holder_values, info

_LABELS = (*HOLDER_LABELS, "claim_namespace", "claim_name", "driver", "pool", "device")


def _claim(c: HeldClaim) -> list[str]:
    return [*holder_values(c.holder), c.claim_namespace, c.claim_name, c.driver, c.pool, c.device]


class DraCollector:
    """``podres_container_dynamic_resource_info``."""

    name = "dra"
    default_enabled = True
    description = "dynamic-resource (DRA) claims and their devices per container"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        acc = ctx.view.accounting
        if acc is None:
            return
        yield info(
            "podres_container_dynamic_resource",
            "One series per device of a DRA claim used by a container.",
            _LABELS,
            acc.claims,
            _claim,
        )
