"""Logging set-up: every event's size is bounded, and console lines are terminal-safe."""

from __future__ import annotations

import io
import json

import structlog

from podres_exporter.daemon import logconf, process


def json_events(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_long_strings_and_long_lists_are_cut_with_what_was_left_out() -> None:
    """A 1 MB value, a 10,000-item list, a big mapping and nested lists: one line of a few
    KB that says how much was left out."""
    out = io.StringIO()
    process.configure_logging("info", "json", stream=out)
    structlog.get_logger("t").warning(
        "allocate_refused",
        error="unknown device ids: " + "x" * 1_000_000,
        devices=[f"dev{i}" for i in range(10_000)],
        by_id={f"id{i}": i for i in range(1000)},
        nested=[["y" * 2000] * 100] * 100,
        small=["a", "b"],
        count=7,
    )
    text = out.getvalue()
    assert len(text.splitlines()) == 1
    assert len(text) < 64_000
    (event,) = json_events(out)
    error = event["error"]
    assert isinstance(error, str)
    assert error.startswith("unknown device ids: xxx")
    assert error.endswith(f"…(+{1_000_020 - logconf.MAX_STRING} chars)")
    devices = event["devices"]
    assert isinstance(devices, list)
    assert devices[: logconf.MAX_ITEMS] == [f"dev{i}" for i in range(logconf.MAX_ITEMS)]
    assert devices[-1] == f"+{10_000 - logconf.MAX_ITEMS} more"
    by_id = event["by_id"]
    assert isinstance(by_id, dict)
    assert len(by_id) == logconf.MAX_ITEMS + 1
    assert by_id["…"] == f"+{1000 - logconf.MAX_ITEMS} more"
    assert (event["small"], event["count"]) == (["a", "b"], 7), "small values stay exact"


def test_a_huge_exception_message_is_cut_too() -> None:
    """An exception whose text is 1 MB: its traceback is logged, bounded."""
    out = io.StringIO()
    process.configure_logging("info", "json", stream=out)
    try:
        raise ValueError("bad id " + "z" * 1_000_000)
    except ValueError:
        structlog.get_logger("t").exception("plugin_loop_error")
    (event,) = json_events(out)
    exception = event["exception"]
    assert isinstance(exception, str)
    assert exception.startswith("Traceback (most recent call last):")
    assert "ValueError: bad id zzz" in exception
    assert len(exception) < logconf.MAX_TRACEBACK + 100
    assert "chars)" in exception


def test_console_lines_escape_control_characters() -> None:
    """A console line (a terminal's) shows escape sequences, C1 and bidi controls escaped,
    in values, in lists and in line breaks alike: one line per event."""
    out = io.StringIO()
    logconf.configure("info", stream=out, json=False)
    structlog.get_logger("t").error(
        "kubelet_error",
        error="boom\x1b[2J\x1b]52;c;eA\x07\x9b\u202e",
        detail="two\nlines, \x1b[31mred",
        ids=["a\rb"],
    )
    line = out.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    assert line[:-1].isprintable()
    assert r"error=boom\x1b[2J\x1b]52;c;eA\x07\x9b\u202e" in line
    assert r"\nlines" in line and r"x1b[31mred" in line
    assert r"a\rb" in line


def test_json_lines_stay_exact_below_the_bounds() -> None:
    """JSON already escapes control characters: short values round-trip exactly."""
    out = io.StringIO()
    process.configure_logging("info", "json", stream=out)
    value = "boom\x1b[2J\u202e\n"
    structlog.get_logger("t").info("kubelet_error", error=value, ids=("a", "b"))
    (event,) = json_events(out)
    assert (event["error"], event["ids"]) == (value, ["a", "b"])
    assert out.getvalue()[:-1].isprintable()
