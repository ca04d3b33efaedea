"""The DRA collector: one series per device of a claim a container uses, devices per pool."""

from __future__ import annotations

from podres_exporter.collectors import dra
from podres_exporter.core.model import (
    ApiVersion,
    ClaimDevice,
    ContainerAlloc,
    DynamicResource,
    KubeletReading,
    PodAlloc,
    Support,
)
from tests.collectors.support import READING, exposition, node_view

EXPECTED = """\
# HELP podres_container_dynamic_resource_info One series per device of a DRA claim used by a container.
# TYPE podres_container_dynamic_resource_info gauge
podres_container_dynamic_resource_info{claim_name="gpu-claim",claim_namespace="ml",container="main",dra_device="gpu-0",dra_driver="gpu.example.com",dra_pool="node-a",namespace="ml",pod="train"} 1.0
podres_container_dynamic_resource_info{claim_name="gpu-claim",claim_namespace="ml",container="main",dra_device="gpu-1",dra_driver="gpu.example.com",dra_pool="node-a",namespace="ml",pod="train"} 1.0
podres_container_dynamic_resource_info{claim_name="pending-claim",claim_namespace="web",container="app",dra_device="",dra_driver="",dra_pool="",namespace="web",pod="serve"} 1.0
# HELP podres_dra_devices Distinct DRA devices per driver and pool that running containers use.
# TYPE podres_dra_devices gauge
podres_dra_devices{dra_driver="gpu.example.com",dra_pool="node-a"} 2.0
# HELP podres_dra_shared_devices Of those, the devices used through several shares or claims (claims with one share_id on a device are one share).
# TYPE podres_dra_shared_devices gauge
podres_dra_shared_devices{dra_driver="gpu.example.com",dra_pool="node-a"} 0.0
"""


def test_dra_collector_exact_text() -> None:
    """A claim of two devices, and a claim with none yet: one series, device labels empty."""
    assert exposition(dra.COLLECTOR, node_view(READING)) == EXPECTED


def _claim(pod: str, claim: str, share: str | None) -> PodAlloc:
    device = ClaimDevice("gpu.example.com", "node-a", "gpu-0", share_id=share)
    resource = DynamicResource("ml", claim, (device,))
    return PodAlloc("ml", pod, (ContainerAlloc("main", dynamic_resources=(resource,)),))


def test_claims_with_one_share_id_are_one_device_share() -> None:
    """Two claims on gpu-0 with one share id: one device, not shared; a second id shares it."""
    one = KubeletReading(
        ApiVersion.V1,
        (_claim("a", "c1", "s1"), _claim("b", "c2", "s1")),
        None,
        Support.SERVED,
        0.0,
    )
    text = exposition(dra.COLLECTOR, node_view(one))
    assert 'podres_dra_devices{dra_driver="gpu.example.com",dra_pool="node-a"} 1.0' in text
    assert 'podres_dra_shared_devices{dra_driver="gpu.example.com",dra_pool="node-a"} 0.0' in text
    two = KubeletReading(
        ApiVersion.V1,
        (_claim("a", "c1", "s1"), _claim("b", "c2", "s2")),
        None,
        Support.SERVED,
        0.0,
    )
    text = exposition(dra.COLLECTOR, node_view(two))
    assert 'podres_dra_devices{dra_driver="gpu.example.com",dra_pool="node-a"} 1.0' in text
    assert 'podres_dra_shared_devices{dra_driver="gpu.example.com",dra_pool="node-a"} 1.0' in text


def test_no_claims_no_dra_device_family() -> None:
    """Without claim devices the per-pool family is absent, not zero (no driver known)."""
    empty = KubeletReading(ApiVersion.V1, (), None, Support.SERVED, 0.0)
    text = exposition(dra.COLLECTOR, node_view(empty))
    assert "podres_dra_devices" not in text
    assert "podres_dra_shared_devices" not in text
