"""Whole-exposition goldens: what the daemon runs, on each built-in scenario.

Sim scenario and host -> the exporter's NodeReader (real kubelet client, sysfs, procfs,
fake NVML) -> one Poller cycle -> the Store -> the Exposition a scrape is served from.
Refresh with `pytest tests/exporter/test_reader_golden.py --update-goldens` and review the diff.
Only the values that vary from run to run (durations, timestamps) and the parts rendered
per scrape (the snapshot's age, the process metrics) are left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from podres_exporter.exporter.exposition import Exposition
from podres_exporter.exporter.poller import Poller, Store
from podres_exporter.exporter.reader import NodeReader
from podres_sim import SimKubelet
from tests.support import exporter_settings

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
VOLATILE = re.compile(
    r"^podres_(collector_duration_seconds|kubelet_request_duration_seconds_(bucket|sum)"
    r"|kubelet_last_success_timestamp_seconds|source_duration_seconds"
    r"|source_last_success_timestamp_seconds|pod_identity_source_last_success_timestamp_seconds)\b"
)
# Rendered per scrape, after the cached part: not a function of the reading.
PER_SCRAPE = re.compile(r"^(# (HELP|TYPE) )?(podres_snapshot_age_seconds|process_)")


def exposition(sim: SimKubelet) -> str:
    backend = sim.host.gpu_backend()  # type: ignore[attr-defined]
    settings = exporter_settings(sim, source_timeout_s=10.0)
    reader = NodeReader.from_settings(settings, gpu_backend=backend)
    store = Store()
    try:
        Poller(reader, store).poll_once()
        families = partial(reader.families, version="0.0.0-golden", node="golden-node")
        body = Exposition(store, families).body(openmetrics=False, gz=False)
    finally:
        reader.close()
        backend.close()
    lines = body.decode().splitlines()
    return "".join(
        line + "\n" for line in lines if not VOLATILE.match(line) and not PER_SCRAPE.match(line)
    )


@pytest.mark.parametrize("scenario", ["minimal", "policy-none", "v1alpha1", "demo"])
def test_golden_exposition(
    scenario: str, make_sim: Callable[..., SimKubelet], update_goldens: bool
) -> None:
    """The exposition of each built-in scenario equals its reviewed golden file."""
    # The Pods API's UIDs are new at every start: the goldens read the log directories'
    # (tests/exporter/test_reader_identity.py reads the Pods API).
    text = exposition(make_sim(scenario, pods_api=False))
    path = GOLDEN / f"{scenario}.prom"
    if update_goldens:
        path.write_text(text)
    assert path.exists(), f"no golden for {scenario}: run with --update-goldens and review it"
    assert text == path.read_text()
