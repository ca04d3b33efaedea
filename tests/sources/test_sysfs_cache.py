"""Static sysfs attributes read once: the devices' StaticCache and the TopologyCache.

Files opened are counted by wrapping the sources' own ``open`` / ``_read``: a second
poll of an unchanged tree opens fewer files than the first, yet every reading equals a
reading without a cache, and a removed, replaced or added device is noticed.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.sources import cputopology, devices
from podres_exporter.sources.cputopology import TopologyCache, read_topology
from podres_exporter.sources.devices import StaticCache, read_devices
from podres_sim import write_sysfs
from podres_sim.host import (
    DeviceTreeSpec,
    IbPort,
    InfinibandHca,
    NicPf,
    NicVf,
    bump_counters,
    interface_name,
    write_device_tree,
)
from podres_sim.scenario import NodeSpec
from tests.sources.test_devices import SPECS, pci_of, real

EXTRA_PF = "0000:e1:00.0"


def large_specs(pfs: int = 4, vfs: int = 8) -> list[DeviceTreeSpec]:
    """The test tree plus NICs with many SR-IOV VFs and an HCA, as on a large node."""
    nics: list[DeviceTreeSpec] = []
    for bus in range(0x60, 0x60 + 2 * pfs, 2):  # (bus - 1):01.0 is each bus's root port
        functions = tuple(
            NicVf(f"0000:{bus:02x}:{2 + f // 8:02x}.{f % 8}", None) for f in range(vfs)
        )
        address = f"0000:{bus:02x}:00.0"
        nics.append(NicPf(address, interface_name(address), numa=bus % 2, vfs=functions))
    hca = InfinibandHca("0000:d1:00.0", device="mlx5_9", ports=(IbPort(1), IbPort(2)))
    return [*SPECS, *nics, hca]


@pytest.fixture
def large(tmp_path: Path) -> Path:
    return write_device_tree(tmp_path / "sys", large_specs())


@pytest.fixture
def tree_root(tmp_path: Path) -> Path:
    return write_device_tree(tmp_path / "sys", SPECS)


class Opens:
    """Counts the files (not directories) the device source opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0

        def counting(path: str, flags: int, *args: Any, **kwargs: Any) -> int:
            if not flags & os.O_DIRECTORY:
                self.count += 1
            return os.open(path, flags, *args, **kwargs)

        monkeypatch.setattr(devices, "_os_open", counting)

    def during(self, fn: Callable[[], object]) -> int:
        before = self.count
        fn()
        return self.count - before


