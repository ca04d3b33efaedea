"""The host's files moving under the exporter, run as a process: sysfs and procfs entries
deleted and re-created in a loop while it polls. It never crashes, never logs a
traceback, keeps answering scrapes, and reads the node again once the files are back."""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from podres_sim import SimKubelet
from tests.faults.support import Starter, host_of, start_exporter, total
from tests.support import http_get, parse_samples, sample, wait_until

pytestmark = pytest.mark.slow

CHURN_S = 3.0
# What the exporter reads on every poll: the CPU and NUMA lists, the device listings and
# links, per-CPU time; these are picked most often.
HOT_NAMES = frozenset(
    {"online", "cpulist", "stat", "cgroup", "numa_node", "class", "vendor", "device",
     "driver", "physfn", "net", "carrier", "operstate", "speed", "statistics", "rx_bytes",
     "current_link_speed", "current_link_width", "aer_dev_correctable"}
)  # fmt: skip
HOT_PARENTS = frozenset({"node", "devices", "net", "infiniband", "drm"})


def entries(root: Path) -> list[Path]:
    """Every file, directory and symlink under ``root``, relative to it."""
    out: list[Path] = []
    for directory, dirs, files in os.walk(root):
        base = Path(directory)
        out.extend((base / name).relative_to(root) for name in (*dirs, *files))
    return out


def hot(rel: Path) -> bool:
    return rel.name in HOT_NAMES or rel.parent.name in HOT_PARENTS


def restore(backup: Path, root: Path, rel: Path) -> None:
    """Put ``rel`` back from ``backup`` as it was (a symlink as a symlink)."""
    src, dst = backup / rel, root / rel
    if not dst.parent.is_dir():
        return  # its parent is gone too: restored with it
    if src.is_symlink():
        if not dst.is_symlink():
            os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        if not dst.exists():
            shutil.copytree(src, dst, symlinks=True)
    elif not dst.exists():
        shutil.copy2(src, dst)


def remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


class Churn:
    """Deletes a random entry of each tree and puts it back, again and again."""

    def __init__(self, roots: list[Path], backups: Path, seed: int = 7) -> None:
        self._trees = []
        for i, root in enumerate(roots):
            backup = backups / str(i)
            shutil.copytree(root, backup, symlinks=True)
            paths = entries(root)
            self._trees.append((root, backup, paths, [p for p in paths if hot(p)] or paths))
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.rounds = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            root, backup, paths, hot_paths = self._rng.choice(self._trees)
            victims = {*self._rng.sample(hot_paths, k=min(3, len(hot_paths))),
                       self._rng.choice(paths)}  # fmt: skip
            for rel in victims:
                remove(root / rel)
            time.sleep(self._rng.uniform(0, 0.01))
            for rel in sorted(victims, key=lambda p: len(p.parts)):
                restore(backup, root, rel)
            self.rounds += 1

    def __enter__(self) -> Churn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for root, backup, _, _ in self._trees:  # everything back, as it was
            shutil.rmtree(root)
            shutil.copytree(backup, root, symlinks=True)


def test_sysfs_and_procfs_entries_vanishing_while_read(
    kubelet: Callable[..., SimKubelet], daemons: Starter, short_dir: Path
) -> None:
    """Entries vanish and come back while the exporter polls: every scrape answers, no
    crash, no traceback; once they are back it serves the whole node again."""
    sim = kubelet("demo", rate_limit=False)
    host = host_of(sim)
    exporter = start_exporter(daemons, sim, poll_interval="50ms")
    before = exporter.scrape()
    cpus = total(before, "podres_node_allocatable_cpus")
    assert cpus > 0 and total(before, "podres_pci_info") > 0

    scrapes = 0
    with Churn([host.sysfs, host.procfs], short_dir / "backup") as churn:
        deadline = time.monotonic() + CHURN_S
        while time.monotonic() < deadline:
            status, _, body = http_get(exporter.url + "/metrics")
            assert status == 200
            parse_samples(body.decode())
            scrapes += 1
            # Paced as a scraper is: back to back, parsing in this process, the scrapes
            # would leave the churn's thread little of the interpreter lock.
            time.sleep(0.005)
    assert churn.rounds > 20 and scrapes > 10
    assert not exporter.exited(), exporter.tail()

    def whole() -> bool:
        s = exporter.scrape()
        return (
            total(s, "podres_node_allocatable_cpus") == cpus
            and sample(s, "podres_source_up", source="sysfs") == 1
            and sample(s, "podres_source_up", source="cpu") == 1
            and total(s, "podres_pci_info") == total(before, "podres_pci_info")
        )

    wait_until(whole, timeout=10)
    assert not exporter.problems(), exporter.problems()[:3]
    assert not exporter.events("poll_failed")
    code, _ = exporter.terminate()
    assert code == 0
