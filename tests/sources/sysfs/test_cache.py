"""Static sysfs attributes read once (``sources/sysfs/cache.py``): a second poll of an
unchanged tree opens fewer files than the first (counted by the opener a read is given),
yet every reading equals a reading without a cache, and a removed, replaced or added
device is noticed.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

from podres_exporter.sources.sysfs import StaticCache, read_devices
from podres_sim.host import NicPf, bump_counters, write_device_tree
from tests.sources.sysfs.support import EXTRA_PF, OpenedFiles, pci_of, real


def test_a_second_poll_opens_fewer_files(large: Path) -> None:
    """The static attributes are read once; counters are read on every poll."""
    opener = OpenedFiles()

    def opens(cache: StaticCache | None) -> int:
        before = len(opener.paths)
        read_devices(large, cache=cache, opener=opener)
        return len(opener.paths) - before

    cache = StaticCache()
    first = opens(cache)
    second = opens(cache)
    uncached = opens(None)
    assert uncached == first
    assert second < first
    pci = len(read_devices(large).pci)
    # At least class, vendor, device and NUMA node of every function are not read again.
    assert first - second >= 4 * pci


def test_aer_counters_are_read_only_where_the_function_has_them(large: Path) -> None:
    """Whether a function reports AER is static: a function without aer_dev_* files
    (the VFs here) is not asked for them again, one with them is, at every poll."""
    opener = OpenedFiles()

    def tried() -> list[str]:
        return [p for p in opener.paths if os.path.basename(p).startswith("aer_dev_")]

    cache = StaticCache(open_files=0)  # every counter file opened at every read
    first = read_devices(large, cache=cache, opener=opener)
    with_aer = [p for p in first.pci if (real(large, p.address) / "aer_dev_fatal").exists()]
    without = [p for p in first.pci if p not in with_aer]
    assert with_aer and without, "the tree has functions of both kinds"
    opener.paths.clear()
    second = read_devices(large, cache=cache, opener=opener)
    assert len(tried()) == 3 * len(with_aer)
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


def test_a_replaced_or_added_device_is_read_anew(tree: Path) -> None:
    """A function re-created at the same address with other ids reads as the new one;
    a hot-plugged one appears."""
    cache = StaticCache()
    pf = "0000:3b:00.0"
    assert pci_of(read_devices(tree, cache=cache), pf).device_id == "0x159b"
    shutil.rmtree(real(tree, pf))
    write_device_tree(tree, [NicPf(pf, "ens1f0", numa=1, device_id="0x1593")])
    replaced = pci_of(read_devices(tree, cache=cache), pf)
    assert (replaced.device_id, replaced.numa_node) == ("0x1593", 1)
    write_device_tree(tree, [NicPf(EXTRA_PF, "ens9f0", numa=1)])
    added = read_devices(tree, cache=cache)
    assert pci_of(added, EXTRA_PF).numa_node == 1
    assert added == read_devices(tree)


def test_an_unreadable_static_file_is_read_again(tree: Path) -> None:
    """A static attribute that failed to read is not kept: the next poll has it."""
    cache = StaticCache()
    vendor = real(tree, "0000:3b:00.0") / "vendor"
    text = vendor.read_text()
    vendor.unlink()
    assert pci_of(read_devices(tree, cache=cache), "0000:3b:00.0").vendor_id == ""
    vendor.write_text(text)
    assert pci_of(read_devices(tree, cache=cache), "0000:3b:00.0").vendor_id == "0x8086"
