"""The bounds of `podres demo` and `podres snapshot` options: exit 2 naming the flag."""

from __future__ import annotations

import pytest

from podres_exporter.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["demo", "--churn-interval", "2h"],
            "invalid value for --churn-interval: '2h' is more than the maximum, 1h",
        ),
        (
            ["demo", "--poll-interval", "61m"],
            "invalid value for --poll-interval (from flag --poll-interval): '61m' is more",
        ),
        (
            ["snapshot", "--kubelet-timeout", "2m"],
            "invalid value for --kubelet-timeout (from flag --kubelet-timeout): '2m' is more",
        ),
        (
            ["snapshot", "--kubelet-max-message-size", "2Gi"],
            "'2Gi' is more than the maximum, 1Gi",
        ),
    ],
)
def test_an_option_over_its_bound_exits_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command that takes a bounded option refuses a value over it, before it starts."""
    assert main([*argv, "--log-format", "console"], {}) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"podres {argv[0]}: error: ")
    assert message in err