def test_a_second_poll_opens_fewer_files(large: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The static attributes are read once; counters are read on every poll."""
    opens = Opens(monkeypatch)
    cache = StaticCache()
    first = opens.during(lambda: read_devices(large, cache=cache))
    second = opens.during(lambda: read_devices(large, cache=cache))
    uncached = opens.during(lambda: read_devices(large))
    assert uncached == first
    assert second < first
    pci = len(read_devices(large).pci)
    # At least class, vendor, device and NUMA node of every function are not read again.
    assert first - second >= 4 * pci


def test_aer_counters_are_read_only_where_the_function_has_them(
    large: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a function reports AER is static: a function without aer_dev_* files
    (the VFs here) is not asked for them again, one with them is, at every poll."""
    tried: list[str] = []
    real_open = devices._os_open

    def recording(path: str, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.path.basename(path).startswith("aer_dev_"):
            tried.append(path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(devices, "_os_open", recording)
    cache = StaticCache(open_files=0)  # every counter file opened at every read
    first = read_devices(large, cache=cache)
    with_aer = [p for p in first.pci if (real(large, p.address) / "aer_dev_fatal").exists()]
    without = [p for p in first.pci if p not in with_aer]
    assert with_aer and without, "the tree has functions of both kinds"
    tried.clear()
    second = read_devices(large, cache=cache)
    assert len(tried) == 3 * len(with_aer)
    assert second == read_devices(large)
    assert all(not p.aer_fatal for p in without)


def test_cached_readings_follow_the_counters(large: Path) -> None:
    """Readings with a cache equal readings without one, as the counters move."""
    cache = StaticCache()
    rng = random.Random(7)
    for _ in range(3):
        assert read_devices(large, cache=cache) == read_devices(large)
        bump_counters(large, rng, seconds=5)
    before = read_devices(large, cache=cache)
    bump_counters(large, rng, seconds=5)
    after = read_devices(large, cache=cache)
    assert after != before and after == read_devices(large)


def test_a_removed_device_leaves_the_reading_and_the_cache(large: Path) -> None:
    """A function that goes is absent from the next reading and from the cache."""
    cache = StaticCache()
    read_devices(large, cache=cache)
    held = len(cache)
    victim = "0000:60:00.0"
    shutil.rmtree(real(large, victim))
    (large / "bus/pci/devices" / victim).unlink()
    reading = read_devices(large, cache=cache)
    assert victim not in {p.address for p in reading.pci}
    assert len(cache) < held
    assert reading == read_devices(large)


def test_a_replaced_or_added_device_is_read_anew(tree_root: Path) -> None:
    """A function re-created at the same address with other ids reads as the new one;
    a hot-plugged one appears."""
    cache = StaticCache()
    pf = "0000:3b:00.0"
    assert pci_of(read_devices(tree_root, cache=cache), pf).device_id == "0x159b"
    shutil.rmtree(real(tree_root, pf))
    write_device_tree(tree_root, [NicPf(pf, "ens1f0", numa=1, device_id="0x1593")])
    replaced = pci_of(read_devices(tree_root, cache=cache), pf)
    assert (replaced.device_id, replaced.numa_node) == ("0x1593", 1)
    write_device_tree(tree_root, [NicPf(EXTRA_PF, "ens9f0", numa=1)])
    added = read_devices(tree_root, cache=cache)
    assert pci_of(added, EXTRA_PF).numa_node == 1
    assert added == read_devices(tree_root)


def test_an_unreadable_static_file_is_read_again(tree_root: Path) -> None:
    """A static attribute that failed to read is not kept: the next poll has it."""
    cache = StaticCache()
    vendor = real(tree_root, "0000:3b:00.0") / "vendor"
    text = vendor.read_text()
    vendor.unlink()
    assert pci_of(read_devices(tree_root, cache=cache), "0000:3b:00.0").vendor_id == ""
    vendor.write_text(text)
    assert pci_of(read_devices(tree_root, cache=cache), "0000:3b:00.0").vendor_id == "0x8086"


# ------------------------------------------------------------------------------ topology


def test_topology_cache_reads_the_nodes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the online CPUs and the node names are unchanged, only ``online`` is read
    and the same topology served; a CPU going offline is a new reading."""
    write_sysfs(NodeSpec.uniform(4, 8), tmp_path)
    reads: list[str] = []
    original = cputopology._read

    def counting(path: Path) -> str:
        reads.append(path.name)
        return original(path)

    monkeypatch.setattr(cputopology, "_read", counting)
    cache = TopologyCache()
    first = read_topology(tmp_path, cache)
    assert reads.count("cpulist") == 4
    reads.clear()
    assert read_topology(tmp_path, cache) is first
    assert reads == ["online"]
    (tmp_path / "devices/system/cpu/online").write_text("0-30\n")
    (tmp_path / "devices/system/node/node3/cpulist").write_text("24-30\n")
    after = read_topology(tmp_path, cache)
    assert after == read_topology(tmp_path)
    assert 31 not in after.online_cpus and 31 not in after.cpu_to_numa


def test_an_attribute_longer_than_a_page_is_read_whole(tmp_path: Path) -> None:
    """One read takes a sysfs attribute whole; a longer file (not sysfs: a test tree, a
    bind mount) is read to its end, not cut at the first chunk."""
    long = tmp_path / "long"
    long.write_text("x" * 10_000 + "\n")
    assert devices._read(str(long)) == "x" * 10_000
    exact = tmp_path / "exact"
    exact.write_text("y" * 4096)
    assert devices._read(str(exact)) == "y" * 4096
    assert devices._read(str(tmp_path / "missing")) is None
    assert devices._read(str(tmp_path)) is None  # a directory: EISDIR on read
