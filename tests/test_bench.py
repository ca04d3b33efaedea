"""bench/bench.py --quick runs to the end and prints every row of its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # runs the benchmark and its simulated kubelets as processes
def test_quick_benchmark_prints_every_row() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench.py"), "--quick", "--repeat", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("scenario"))
    assert set(lines[head + 1]) == {"-"}
    rows = {line.split()[0]: line.split() for line in lines[head + 2 : head + 4]}
    assert set(rows) == {"small", "large"}
    assert rows["small"][1] == "20"
    assert rows["large"][1] == "500"
    for cells in rows.values():
        assert any(c.endswith("x") or c == "!" for c in cells)  # the ratio to floor 2
    assert any(line.startswith("floor 1:") for line in lines[head + 4 :])
