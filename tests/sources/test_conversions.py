"""The edge conversions: kernel CPU lists, sysfs topology, and wire messages to the model."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podres_exporter._generated.podresources.v1 import api_pb2 as v1
from podres_exporter.core.cpulist import format_cpulist, parse_cpulist
from podres_exporter.core.errors import SourceError
from podres_exporter.core.model import DeviceRef
from podres_exporter.sources.cputopology import read_topology
from podres_exporter.sources.kubelet_wire import devices_from_wire, pod_from_v1


@given(st.frozensets(st.integers(0, 300)))
def test_cpulist_round_trip(cpus: frozenset[int]) -> None:
    """format then parse gives back the same CPUs."""
    assert parse_cpulist(format_cpulist(cpus)) == cpus


def test_cpulist_examples_and_errors() -> None:
    """Ranges compact; garbage is an error naming the bad part."""
    assert format_cpulist([4, 5, 6, 7, 12]) == "4-7,12"
    assert parse_cpulist("0-2,8\n") == {0, 1, 2, 8}
    assert parse_cpulist("") == frozenset()
    with pytest.raises(ValueError, match="'x'"):
        parse_cpulist("0-3,x")


def test_topology_from_sysfs_tree(tmp_path: Path) -> None:
    """Online CPUs and their NUMA nodes come from cpu/online and node*/cpulist."""
    (tmp_path / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "devices/system/cpu/online").write_text("0-3\n")
    for n, cl in ((0, "0-1"), (1, "2-3")):
        d = tmp_path / f"devices/system/node/node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cl + "\n")
    t = read_topology(tmp_path)
    assert t.online_cpus == {0, 1, 2, 3}
    assert t.numa_of(3) == 1
    assert t.numa_nodes == (0, 1)


def test_topology_without_numa_puts_every_cpu_on_node_0(tmp_path: Path) -> None:
    """A kernel without NUMA has no node directory: every CPU is on node 0."""
    (tmp_path / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "devices/system/cpu/online").write_text("0-1\n")
    assert read_topology(tmp_path).numa_nodes == (0,)


def test_unlistable_node_directory_is_a_source_error(tmp_path: Path) -> None:
    """A node directory that is there but cannot be listed (here a symlink loop) is a
    SourceError naming it, not a node without NUMA."""
    (tmp_path / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "devices/system/cpu/online").write_text("0-1\n")
    (tmp_path / "devices/system/node").symlink_to("node")
    with pytest.raises(SourceError, match="devices/system/node"):
        read_topology(tmp_path)


def test_topology_missing_is_a_source_error(tmp_path: Path) -> None:
    """A sysfs root without cpu/online raises SourceError naming the path."""
    with pytest.raises(SourceError, match="cpu/online"):
        read_topology(tmp_path)


def test_topology_of_this_machine() -> None:
    """The real /sys of the test machine parses, with at least one CPU on a NUMA node."""
    t = read_topology("/sys")
    assert t.online_cpus
    assert all(t.numa_of(c) is not None for c in t.online_cpus)


def _dev(resource: str, ids: list[str], nodes: list[int] | None) -> v1.ContainerDevices:
    d = v1.ContainerDevices(resource_name=resource, device_ids=ids)
    if nodes is not None:
        d.topology.CopyFrom(v1.TopologyInfo(nodes=[v1.NUMANode(ID=n) for n in nodes]))
    return d


def test_devices_are_aggregated_deduplicated_and_numa_merged() -> None:
    """Per-device entries merge per (resource, id); node 0 stays (0,), no topology stays None."""
    wire = [
        _dev("r/a", ["x"], [0]),
        _dev("r/a", ["x"], [1]),
        _dev("r/a", ["y", "y"], None),
        _dev("r/b", ["z"], [0]),
    ]
    assert devices_from_wire(wire) == (
        DeviceRef("r/a", "x", (0, 1)),
        DeviceRef("r/a", "y", None),
        DeviceRef("r/b", "z", (0,)),
    )


def test_pod_conversion_keeps_everything() -> None:
    """CPUs, memory with topology, DRA claims and pod-level CPUs survive the conversion."""
    mem = v1.ContainerMemory(
        memory_type="memory", size=64 << 20, topology=v1.TopologyInfo(nodes=[v1.NUMANode(ID=0)])
    )
    claim = v1.DynamicResource(
        claim_name="c1",
        claim_namespace="ns",
        claim_resources=[
            v1.ClaimResource(
                driver_name="drv",
                pool_name="p",
                device_name="d",
                cdi_devices=[v1.CDIDevice(name="vendor.com/x=d")],
                share_id="s1",
            )
        ],
    )
    msg = v1.PodResources(
        name="p",
        namespace="ns",
        cpu_ids=[7],
        containers=[
            v1.ContainerResources(name="c", cpu_ids=[2, 3], memory=[mem], dynamic_resources=[claim])
        ],
    )
    pod = pod_from_v1(msg)
    c = pod.containers[0]
    assert c.cpu_ids == {2, 3}
    assert c.memory[0].numa == (0,) and c.memory[0].size_bytes == 64 << 20
    d = c.dynamic_resources[0].devices[0]
    assert (d.driver, d.pool, d.device, d.cdi_devices, d.share_id) == (
        "drv",
        "p",
        "d",
        ("vendor.com/x=d",),
        "s1",
    )
    assert pod.cpu_ids == {7}
