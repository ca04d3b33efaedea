"""The simulated host's procfs: CPU times that move when told to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from podres_exporter.sources.procfs import read_cpu_times
from podres_sim import SimKubelet


def test_cpu_times_advance_alone(make_sim: Callable[..., SimKubelet]) -> None:
    """``advance_cpu_times`` moves every CPU's total by the seconds given, and busy time
    by part of it (an exclusive CPU more than a reserved one); nothing else is written."""
    sim = make_sim("demo")
    host: Any = sim.host  # type: ignore[attr-defined]
    before = read_cpu_times(host.procfs)
    logs_before = sorted(p.name for p in host.pod_logs.iterdir())
    host.advance_cpu_times(10.0)
    after = read_cpu_times(host.procfs)
    assert set(after.total) == set(before.total) and before.total
    for cpu, total in after.total.items():
        assert abs(total - before.total[cpu] - 10.0) < 0.05
        assert 0 < after.busy[cpu] - before.busy[cpu] <= 10.0
    assert sorted(p.name for p in host.pod_logs.iterdir()) == logs_before
