"""The option machinery: bounded durations and sizes, strict value types, relations between
settings, and config files that cannot be read as TOML."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon.options import (
    Option,
    check_at_most,
    given,
    read_toml,
    resolve,
    resolve_all,
)
from podres_exporter.daemon.values import (
    MAX_DURATION_S,
    duration,
    format_duration,
    format_size,
    parse_bool,
    parse_duration,
    parse_listen_address,
    parse_log_level,
    parse_path,
    parse_patterns,
    parse_size,
    size,
)
from tests.support import (
    NOT_CONFIG_FILES,
    NOT_CONFIG_IDS,
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


def test_an_option_reaches_the_command_line_with_its_parsers_placeholder() -> None:
    """Option.add_to: the metavar comes from the parser, the help ends with the generated
    part, and only a flag given lands in what :func:`given` returns."""
    opt = Option("--poll-interval", "p", duration(max_s=3600.0), 10.0, "Time.")
    path = Option("--path.sysfs", "s", parse_path, "/sys", "Root.")
    p = argparse.ArgumentParser(prog="x")
    action = opt.add_to(p)
    path.add_to(p)
    assert action.metavar == "DURATION" and action.help == "Time." + opt.shown()
    assert "--poll-interval DURATION" in p.format_help()
    assert given(p.parse_args(["--path.sysfs", "/h"]), (opt, path)) == {"--path.sysfs": "/h"}


def test_a_parser_without_a_placeholder_must_be_given_one() -> None:
    """A parser the machinery does not know needs the option's own metavar."""
    opt = Option("--url", "url", str.strip, None, "Where.")
    with pytest.raises(TypeError, match="--url: name its metavar"):
        opt.add_to(argparse.ArgumentParser())
    named = Option("--url", "url", str.strip, None, "Where.", metavar="URL")
    assert named.placeholder == "URL"


def test_a_switch_is_one_flag_with_two_spellings() -> None:
    """A switch shows as --[no-]NAME; --NAME gives True, --no-NAME False, neither None."""
    opt = Option("--collector.gpu", "gpu", parse_bool, True, "Collect.", switch=True)
    p = argparse.ArgumentParser(prog="x")
    opt.add_to(p)
    assert "[--[no-]collector.gpu]" in p.format_usage()
    text = " ".join(p.format_help().split())
    assert "--[no-]collector.gpu Collect. [default on; env PODRES_COLLECTOR_GPU]" in text
    assert given(p.parse_args(["--collector.gpu"]), [opt]) == {"--collector.gpu": True}
    assert given(p.parse_args(["--no-collector.gpu"]), [opt]) == {"--collector.gpu": False}
    assert given(p.parse_args([]), [opt]) == {}


def test_the_help_says_what_an_unset_option_means_and_whether_it_has_a_variable() -> None:
    """``fallback`` stands for a default that lives elsewhere; without an ``env_prefix``
    the option has no variable: the help names none and the environment is not read."""
    opt = Option("--every", "e", duration(max_s=60.0), None, "", fallback="the file's, else 1s")
    assert opt.shown() == " [default the file's, else 1s; max 1m; env PODRES_EVERY]"
    own = Option("--socket", "s", parse_path, None, "", env_prefix=None)
    assert own.env is None and own.shown() == ""
    assert resolve(own, {}, {"PODRES_SOCKET": "/s", "None": "/s"}) is None
    top = Option("--interval", "i", duration(max_s=60.0), 2.0, "", env_prefix="PODRES_TOP_")
    assert resolve(top, {}, {"PODRES_TOP_INTERVAL": "5s"}) == 5.0


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


# ------------------------------------------------------------------ lower bounds, long values


def test_a_duration_with_a_floor_takes_it_and_refuses_less() -> None:
    """duration(min_s, max_s): the floor passes, less is refused naming it; the help shows
    both bounds."""
    parse = duration(min_s=0.1, max_s=60.0)
    assert parse("100ms") == 0.1
    with pytest.raises(ValueError, match=r"'0.0001ms' is less than the minimum, 100ms"):
        parse("0.0001ms")
    with pytest.raises(ValueError, match="less than the minimum, 100ms"):
        parse(0.05)
    assert parse.limit == "min 100ms; max 1m"
    opt = Option("--kubelet-timeout", "t", parse, 10.0, "Deadline.")
    assert opt.shown() == " [default 10s; min 100ms; max 1m; env PODRES_KUBELET_TIMEOUT]"
    with pytest.raises(ValueError, match="min_s"):
        duration(min_s=2.0, max_s=1.0)


@pytest.mark.parametrize(
    ("parse", "value"),
    [
        (duration(max_s=60.0), "1" * 5000),
        (duration(max_s=60.0), "9" * 5000 + "ms"),
        (duration(max_s=60.0), 10**5000),
        (size(max_bytes=2**30), "7" * 5000),
        (size(max_bytes=2**30), "7" * 5000 + "Mi"),
        (size(max_bytes=2**30), 10**5000),
        (parse_listen_address, ":" + "9" * 5000),
        (parse_log_level, "x" * 5000),
    ],
    ids=["digits", "digits-ms", "int", "size", "size-mi", "size-int", "port", "level"],
)
def test_a_value_of_thousands_of_digits_is_refused_without_echoing_it(
    parse: Callable[[Any], Any], value: Any
) -> None:
    """A huge value is refused with a short message: its first characters at most, and
    never CPython's note on integer-string conversion."""
    with pytest.raises(ValueError) as info:
        parse(value)
    message = str(info.value)
    assert len(message) < 200, message
    assert "sys.set_int_max_str_digits" not in message and "Exceeds the limit" not in message


@pytest.mark.parametrize(("make", "message"), NOT_CONFIG_FILES, ids=NOT_CONFIG_IDS)
def test_a_config_path_that_is_no_config_file_is_refused_naming_it(
    tmp_path: Path, make: Callable[[Path], Path], message: str
) -> None:
    """read_toml: a device, a FIFO (never waited on), a directory, more than 1 MiB, nesting
    deeper than the parser's recursion, an integer of thousands of digits: a ConfigError
    naming the file and why, never a MemoryError, a hang or a RecursionError."""
    path = make(tmp_path)
    with pytest.raises(ConfigError) as info:
        read_toml(str(path))
    assert str(info.value).startswith(f"config file {path} (--config)")
    assert message in str(info.value)


def test_a_config_path_with_a_nul_byte_is_refused() -> None:
    """A NUL in the path (a ValueError from open) is a ConfigError too."""
    with pytest.raises(ConfigError, match="the path holds a NUL byte"):
        read_toml("/etc/x\0.toml")


def test_a_config_file_of_exactly_1mib_is_read(tmp_path: Path) -> None:
    """The bound itself is accepted."""
    path = tmp_path / "full.toml"
    body = b'poll-interval = "10s"\n'
    path.write_bytes(body + b"#" * (2**20 - len(body) - 1) + b"\n")
    assert read_toml(str(path)) == {"poll-interval": "10s"}
