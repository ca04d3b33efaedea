"""Counters that move: ``bump_counters`` advances every traffic counter and energy meter
in a written device tree, as a busy node's would between two reads.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

__all__ = ["bump_counters"]


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii"))
    except (OSError, ValueError):
        return None


def _add(root: Path, path: Path, delta: int) -> None:
    """Add ``delta`` (at least 0) to the integer in ``path``."""
    try:
        value = int(path.read_bytes())
    except (OSError, ValueError):
        return
    if delta != 0:
        _rewrite(root, path, f"{value + delta}\n".encode("ascii"))


def _rewrite(root: Path, path: Path, new: bytes) -> None:
    """Write ``new`` as the content of ``path``.

    In place, as a sysfs attribute changes: the same file, so a reader that keeps it
    open and reads it again sees the new value. A text no shorter than the old one (a
    counter's, which only grows) is written over it in one write: no reader sees the
    file empty or with a character of the old text left at its end. A shorter one
    replaces the file by a rename."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if os.fstat(fd).st_size <= len(new):
            os.pwrite(fd, new, 0)
            return
    finally:
        os.close(fd)
    tmp = root / ".devtree-counter.tmp"
    tmp.write_bytes(new)
    tmp.replace(path)


def bump_counters(root: str | Path, rng: random.Random, *, seconds: float = 10.0) -> None:
    """Advance the counters of a tree ``write_device_tree`` wrote, as ``seconds`` of traffic.

    Every PCI-backed interface that is up receives and sends packets (and now and
    then drops one or counts an error), every ACTIVE InfiniBand port moves data, and
    every DRM hwmon energy meter advances by its power. Counters only grow.
    """
    root = Path(root)
    net = root / "class" / "net"
    for name in sorted(os.listdir(net)) if net.is_dir() else []:
        iface = net / name
        if not (iface / "device").exists():
            continue
        try:
            if (iface / "operstate").read_text(encoding="ascii").strip() != "up":
                continue
        except OSError:
            continue
        stats = iface / "statistics"
        for direction in ("rx", "tx"):
            packets = int(rng.uniform(100, 20_000) * seconds)
            _add(root, stats / f"{direction}_packets", packets)
            _add(root, stats / f"{direction}_bytes", packets * rng.randint(80, 1500))
            if rng.random() < 0.05:
                _add(root, stats / f"{direction}_dropped", rng.randint(1, 20))
            if rng.random() < 0.01:
                _add(root, stats / f"{direction}_errors", 1)
    ib = root / "class" / "infiniband"
    for device in sorted(os.listdir(ib)) if ib.is_dir() else []:
        ports = ib / device / "ports"
        for port in sorted(os.listdir(ports)) if ports.is_dir() else []:
            p = ports / port
            try:
                if not (p / "state").read_text(encoding="ascii").strip().endswith("ACTIVE"):
                    continue
            except OSError:
                continue
            for direction, unicast in (("rcv", "unicast_rcv"), ("xmit", "unicast_xmit")):
                packets = int(rng.uniform(1_000, 200_000) * seconds)
                _add(root, p / "counters" / f"port_{direction}_packets", packets)
                _add(root, p / "counters" / f"{unicast}_packets", packets)
                _add(root, p / "counters" / f"port_{direction}_data", packets * 1024)
    drm = root / "class" / "drm"
    for card in sorted(os.listdir(drm)) if drm.is_dir() else []:
        if not re.fullmatch(r"card\d+", card):
            continue
        hwmon = drm / card / "device" / "hwmon"
        for h in sorted(os.listdir(hwmon)) if hwmon.is_dir() else []:
            power = next(
                (
                    v
                    for v in (_read_int(hwmon / h / f) for f in ("power1_average", "power1_input"))
                    if v is not None
                ),
                round(rng.uniform(50, 300) * 1_000_000),
            )
            _add(root, hwmon / h / "energy1_input", int(power * seconds))
        busy = drm / card / "device" / "gpu_busy_percent"
        if busy.is_file():
            _rewrite(root, busy, f"{rng.randint(0, 100)}\n".encode("ascii"))
