"""Fixtures of the fault suite: a short socket directory, the simulated kubelet with its
host, and the daemons as processes (stopped and their logs shown at teardown)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podres_sim import Scenario, SimKubelet, load_builtin
from podres_sim.host import SimHost
from tests.faults.support import Starter, started


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short directory: socket paths must fit a unix socket's 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="pf-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemons(short_dir: Path) -> Iterator[Starter]:
    """``start(name, argv)``: a daemon as a process, logging to a file in ``short_dir``."""
    yield from started(short_dir)


@pytest.fixture
def kubelet(short_dir: Path) -> Iterator[Callable[..., SimKubelet]]:
    """``kubelet(scenario, **behaviour)``: a started simulated kubelet on
    ``short_dir/kubelet.sock`` with its host (``sim.host``: sysfs, procfs, log names, a
    fake NVML frozen in time) under ``short_dir/host``; stopped at teardown."""
    made: list[SimKubelet] = []

    def factory(scenario: str | Scenario = "minimal", **behaviour: Any) -> SimKubelet:
        sc = load_builtin(scenario) if isinstance(scenario, str) else scenario
        sim = SimKubelet(sc, short_dir / f"kubelet-{len(made)}.sock")
        if behaviour:
            sim.set_behaviour(**behaviour)
        sim.host = SimHost(sim, short_dir / f"host-{len(made)}", clock=None)  # type: ignore[attr-defined]
        made.append(sim)
        sim.start()
        return sim

    yield factory
    for sim in made:
        sim.clear_faults()
        sim.stop(remove_socket=True)
