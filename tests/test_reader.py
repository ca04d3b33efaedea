"""Telemetry sources run side by side; a slow or failing one never holds up the others."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from podres_exporter.errors import SourceError
from podres_exporter.reader import SourceRunner
from podres_exporter.telemetry import CpuTimes, SysfsDevices


def test_slow_source_is_stale_and_not_relaunched() -> None:
    """A source past the timeout keeps its last value, marked stale; it is not started twice."""
    gate = threading.Event()
    calls = {"slow": 0}
    first = {"devices": SysfsDevices()}

    def slow() -> Mapping[str, Any]:
        calls["slow"] += 1
        if calls["slow"] > 1:
            gate.wait(5)
        return first

    runner = SourceRunner({"slow": slow, "fast": lambda: {"cpu_times": CpuTimes()}}, timeout_s=0.2)
    runner.start()
    t = runner.collect()
    assert t.sources["slow"].ok and t.devices is not None
    runner.start()
    t = runner.collect()
    assert t.sources["slow"].stale and not t.sources["slow"].ok
    assert "--source-timeout" in (t.sources["slow"].error or "")
    assert t.sources["fast"].ok and t.cpu_times is not None
    assert t.devices is first["devices"], "the last value is still served"
    runner.start()
    runner.collect()
    assert calls["slow"] == 2, "a running source is not launched again"
    gate.set()
    runner.close()


def test_failing_source_keeps_last_value_with_its_error() -> None:
    """A source that raises keeps its last value, stale, with the error; it recovers later."""
    answers: list[Any] = [
        {"cpu_times": CpuTimes()},
        SourceError("cannot read /proc/stat"),
        {"cpu_times": CpuTimes()},
    ]

    def flaky() -> Mapping[str, Any]:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    runner = SourceRunner({"cpu": flaky}, timeout_s=1)
    runner.start()
    assert runner.collect().sources["cpu"].ok
    runner.start()
    t = runner.collect()
    assert not t.sources["cpu"].ok and t.sources["cpu"].stale
    assert "cannot read /proc/stat" in (t.sources["cpu"].error or "")
    assert t.cpu_times is not None
    runner.start()
    assert runner.collect().sources["cpu"].ok
    runner.close()
