"""`podres top --interval`: bounded like every duration of the project."""

from __future__ import annotations

import pytest

from podres_exporter.cli import main


@pytest.mark.parametrize(
    ("args", "env", "origin"),
    [
        (["--interval", "2h"], {}, "flag --interval"),
        ([], {"PODRES_TOP_INTERVAL": "99999999999h"}, "environment variable PODRES_TOP_INTERVAL"),
    ],
)
def test_an_interval_over_an_hour_exits_2_naming_it(
    args: list[str], env: dict[str, str], origin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refresh interval over 1h (which would overflow the wait, for the largest) exits 2
    naming the flag or variable and the bound."""
    assert main(["top", "--once", *args], env) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"podres top: error: invalid value for --interval (from {origin}): ")
    assert err.rstrip().endswith("is more than the maximum, 1h")


def test_the_help_states_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """`podres top --help` shows the bound beside the default."""
    with pytest.raises(SystemExit):
        main(["top", "--help"], {})
    assert "default 2s; max 1h; env PODRES_TOP_INTERVAL]" in " ".join(
        capsys.readouterr().out.split()
    )
