"""On a real NVIDIA driver: every field the exporter serves, read by the real
``NvmlBackend``, in its unit and range, or unsupported; and the cost of one read beside
the fake's. Skipped where no driver answers (see ``conftest.py``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from podres_exporter.sources.gpu import NvmlBackend, open_nvml_backend
from podres_sim.nvml import FakeNvml
from tests.gpu.checks import check_counters, check_reading, timing_summary
from tests.gpu.probe import Probe

pytestmark = pytest.mark.gpu

_TIMED_READS = 20
# Long enough for the energy counter and the utilisation samples to move.
_BETWEEN_READS_S = 1.0


def test_every_field_is_read_in_its_unit_or_unsupported(
    real: Probe, real_backend: NvmlBackend, facts: dict[str, Any]
) -> None:
    """Each exported field of each device is read (type, unit, plausible range) or
    unsupported; counters do not go down between two reads; the devices are the driver's."""
    first = real_backend.read()
    time.sleep(_BETWEEN_READS_S)
    second = real_backend.read()
    assert second.available and second.error is None, second.error
    assert second.driver_version == real.driver_version
    assert [(g.uuid, g.index) for g in second.gpus] == [(d.uuid, d.index) for d in real.devices]
    unhealthy = [f"{g.uuid}: {g.error}" for g in second.gpus if not g.healthy]
    assert not unhealthy
    results = [r for g in second.gpus for r in check_reading(g)]
    facts["fields"] = [r.as_dict() for r in results]
    problems = [f"{r.uuid} {r.attr}: {r.problem}" for r in results if r.problem]
    before = {g.uuid: g for g in first.gpus}
    for gpu in second.gpus:
        if gpu.uuid in before:
            problems += check_counters(before[gpu.uuid], gpu)
    read = sum(r.status == "read" for r in results)
    facts["checks"]["fields"] = (
        f"{read} read, {len(results) - read} unsupported, {len(problems)} problems"
    )
    assert not problems


def _time_reads(backend: NvmlBackend) -> list[float]:
    backend.read()  # the first read also asks each GPU's identity
    out = []
    for _ in range(_TIMED_READS):
        start = time.perf_counter()
        backend.read()
        out.append(time.perf_counter() - start)
    return out


def test_the_cost_of_one_read_is_measured_beside_the_fakes(
    real: Probe, facts: dict[str, Any]
) -> None:
    """One NvmlBackend.read on the real driver and on a fake of as many GPUs, with every
    field and with the slow fields (PCIe, ECC, remapping, power limit) served from their
    last read: figures for the report, never asserted."""
    count = len(real.gpus)
    timings = {}
    for slow, label in ((0.0, "every field"), (3600.0, "slow fields kept")):
        real_backend = open_nvml_backend(slow_interval_s=slow)
        try:
            timings[f"real driver, {count} GPU(s), {label}"] = timing_summary(
                _time_reads(real_backend)
            )
        finally:
            real_backend.close()
        fake_backend = NvmlBackend(FakeNvml.with_gpus(count), slow_interval_s=slow)
        timings[f"fake NVML, {count} GPU(s), {label}"] = timing_summary(_time_reads(fake_backend))
        fake_backend.close()
    facts["timings"].update(timings)
    assert all(t["reads"] == _TIMED_READS for t in timings.values())
