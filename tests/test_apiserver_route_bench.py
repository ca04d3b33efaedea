"""bench/apiserver_route.py --quick runs to the end and reads every pod and every event."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support import run_in_group

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # a fake API server in a process of its own, TLS, 500 pods
@pytest.mark.timeout(120)
def test_quick_apiserver_route_benchmark_prints_each_row() -> None:
    """Every row is printed: the list synced all 500 pods and the watch applied each event."""
    done = run_in_group(
        [sys.executable, str(ROOT / "bench" / "apiserver_route.py"), "--quick"],
        timeout=100,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["pods", "500"]
    assert [line[:42].strip() for line in lines[1:]] == [
        "list (JSON of full pods)",
        "first list to synced",
        "resident memory before / after the list",
        "peak resident memory (VmHWM)",
        "one MODIFIED event per pod, applied",
        "current() after a change",
    ]
