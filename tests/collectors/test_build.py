"""The build collector: the exporter's version."""

from __future__ import annotations

from podres_exporter.collectors import build
from tests.collectors.support import exposition, node_view

EXPECTED = """\
# HELP podres_build_info The exporter's version.
# TYPE podres_build_info gauge
podres_build_info{version="1.2.3"} 1.0
"""


def test_build_collector_exact_text() -> None:
    """The version of the render context, as one info series, whatever the view holds."""
    assert exposition(build.COLLECTOR, node_view(), version="1.2.3") == EXPECTED
