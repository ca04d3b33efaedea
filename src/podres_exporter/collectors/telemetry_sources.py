"""How each telemetry source fared: up, stale, duration, last success."""

from __future__ import annotations

from typing import Final

from podres_exporter.collectors.base import PartCollector
from podres_exporter.collectors.families import Table, per_row
from podres_exporter.core.telemetry import SourceStatus

# A source's name and status.
_Source = tuple[str, SourceStatus]

_SOURCES: Final[Table[_Source]] = Table(
    ("source",),
    lambda s: [s[0]],
    (
        per_row(
            "podres_source_up", "1 when the source's latest read succeeded.", lambda s: s[1].ok
        ),
        per_row(
            "podres_source_stale",
            "1 when the source's data served is from an earlier read (failed, or running past "
            "--source-timeout).",
            lambda s: s[1].stale,
        ),
        per_row(
            "podres_source_duration_seconds",
            "Duration of the source's latest read.",
            lambda s: s[1].duration_s,
        ),
        per_row(
            "podres_source_last_success_timestamp_seconds",
            "Unix time of the source's last successful read.",
            lambda s: s[1].last_success,
        ),
    ),
)


COLLECTOR: Final = PartCollector(
    "sources",
    "success, duration and staleness of each telemetry source",
    lambda ctx: ctx.view.snapshot.telemetry,
    lambda telemetry: _SOURCES.render(sorted(telemetry.sources.items())),
)
