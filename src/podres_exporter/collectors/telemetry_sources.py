"""How each telemetry source fared: up, stale, duration, last success."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import RenderContext
from podres_exporter.collectors.families import PerRow, Table
from podres_exporter.telemetry import SourceStatus

# A source's name and status.
_Source = tuple[str, SourceStatus]

_SOURCES: Final[Table[_Source]] = Table(
    ("source",),
    lambda s: [s[0]],
    (
        PerRow("podres_source_up", "1 when the source's latest read succeeded.", lambda s: s[1].ok),
        PerRow(
            "podres_source_stale",
            "1 when the source's data served is from an earlier read (failed, or running past "
            "--source-timeout).",
            lambda s: s[1].stale,
        ),
        PerRow(
            "podres_source_duration_seconds",
            "Duration of the source's latest read.",
            lambda s: s[1].duration_s,
        ),
        PerRow(
            "podres_source_last_success_timestamp_seconds",
            "Unix time of the source's last successful read.",
            lambda s: s[1].last_success,
        ),
    ),
)


class SourcesCollector:
    """``podres_source_*``: how each telemetry source fared."""

    name = "sources"
    default_enabled = True
    description = "success, duration and staleness of each telemetry source"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        telemetry = ctx.view.snapshot.telemetry
        if telemetry is None:
            return
        yield from _SOURCES.render(sorted(telemetry.sources.items()))
