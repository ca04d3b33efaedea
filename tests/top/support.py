"""Test support for top's end-to-end tests: top's JSON checked against an exporter's /metrics."""

from __future__ import annotations

from typing import Any

from tests.support import Samples, select


def assert_header_matches(node: dict[str, Any], ours: Samples) -> None:
    """A node of ``-o json``: its free shared CPUs and free devices are the exporter's."""
    for c in node["cpus"]:
        key = frozenset({("numa_node", c["numa_node"]), ("pool", "shared_free")})
        assert c["shared_free"] == select(ours, "podres_node_cpus")[key]
    for d in node["device_counts"]:
        free = select(ours, "podres_node_devices", resource=d["resource"], state="unallocated")
        assert d["unallocated"] == sum(free.values())
