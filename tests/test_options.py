"""The option machinery: bounded durations and sizes, strict value types, relations between
settings, and config files that cannot be read as TOML."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.errors import ConfigError
from podres_exporter.options import (
    MAX_DURATION_S,
    Option,
    check_at_most,
    duration,
    format_duration,
    format_size,
    parse_bool,
    parse_duration,
    parse_listen_address,
    parse_path,
    parse_patterns,
    parse_size,
    read_toml,
    resolve_all,
    size,
)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(3600.0, "1h"), (7200.0, "2h"), (60.0, "1m"), (90.0, "90s"), (0.5, "500ms"), (1.0, "1s")],
)
def test_durations_are_shown_in_their_largest_exact_unit(seconds: float, shown: str) -> None:
    """format_duration: the unit a bound is written in, exactly."""
    assert format_duration(seconds) == shown
    assert parse_duration(shown) == seconds


@pytest.mark.parametrize(
    ("size_", "shown"), [(2**30, "1Gi"), (16 * 2**20, "16Mi"), (2048, "2Ki"), (1000, "1000")]
)
def test_sizes_are_shown_in_their_largest_exact_unit(size_: int, shown: str) -> None:
    """format_size: binary units, exactly."""
    assert format_size(size_) == shown
    assert parse_size(shown) == size_


def test_a_bounded_duration_takes_its_bound_and_refuses_more() -> None:
    """duration(max_s): the bound itself passes, anything above is refused naming it."""
    parse = duration(max_s=60.0)
    assert parse("1m") == 60.0
    assert parse(60) == 60.0
    with pytest.raises(ValueError, match=r"'61s' is more than the maximum, 1m"):
        parse("61s")
    assert parse.limit == "max 1m"


@pytest.mark.parametrize("text", ["99999999999999999h", "1" + "0" * 400, "2562047788015215h"])
def test_no_duration_can_overflow_a_wait(text: str) -> None:
    """Whatever the bound, no duration parsed is infinite or beyond threading.TIMEOUT_MAX."""
    with pytest.raises(ValueError, match="more than the maximum"):
        parse_duration(text)
    assert MAX_DURATION_S < threading.TIMEOUT_MAX


def test_a_bounded_size_takes_its_bound_and_refuses_more() -> None:
    """size(max_bytes): gRPC's 2 GiB is refused by a 1Gi bound, 1Gi passes."""
    parse = size(max_bytes=2**30)
    assert parse("1Gi") == 2**30
    with pytest.raises(ValueError, match=r"'2Gi' is more than the maximum, 1Gi"):
        parse("2Gi")
    with pytest.raises(ValueError, match="more than the maximum"):
        parse(2**31 - 1)


@pytest.mark.parametrize(
    ("parse", "value", "message"),
    [
        (parse_duration, [1], 'expected a duration such as "10s", got an array'),
        (parse_duration, {"a": 1}, "got a table"),
        (parse_duration, True, "got a boolean"),
        (parse_size, 1.5, 'expected a size such as "16Mi", got the number 1.5'),
        (parse_path, ["/a"], "expected a path, got an array"),
        (parse_path, 5, "expected a path, got the number 5"),
        (parse_listen_address, 9842, "got the number 9842"),
        (parse_bool, 1, "expected true or false, got the number 1"),
        (parse_patterns, 3, "got the number 3"),
        (parse_patterns, [1], "got the number 1"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_its_type(
    parse: Any, value: object, message: str
) -> None:
    """A config file's array, table, number or boolean where another type belongs is
    refused, never turned into its text (``str(["/a"])`` is no path)."""
    with pytest.raises(ValueError) as info:
        parse(value)
    assert message in str(info.value)


def test_patterns_may_be_an_array() -> None:
    """gpu-resources as a TOML array: each item may itself be comma-separated."""
    assert parse_patterns(["nvidia.com/*", "amd.com/gpu,x.com/y"]) == (
        "nvidia.com/*",
        "amd.com/gpu",
        "x.com/y",
    )


LOW = Option("--low", "low", duration(max_s=600.0), 1.0, "")
HIGH = Option("--high", "high", duration(max_s=600.0), 30.0, "")


def test_a_relation_names_both_keys_and_where_each_value_came_from(tmp_path: Path) -> None:
    """check_at_most: the error names both flags, their values and their origins."""
    values, origins = resolve_all(
        (LOW, HIGH), {"--low": "2m"}, {}, {"high": "90s"}, str(tmp_path / "c.toml")
    )
    with pytest.raises(ConfigError) as info:
        check_at_most(LOW, HIGH, values, origins, "the first is the smaller")
    assert str(info.value) == (
        f"--low (2m, from flag --low) is more than --high (90s, from key 'high' of config "
        f"file {tmp_path / 'c.toml'}): the first is the smaller"
    )
    values, origins = resolve_all((LOW, HIGH), {"--low": "90s"}, {}, {"high": "90s"}, "c")
    check_at_most(LOW, HIGH, values, origins, "equal is fine")


def test_the_help_states_default_bound_and_variable() -> None:
    """Option.shown: what the help appends, with the bound the parser enforces."""
    opt = Option("--poll-interval", "p", duration(max_s=3600.0), 10.0, "Time.")
    assert opt.shown() == " [default 10s; max 1h; env PODRES_POLL_INTERVAL]"
    sized = Option("--max-message", "m", size(max_bytes=2**30), 16 * 2**20, "Bytes.")
    assert sized.shown() == " [default 16Mi; max 1Gi; env PODRES_MAX_MESSAGE]"
    plain = Option("--path.sysfs", "s", parse_path, "/sys", "Root.")
    assert plain.shown() == " [default /sys; env PODRES_PATH_SYSFS]"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('poll-interval = "10s"\n'.encode("utf-16"), "is not UTF-8 text (byte 0)"),
        ('log-level = "d\xe9bug"\n'.encode("latin-1"), "is not UTF-8 text (byte 14)"),
        ('poll-interval = "10s"\n'.encode("utf-16-le"), "is not valid TOML"),
        (b"poll-interval = [unterminated\n", "is not valid TOML"),
    ],
    ids=["utf-16", "latin-1", "utf-16-without-bom", "syntax"],
)
def test_a_file_that_is_not_utf8_toml_names_the_file(
    tmp_path: Path, content: bytes, message: str
) -> None:
    """read_toml: a file in another encoding, or not TOML, is a ConfigError naming it."""
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        read_toml(str(path))
    assert str(info.value).startswith(f"config file {path} (--config) ")
    assert message in str(info.value)
