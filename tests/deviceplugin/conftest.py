"""Fixtures for the device plugin's tests: socket directories and the simulated kubelet's
device manager."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podres_sim.kubelet.devicemanager import SimDeviceManager


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short directory for unix sockets (sockaddr_un holds at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_kubelet(sockdir: Path) -> Iterator[Callable[..., SimDeviceManager]]:
    """A SimDeviceManager on ``sockdir/plugins``, started unless ``start=False``; stopped
    (its socket removed) at teardown."""
    made: list[SimDeviceManager] = []

    def factory(*, start: bool = True) -> SimDeviceManager:
        (sockdir / "plugins").mkdir(exist_ok=True)
        kubelet = SimDeviceManager(sockdir / "plugins")
        if start:
            kubelet.start()
        made.append(kubelet)
        return kubelet

    yield factory
    for k in made:
        k.stop(remove_socket=True)
