"""CPU busy shares: from two readings or a source's rate, and when the baseline moves."""

from __future__ import annotations

import pytest

from podres_exporter.top.rows import (
    BUSY_COUNTER,
    BUSY_RATIO,
    CPU_SOURCE_STAMP,
    Sample,
    advance_baseline,
    build,
    cpu_times_advanced,
    needs_second_reading,
)
from tests.top.rows.support import row
from tests.top.samples import TRAINER, cpu, reading, s


def busy(
    value: float, c: int, stamp: float | None, holder: dict[str, str] = TRAINER
) -> list[Sample]:
    out = [s(BUSY_COUNTER, value, cpu=str(c), numa_node="0", **holder)]
    if stamp is not None:
        out.append(s(CPU_SOURCE_STAMP, stamp, source="cpu"))
    return out


@pytest.mark.parametrize(
    ("before", "after", "at", "expected"),
    [
        # The rise over the time between the two CPU-time reads (the stamps), not between ours.
        ((10.0, 1000.0), (10.5, 1002.0), (0.0, 0.1), 0.25),
        # No stamps: over the time between the two readings.
        ((10.0, None), (10.5, None), (0.0, 2.0), 0.25),
        # The exporter did not read CPU times again: nothing known.
        ((10.0, 1000.0), (10.0, 1000.0), (0.0, 1.0), None),
        # A counter that went back (another holder, a restart): nothing known.
        ((10.0, 1000.0), (2.0, 1001.0), (0.0, 1.0), None),
        # Never above 100%.
        ((10.0, 1000.0), (13.0, 1001.0), (0.0, 1.0), 1.0),
    ],
)
def test_busy_share_from_two_readings(
    before: tuple[float, float | None],
    after: tuple[float, float | None],
    at: tuple[float, float],
    expected: float | None,
) -> None:
    """BUSY is the rise of podres_cpu_busy_seconds_total over the time between CPU-time reads."""
    first = reading(cpu(4, "0", "exclusive", TRAINER), *busy(before[0], 4, before[1]), at=at[0])
    second = reading(cpu(4, "0", "exclusive", TRAINER), *busy(after[0], 4, after[1]), at=at[1])
    assert row(build(second, first), "train-0", "trainer").busy == expected


def test_busy_share_is_the_mean_of_the_containers_cpus_or_a_source_rate() -> None:
    """Several CPUs average; a rate the source computed (Prometheus rate()) is used as is."""
    cpus = [cpu(4, "0", "exclusive", TRAINER), cpu(5, "0", "exclusive", TRAINER)]
    first = reading(*cpus, *busy(0, 4, 1.0), *busy(0, 5, None), at=0)
    second = reading(*cpus, *busy(1.0, 4, 3.0), *busy(0.0, 5, None), at=2)
    assert row(build(second, first), "train-0", "trainer").busy == 0.25
    rated = reading(
        *cpus, s(BUSY_RATIO, 0.5, cpu="4", **TRAINER), s(BUSY_RATIO, 0.7, cpu="5", **TRAINER)
    )
    assert row(build(rated), "train-0", "trainer").busy == pytest.approx(0.6)
    assert not needs_second_reading(rated) and needs_second_reading(second)


def test_baseline_moves_only_when_cpu_times_were_read_again() -> None:
    """An exporter that has not polled serves the same counters: the older baseline stays."""
    r1 = reading(*busy(1, 4, 10.0), at=1)
    r2 = reading(*busy(2, 4, 20.0), at=2)
    r3 = reading(*busy(2, 4, 20.0), at=3)  # same poll of the exporter as r2
    assert cpu_times_advanced(r1, r2) and not cpu_times_advanced(r2, r3)
    assert advance_baseline(None, None, r1) is None
    assert advance_baseline(None, r1, r2) is r1
    assert advance_baseline(r1, r2, r3) is r1
    no_stamps = reading(s("podres_pods", 1), at=4)
    assert advance_baseline(r1, r3, no_stamps) is r3
