"""Exponential backoff: the ceiling doubles to a cap, the jitter lies in its range."""

from __future__ import annotations

import random

import pytest

from podres_exporter.daemon.backoff import NO_JITTER, Backoff


def test_backoff_grows_with_jitter_and_caps() -> None:
    """Each failure doubles the ceiling up to the cap; the wait lies in [ceiling/2, ceiling]."""
    b, rng = Backoff(1.0, 8.0), random.Random(1)
    for failures, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)):
        waits = {b.delay(failures, rng) for _ in range(50)}
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert len(waits) > 1, "jitter"


def test_backoff_without_jitter_waits_the_ceiling() -> None:
    """NO_JITTER: exactly initial, 2 * initial, ... up to the cap; the rng is not used."""
    b, rng = Backoff(0.2, 5.0, jitter=NO_JITTER), random.Random(1)
    state = rng.getstate()
    waits = [b.delay(n, rng) for n in range(1, 8)]
    assert waits == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    assert rng.getstate() == state


def test_backoff_jitter_range_scales_the_ceiling() -> None:
    """A jitter of (0.8, 1.2) waits 0.8 to 1.2 times the ceiling, the cap included."""
    b, rng = Backoff(0.2, 5.0, jitter=(0.8, 1.2)), random.Random(1)
    for failures, ceiling in ((1, 0.2), (3, 0.8), (6, 5.0), (40, 5.0)):
        waits = {b.delay(failures, rng) for _ in range(50)}
        assert all(0.8 * ceiling <= w <= 1.2 * ceiling for w in waits)
        assert len(waits) > 1, "jitter"


def test_backoff_never_overflows() -> None:
    """Hours of failures in a row (thousands) still wait the cap, never raise."""
    rng = random.Random(1)
    assert Backoff(1.0, 30.0, jitter=NO_JITTER).delay(5000, rng) == 30.0
    assert 15.0 <= Backoff(1.0, 30.0).delay(10**9, rng) <= 30.0
    assert Backoff(200.0, 300.0, jitter=NO_JITTER).delay(1001, rng) == 300.0
    assert Backoff(0.0, 30.0, jitter=NO_JITTER).delay(5000, rng) == 0.0


@pytest.mark.parametrize("jitter", [(1.2, 0.8), (-0.1, 1.0)])
def test_backoff_refuses_a_bad_jitter_range(jitter: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="jitter"):
        Backoff(jitter=jitter)
