"""Whole-exposition goldens: sim scenario and host -> real sources -> join -> collectors.

Refresh with `pytest tests/integration/test_golden.py --update-goldens` and review the diff.
Only the values that vary from run to run (durations, timestamps) are left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from podres_exporter import collectors
from podres_exporter.cli.export import build_sources
from podres_exporter.collectors.base import RenderContext
from podres_exporter.http import _render
from podres_exporter.model import Snapshot
from podres_exporter.poller import SourceRunner
from podres_exporter.sim import SimKubelet
from podres_exporter.sources.cputopology import read_topology
from podres_exporter.sources.kubelet import KubeletClient
from podres_exporter.view import NodeView
from tests.conftest import exporter_settings

GOLDEN = Path(__file__).resolve().parent / "golden"
VOLATILE = re.compile(
    r"^podres_(collector_duration_seconds|kubelet_request_duration_seconds_(bucket|sum)"
    r"|kubelet_last_success_timestamp_seconds|source_duration_seconds"
    r"|source_last_success_timestamp_seconds)\b"
)


def exposition(sim: SimKubelet) -> str:
    client = KubeletClient(str(sim.socket_path))
    reading = client.read()
    topo = read_topology(sim.sysfs_root)  # type: ignore[attr-defined]
    backend = sim.host.gpu_backend()  # type: ignore[attr-defined]
    runner = SourceRunner(
        build_sources(exporter_settings(sim), collectors.ALL, backend), timeout_s=10
    )
    runner.start()
    telemetry = runner.collect()
    runner.close()
    backend.close()
    snap = Snapshot(
        1, reading.taken_at, topo, reading, True, stats=client.stats(), telemetry=telemetry
    )
    ctx = RenderContext(NodeView.of(snap), "0.0.0-golden")
    text = _render(collectors.collect_all(collectors.ALL, ctx), openmetrics=False).decode()
    client.close()
    return "".join(line + "\n" for line in text.splitlines() if not VOLATILE.match(line))


@pytest.mark.parametrize("scenario", ["minimal", "policy-none", "v1alpha1", "demo"])
def test_golden_exposition(
    scenario: str, make_sim: Callable[..., SimKubelet], update_goldens: bool
) -> None:
    """The exposition of each built-in scenario equals its reviewed golden file."""
    text = exposition(make_sim(scenario))
    path = GOLDEN / f"{scenario}.prom"
    if update_goldens:
        path.write_text(text)
    assert path.exists(), f"no golden for {scenario}: run with --update-goldens and review it"
    assert text == path.read_text()
