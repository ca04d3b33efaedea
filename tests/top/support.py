"""Test support for top's end-to-end tests: top's JSON checked against an exporter's /metrics."""

from __future__ import annotations

from typing import Any

from podres_exporter.top.rows import Reading, Sample, TopData, build
from tests.support import Samples, select


def assert_header_matches(node: dict[str, Any], ours: Samples) -> None:
    """A node of ``-o json``: its free shared CPUs and free devices are the exporter's."""
    for c in node["cpus"]:
        key = frozenset({("numa_node", c["numa_node"]), ("pool", "shared_free")})
        assert c["shared_free"] == select(ours, "podres_node_cpus")[key]
    for d in node["device_counts"]:
        if d["dra"]:  # held DRA devices per driver: podres_dra_devices
            held = select(ours, "podres_dra_devices", dra_driver=d["resource"])
            assert d["allocated"] == sum(held.values())
            continue
        free = select(ours, "podres_node_devices", resource=d["resource"], state="free")
        assert d["unallocated"] == sum(free.values())


def hostile_data() -> TopData:
    """Two hostile nodes (a NODE column too) and a hostile notice."""
    both = Reading(hostile_reading().samples + hostile_reading(node=BIDI).samples, 100.0, "origin")
    return build(both, source=OSC8, notice=f"refresh failed: {ESC} {NEWLINE}")


# The hostile texts, and how each must show.
ESC = "kill\x1b[2J\x1b[Hpod"


OSC8 = "\x1b]8;;http://evil.example/\x07link\x1b]8;;\x07"


NEWLINE = "two\nlines"


BIDI = "abc\u202edcba"


def hostile_reading(node: str = ESC, at: float = 100.0) -> Reading:
    """A node whose every name is hostile: holders, resources, device ids, NUMA, memory."""
    samples: list[Sample] = []

    def add(name: str, value: float = 1, /, **labels: str) -> None:
        samples.append(Sample(name, {"node": node, **labels}, value))

    add("podres_kubelet_up")
    add("podres_pods", 3)
    add("podres_node_allocatable_cpus", 4, numa_node=CR)
    add("podres_node_cpus", 2, numa_node=CR, pool="shared_free")
    add("podres_node_allocatable_devices", 2, resource=OSC52, numa_node="0")
    add("podres_node_devices", 1, resource=OSC52, numa_node="0", state="free")
    add("podres_node_allocatable_memory_bytes", 2**30, numa_node="0", memory_type=NUL_DEL)
    add("podres_node_memory_bytes", 2**29, numa_node="0", memory_type=NUL_DEL, state="free")
    holders = [
        {"namespace": ESC, "pod": OSC8, "container": NEWLINE},
        {"namespace": BIDI, "pod": MARKUP, "container": C1},
        {"namespace": ZERO_WIDTH, "pod": LINE_SEP, "container": BACKSPACE},
    ]
    for i, h in enumerate(holders):
        dev = {"resource": OSC52, "device_id": [ESC, BIDI, C1][i] + f"-{i}"}
        add("podres_cpu_assignment_info", cpu=str(i), numa_node=CR, pool="exclusive", **h)
        add("podres_container_device_info", numa_node=CR, **dev, **h)
        add("podres_node_device_info", numa_node=CR, state="allocated", **dev)
        add("podres_device_resolution_info", uuid=MARKUP + dev["device_id"], **dev)
        add("podres_container_memory_bytes", 2**20, memory_type=NUL_DEL, numa_node="0", **h)
    return Reading(tuple(samples), at, "origin")


OSC52 = "clip\x1b]52;c;cm0gLXJmIH4K\x07"


CR = "over\rwrite"


BACKSPACE = "back\x08\x08ed"


C1 = "csi\x9b31m"


ZERO_WIDTH = "ze\u200bro\u2060w\ufeff"


MARKUP = "[bold red]styled[/]"


LINE_SEP = "line\u2028sep\x85nel"


NUL_DEL = "nul\x00del\x7f"
