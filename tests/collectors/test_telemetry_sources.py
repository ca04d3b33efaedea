"""The sources collector: how each telemetry source fared."""

from __future__ import annotations

from podres_exporter.collectors import telemetry_sources
from podres_exporter.core.telemetry import Telemetry
from tests.collectors.support import SOURCES, exposition, node_view

EXPECTED = """\
# HELP podres_source_up 1 when the source's latest read succeeded.
# TYPE podres_source_up gauge
podres_source_up{source="cpu"} 0.0
podres_source_up{source="gpu"} 1.0
podres_source_up{source="sysfs"} 0.0
# HELP podres_source_stale 1 when the source's data served is from an earlier read (failed, or running past --source-timeout).
# TYPE podres_source_stale gauge
podres_source_stale{source="cpu"} 0.0
podres_source_stale{source="gpu"} 0.0
podres_source_stale{source="sysfs"} 1.0
# HELP podres_source_duration_seconds Duration of the source's latest read.
# TYPE podres_source_duration_seconds gauge
podres_source_duration_seconds{source="cpu"} 0.001
podres_source_duration_seconds{source="gpu"} 0.25
podres_source_duration_seconds{source="sysfs"} 5.0
# HELP podres_source_last_success_timestamp_seconds Unix time of the source's last successful read.
# TYPE podres_source_last_success_timestamp_seconds gauge
podres_source_last_success_timestamp_seconds{source="gpu"} 1.7e+09
podres_source_last_success_timestamp_seconds{source="sysfs"} 1.69999999e+09
"""


def test_sources_collector_exact_text() -> None:
    """Sources sorted by name; a source that never succeeded has no last-success sample."""
    view = node_view(telemetry=Telemetry(sources=SOURCES))
    assert exposition(telemetry_sources.COLLECTOR, view) == EXPECTED


def test_sources_collector_says_nothing_before_any_telemetry() -> None:
    assert exposition(telemetry_sources.COLLECTOR, node_view()) == ""
