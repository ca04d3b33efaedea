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


def test_siblings_and_distances_are_read(tmp_path: Path) -> None:
    """Each online CPU's SMT siblings and each node's distance row, from sysfs."""
    write_sysfs(NodeSpec.uniform(2, 4, offline_cpus=(3,)), tmp_path)
    for cpu, siblings in ((0, "0-1"), (1, "0-1"), (2, "2"), (4, "4-5"), (5, "4-5")):
        path = tmp_path / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(siblings + "\n")
    t = read_topology(tmp_path)
    assert t.thread_siblings == {
        0: {0, 1}, 1: {0, 1}, 2: {2}, 4: {4, 5}, 5: {4, 5}, 6: {6}, 7: {7}
    }  # fmt: skip
    assert t.numa_distances == {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}


def test_missing_sibling_or_distance_files_leave_those_facts_out(tmp_path: Path) -> None:
    """An unreadable or malformed sibling or distance file leaves that fact unknown and
    fails nothing else."""
    write_sysfs(NodeSpec.uniform(2, 2), tmp_path)
    (tmp_path / "devices/system/node/node1/distance").write_text("21 x\n")
    (tmp_path / "devices/system/node/node0/distance").unlink()
    bad = tmp_path / "devices/system/cpu/cpu1/topology/thread_siblings_list"
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("1-0\n")
    t = read_topology(tmp_path)
    assert t.numa_distances == {}
    assert 1 not in t.thread_siblings
    assert t.cpu_to_numa == {0: 0, 1: 0, 2: 1, 3: 1}
