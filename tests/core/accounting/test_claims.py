"""DRA: claim rows per holder, and distinct devices per driver and pool."""

from __future__ import annotations

from podres_exporter.core.accounting import account
from podres_exporter.core.model import ClaimDevice, ContainerAlloc, DynamicResource
from tests.core.accounting.support import pod, reading, topo


def test_dynamic_resources_become_claim_rows() -> None:
    """Every device of every DRA claim is one row with its holder."""
    claim = DynamicResource("ml", "gpu-claim", (ClaimDevice("gpu.example.com", "node-a", "gpu-0"),))
    acc = account(
        reading((pod("a", ContainerAlloc("c", dynamic_resources=(claim,)), ns="ml"),)), topo()
    )
    assert [(c.holder.pod, c.claim_name, c.driver, c.device) for c in acc.claims] == [
        ("a", "gpu-claim", "gpu.example.com", "gpu-0")
    ]


def test_dra_devices_per_driver_and_pool() -> None:
    """Distinct devices per pool; same share id: one share; several shares: shared."""

    def claim(name: str, device: str, share: str | None) -> DynamicResource:
        return DynamicResource("ns", name, (ClaimDevice("drv", "pool-a", device, share_id=share),))

    r = reading(
        (
            pod("a", ContainerAlloc("c", dynamic_resources=(claim("c1", "d0", "s1"),))),
            pod("b", ContainerAlloc("c", dynamic_resources=(claim("c2", "d0", "s1"),))),
            pod("c", ContainerAlloc("c", dynamic_resources=(claim("c3", "d1", "s1"),))),
            pod("d", ContainerAlloc("c", dynamic_resources=(claim("c4", "d1", "s2"),))),
            pod("e", ContainerAlloc("c", dynamic_resources=(claim("c5", "d2", None),))),
        )
    )
    acc = account(r, topo())
    assert dict(acc.dra_devices) == {("drv", "pool-a"): 3}
    assert dict(acc.dra_shared_devices) == {("drv", "pool-a"): 1}
