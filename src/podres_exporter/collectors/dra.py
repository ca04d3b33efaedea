"""Dynamic resources (DRA): ``podres_container_dynamic_resource_info`` per claim device and
holder, ``podres_dra_devices`` and ``podres_dra_shared_devices`` per driver and pool."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, accounting
from podres_exporter.collectors.families import HOLDER_LABELS, holder_values, info, labelled
from podres_exporter.core.accounting import Accounting, HeldClaim

_LABELS = (*HOLDER_LABELS, "claim_namespace", "claim_name", "dra_driver", "dra_pool", "dra_device")


def _claim(c: HeldClaim) -> list[str]:
    return [*holder_values(c.holder), c.claim_namespace, c.claim_name, c.driver, c.pool, c.device]


def _families(acc: Accounting) -> Iterator[Metric]:
    yield info(
        "podres_container_dynamic_resource",
        "One series per device of a DRA claim used by a container.",
        _LABELS,
        acc.claims,
        _claim,
    )
    if acc.dra_devices:
        yield labelled(
            "podres_dra_devices",
            "Distinct DRA devices per driver and pool that running containers use.",
            ["dra_driver", "dra_pool"],
            sorted(acc.dra_devices.items()),
        )
        yield labelled(
            "podres_dra_shared_devices",
            "Of those, the devices used through several shares or claims (claims with one "
            "share_id on a device are one share).",
            ["dra_driver", "dra_pool"],
            sorted(acc.dra_shared_devices.items()),
        )


COLLECTOR: Final = PartCollector(
    "dra",
    "dynamic-resource (DRA) claims and their devices per container",
    accounting,
    _families,
)
