"""Counter files kept open between reads (``sources/sysfs/files.py``) and read again with
``pread``: fresh values, no file opened again, and a file or device that goes, is
replaced or is renamed read anew.

The first tests use a written device tree; the last ones the machine's own sysfs, with
a veth pair created for the test (root and the veth driver needed; skipped without),
because only sysfs shows what a file kept open does when its device goes (``ENODEV``)
or when its name is given to another device.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.core.telemetry import NetReading
from podres_exporter.sources.sysfs import StaticCache, read_devices
from podres_sim.host import bump_counters
from tests.sources.sysfs.support import OpenedFiles


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_counters_are_read_again_from_the_files_kept_open(
    large: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first read, the changing attributes of the network interfaces, PCI
    functions and InfiniBand ports are read without opening a file (one found missing
    is not looked for at every read), and the readings follow the counters as a
    reading without a cache does."""
    opener = OpenedFiles()
    opened = opener.paths
    cache = StaticCache()
    first = read_devices(large, cache=cache, opener=opener)
    assert len(cache.files) > 0
    net_and_pci = [p for p in opened if "/class/net/" in p or "/bus/pci/" in p]
    assert len(net_and_pci) >= 11 * len(first.net)
    bump_counters(large, random.Random(3), seconds=5)
    opened.clear()
    links: list[str] = []
    real_readlink = os.readlink

    def readlink(path: str, *args: Any, **kwargs: Any) -> str:
        links.append(path)
        return real_readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", readlink)
    second = read_devices(large, cache=cache, opener=opener)
    monkeypatch.setattr(os, "readlink", real_readlink)
    # An interface's device link is read once per interface directory.
    assert links and not [p for p in links if "/class/net/" in p]
    # DRM attributes are not held, and a GPU's busy percentage, whose text can get
    # shorter, is replaced by the simulator, which makes its function's files new ones.
    drm = {f"/{p.address}/" for p in first.pci if p.drm_cards}
    assert not [p for p in opened if "/class/drm/" not in p and not any(d in p for d in drm)]
    assert second == read_devices(large)
    assert second.net != first.net  # the counters moved, and the held files show it


def test_a_counter_file_replaced_by_a_rename_is_read_anew(large: Path) -> None:
    """Outside sysfs a file can be replaced: its directory's mtime changes, and the
    files held there are opened again (the mtime has the file system's clock tick:
    the test lets one pass)."""
    cache = StaticCache()
    name = read_devices(large, cache=cache).net[0].interface
    stat = large / "class" / "net" / name / "statistics" / "rx_bytes"
    time.sleep(0.02)
    new = stat.with_name("rx_bytes.new")
    new.write_text("123456789\n")
    new.replace(stat)
    reading = read_devices(large, cache=cache)
    assert next(n for n in reading.net if n.interface == name).rx_bytes == 123456789


def test_a_removed_interface_closes_its_files(large: Path) -> None:
    """An interface that goes leaves the reading, and its held files are closed."""
    cache = StaticCache()
    first = read_devices(large, cache=cache)
    held = len(cache.files)
    gone = first.net[0].interface
    shutil.rmtree((large / "class" / "net" / gone).resolve())
    second = read_devices(large, cache=cache)
    assert gone not in {n.interface for n in second.net}
    assert second == read_devices(large)
    assert len(cache.files) <= held - 11


def test_at_most_the_capacity_is_held(large: Path) -> None:
    """Beyond its capacity a file is read the plain way; 0 holds none."""
    for capacity in (0, 25):
        cache = StaticCache(open_files=capacity)
        for _ in range(2):
            assert read_devices(large, cache=cache) == read_devices(large)
        assert len(cache.files) == capacity


def test_close_closes_every_held_file(large: Path) -> None:
    """close() (or dropping the cache) closes every held file; later reads hold none."""
    before = _open_fds()
    cache = StaticCache()
    read_devices(large, cache=cache)
    assert _open_fds() >= before + len(cache.files) > before
    cache.close()
    assert _open_fds() == before
    assert read_devices(large, cache=cache) == read_devices(large)
    assert _open_fds() == before  # a closed cache holds nothing more
    dropped = StaticCache()
    read_devices(large, cache=dropped)
    assert _open_fds() > before
    del dropped  # as a file object, a cache no longer referenced closes its files
    assert _open_fds() == before


# ------------------------------------------------------------------- the real sysfs


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def veth() -> Iterator[tuple[str, str]]:
    """A veth pair in this network namespace, removed at the end."""
    a, b = f"pdr{os.getpid() % 100000}a", f"pdr{os.getpid() % 100000}b"
    try:
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
    except (OSError, subprocess.SubprocessError) as err:
        pytest.skip(f"cannot create a veth pair here (root and the veth driver needed): {err}")
    try:
        yield a, b
    finally:
        for name in (a, b):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


def _read(cache: StaticCache, name: str) -> NetReading | None:
    found = read_devices("/sys", pci_addresses=(), interfaces=[name], cache=cache).net
    return found[0] if found else None


def test_sysfs_files_kept_open_show_fresh_values(veth: tuple[str, str]) -> None:
    """pread at offset 0 of an open sysfs attribute calls its show() again."""
    a, b = veth
    _ip("link", "set", b, "up")
    _ip("link", "set", a, "up")
    cache = StaticCache()
    first = _read(cache, a)
    assert first is not None and len(cache.files) == 11
    # Traffic out of a: broadcast Ethernet frames of the local experimental type.
    frame = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x88\xb5" + b"podres".ljust(46, b"\0")
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as sock:
        sock.bind((a, 0))
        for _ in range(20):
            sock.send(frame)
    deadline = time.monotonic() + 5
    second = _read(cache, a)
    while second is not None and second.tx_packets == first.tx_packets:
        assert time.monotonic() < deadline, "no packet counted on the veth"
        time.sleep(0.05)
        second = _read(cache, a)
    assert second is not None and first.tx_packets is not None
    assert second.tx_packets is not None and second.tx_packets >= first.tx_packets + 20
    assert second == _read(StaticCache(open_files=0), a)


def test_a_sysfs_device_gone_fails_its_open_files_with_enodev(veth: tuple[str, str]) -> None:
    """Files held open of a device removed read ENODEV: they are closed, and the
    name, looked up again, is gone."""
    a, _ = veth
    cache = StaticCache()
    assert _read(cache, a) is not None
    held = cache.files.directory(f"/sys/class/net/{a}/statistics")
    assert held is not None and "rx_bytes" in held.files
    _ip("link", "del", a)
    assert held.read("rx_bytes") is None
    assert "rx_bytes" not in held.files
    assert _read(cache, a) is None
    assert len(cache.files) == 0


def test_a_sysfs_name_given_to_another_device_is_read_anew(veth: tuple[str, str]) -> None:
    """An interface renamed and its name taken by a new one: the name's directory is a
    new one, and the new device's attributes are read, not the old one's."""
    a, b = veth
    old = f"{a}o"
    cache = StaticCache()
    before = _read(cache, a)
    assert before is not None and before.operstate == "down"
    _ip("link", "set", a, "name", old)
    _ip("link", "add", a, "type", "veth", "peer", "name", f"{b}n")
    try:
        _ip("link", "set", f"{b}n", "up")
        _ip("link", "set", a, "up")
        after = _read(cache, a)
        assert after is not None and after.operstate == "up"
        assert after == _read(StaticCache(open_files=0), a)
    finally:
        subprocess.run(["ip", "link", "del", old], capture_output=True, check=False)
