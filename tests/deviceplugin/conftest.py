"""Fixtures for the device plugin's tests: socket directories and a small kubelet."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.deviceplugin.support import MiniKubelet


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short directory for unix sockets (sockaddr_un holds at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_kubelet(sockdir: Path) -> Iterator[Callable[..., MiniKubelet]]:
    """Start a MiniKubelet on ``sockdir/plugins``; stopped at teardown."""
    started: list[MiniKubelet] = []

    def factory(*, start: bool = True, refuse: int = 0) -> MiniKubelet:
        kubelet = MiniKubelet(sockdir / "plugins", refuse=refuse)
        (sockdir / "plugins").mkdir(exist_ok=True)
        if start:
            kubelet.start()
        started.append(kubelet)
        return kubelet

    yield factory
    for k in started:
        k.stop(stale=False)
