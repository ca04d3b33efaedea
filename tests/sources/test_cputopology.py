"""The CPU topology (``sources/cputopology.py``) and its cache: the nodes' files are read
once while the online CPUs and the node names stay the same."""

from __future__ import annotations

from pathlib import Path

from podres_exporter.sources.cputopology import TopologyCache, read_topology
from podres_sim import write_sysfs
from podres_sim.scenario import NodeSpec


def test_topology_cache_reads_the_nodes_once(tmp_path: Path) -> None:
    """While the online CPUs and the node names are unchanged, only ``online`` is read
    and the same topology served; a CPU going offline is a new reading."""
    write_sysfs(NodeSpec.uniform(4, 8), tmp_path)
    reads: list[str] = []

    def counting(path: Path) -> str:
        reads.append(path.name)
        return path.read_text()

    cache = TopologyCache()
    first = read_topology(tmp_path, cache, read_text=counting)
    assert reads.count("cpulist") == 4
    reads.clear()
    assert read_topology(tmp_path, cache, read_text=counting) is first
    assert reads == ["online"]
    (tmp_path / "devices/system/cpu/online").write_text("0-30\n")
    (tmp_path / "devices/system/node/node3/cpulist").write_text("24-30\n")
    after = read_topology(tmp_path, cache, read_text=counting)
    assert after == read_topology(tmp_path)
    assert 31 not in after.online_cpus and 31 not in after.cpu_to_numa
