"""bench/hostile_answers.py --quick runs to the end and shows each hostile answer trimmed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support import run_in_group

ROOT = Path(__file__).resolve().parent.parent


# The benchmark and its exporter processes run in a process group that the test kills
# however it ends; the benchmark's own child timeout is shorter than the test's.
@pytest.mark.slow  # the fake kubelet and one exporter process per shape
@pytest.mark.timeout(240)
def test_quick_hostile_answers_benchmark_prints_each_shape() -> None:
    """Every shape gets a row; the hostile ones are counted as anomalies, the duplicates
    merged into one pod, and no answer is refused."""
    done = run_in_group(
        [sys.executable, str(ROOT / "bench" / "hostile_answers.py"), "--quick"],
        timeout=200,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert set(rows) == {
        "baseline", "devices", "pods", "allocatable", "duplicates", "full-devices", "full-pods",
    }  # fmt: skip
    assert "devices_over_limit=" in rows["devices"]
    assert "pods_over_limit=" not in rows["pods"]  # a tenth of 200,000 is under the limit
    assert "cpus_over_limit=" in rows["allocatable"]
    assert "duplicate_pod=49" in rows["duplicates"] and rows["duplicates"].split()[6] == "1"
    assert "refused" not in done.stdout
