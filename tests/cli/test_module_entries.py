"""`python -m podres_exporter.top` and `python -m podres_exporter.deviceplugin` parse as
`podres top` and `podres plugin` do: an unknown flag gets the command's own usage and the
flag it is closest to, exit 2. Each runs as a user runs it, in a process of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import run_in_group


@pytest.mark.parametrize(
    ("module", "usage", "wrong", "meant"),
    [
        ("podres_exporter.top", "usage: podres top ", "--exportr", "--exporter"),
        (
            "podres_exporter.deviceplugin",
            "usage: python -m podres_exporter.deviceplugin ",
            "--device-plugin-dirs",
            "--device-plugin-dir",
        ),
    ],
)
def test_an_unknown_flag_of_a_module_entry_gets_its_usage_and_a_suggestion(
    module: str, usage: str, wrong: str, meant: str
) -> None:
    """An unknown flag: exit 2, the command's usage (its own flags), "did you mean"."""
    proc = run_in_group(
        [sys.executable, "-m", module, wrong, "x"], timeout=60, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(usage), proc.stderr
    assert meant in proc.stderr.split("error:")[0], "the usage lists the command's flags"
    assert f"error: unrecognized arguments: {wrong} x (did you mean {meant}?)" in proc.stderr
    assert "Traceback" not in proc.stderr
