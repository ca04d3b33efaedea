"""The exporter's own build."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import RenderContext
from podres_exporter.collectors.families import info


class BuildCollector:
    """``podres_build_info``."""

    name = "build"
    default_enabled = True
    description = "the exporter's own version"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        yield info(
            "podres_build", "The exporter's version.", ["version"], [ctx.version], lambda v: [v]
        )
