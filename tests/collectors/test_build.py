"""The build collector: the exporter's version, revision and Python version; its node."""

from __future__ import annotations

from podres_exporter.collectors import build
from tests.collectors.support import exposition, node_view

EXPECTED = """\
# HELP podres_build_info The exporter's version, the git commit it was built from (unknown when not known) and the Python version it runs on.
# TYPE podres_build_info gauge
podres_build_info{python_version="3.11.7",revision="0123abc",version="1.2.3"} 1.0
# HELP podres_node_info The name of the node the exporter runs on (--node-name, else NODE_NAME, else the host name): join on job and instance to give any series its node.
# TYPE podres_node_info gauge
podres_node_info{node="gpu-node-7"} 1.0
"""


def test_build_collector_exact_text() -> None:
    """The render context's build facts and node name, one info series each, whatever the
    view holds."""
    text = exposition(
        build.COLLECTOR,
        node_view(),
        version="1.2.3",
        node="gpu-node-7",
        revision="0123abc",
        python_version="3.11.7",
    )
    assert text == EXPECTED
