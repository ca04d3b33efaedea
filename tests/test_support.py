"""The tests' own helpers: what they promise other tests."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import run_in_group, wait_until


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_run_in_group_leaves_no_grandchild_behind_a_timeout(tmp_path) -> None:
    """A command that times out is killed with everything it started, not only itself."""
    pidfile = tmp_path / "grandchild"
    program = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        run_in_group([sys.executable, "-c", program], timeout=3)
    grandchild = int(pidfile.read_text())
    wait_until(lambda: _gone(grandchild), timeout=5)


def test_run_in_group_returns_what_the_command_printed() -> None:
    """A command that ends by itself gives its exit status and both outputs."""
    done = run_in_group(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); exit(3)"],
        timeout=30,
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
