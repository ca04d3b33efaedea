"""The DRA collector: one series per device of a claim a container uses."""

from __future__ import annotations

from podres_exporter.collectors import dra
from tests.collectors.support import READING, exposition, node_view

EXPECTED = """\
# HELP podres_container_dynamic_resource_info One series per device of a DRA claim used by a container.
# TYPE podres_container_dynamic_resource_info gauge
podres_container_dynamic_resource_info{claim_name="gpu-claim",claim_namespace="ml",container="main",device="gpu-0",driver="gpu.example.com",namespace="ml",pod="train",pool="node-a"} 1.0
podres_container_dynamic_resource_info{claim_name="gpu-claim",claim_namespace="ml",container="main",device="gpu-1",driver="gpu.example.com",namespace="ml",pod="train",pool="node-a"} 1.0
podres_container_dynamic_resource_info{claim_name="pending-claim",claim_namespace="web",container="app",device="",driver="",namespace="web",pod="serve",pool=""} 1.0
"""


def test_dra_collector_exact_text() -> None:
    """A claim of two devices, and a claim with none yet: one series, device labels empty."""
    assert exposition(dra.COLLECTOR, node_view(READING)) == EXPECTED
