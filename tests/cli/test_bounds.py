"""The bounds of `podres demo`, `podres snapshot` and `podres export` options, and config
files that are no config file: exit 2 naming the flag or the file, never a traceback."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podres_exporter.cli import main
from tests.support import NOT_CONFIG_FILES, NOT_CONFIG_IDS


@pytest.fixture(autouse=True)
def hangup_restored() -> Iterator[None]:
    """The daemon commands ignore SIGHUP first thing; the test process gets its own back."""
    previous = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, previous)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["demo", "--churn-interval", "2h"],
            "invalid value for --churn-interval (from flag --churn-interval): '2h' is more than "
            "the maximum, 1h",
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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["export", "--poll-interval", "0.0001ms"],
            "invalid value for --poll-interval (from flag --poll-interval): '0.0001ms' is less "
            "than the minimum, 50ms",
        ),
        (
            ["demo", "--poll-interval", "10ms"],
            "'10ms' is less than the minimum, 50ms",
        ),
        (
            ["export", "--kubelet-timeout", "1ms"],
            "invalid value for --kubelet-timeout (from flag --kubelet-timeout): '1ms' is less "
            "than the minimum, 100ms",
        ),
        (
            ["snapshot", "--source-timeout", "1ms"],
            "'1ms' is less than the minimum, 100ms",
        ),
    ],
)
def test_an_option_under_its_floor_exits_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A duration under its floor (a tight poll loop, calls that always time out) is
    refused before anything starts."""
    assert main([*argv, "--log-format", "console"], {}) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"podres {argv[0]}: error: ")
    assert message in err


def test_a_value_of_thousands_of_digits_is_cut_in_the_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The error quotes the first characters of a huge value, not all of them."""
    assert main(["export", "--poll-interval", "9" * 5000], {}) == 2
    err = capsys.readouterr().err
    assert "'9999999999" in err and "(5000 characters) is more than the maximum, 1h" in err
    assert len(err) < 300


def _deep_keys(tmp_path: Path) -> Path:
    path = tmp_path / "deep-keys.toml"
    path.write_text("a" + ".a" * 20000 + " = 1\n")
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [*NOT_CONFIG_FILES, (_deep_keys, "nested too deep")],
    ids=[*NOT_CONFIG_IDS, "deep-keys"],
)
def test_a_config_path_that_is_no_config_file_exits_2(
    tmp_path: Path,
    make: Callable[[Path], Path],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`podres export --config` naming /dev/zero, a FIFO, a directory, more than 1 MiB, or
    TOML nested thousands deep: exit 2, one line naming the file; no MemoryError, no
    RecursionError, no hang."""
    path = make(tmp_path)
    assert main(["export", "--config", str(path)], {}) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"podres export: error: config file {path} (--config)")
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1
