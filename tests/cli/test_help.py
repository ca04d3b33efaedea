"""Every command's help: real placeholders, generated defaults, one declaration per shared flag."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from podres_exporter import collectors
from podres_exporter.cli import DEMO_OPTIONS, SNAPSHOT_OPTIONS, main, parser, settings_from
from podres_exporter.daemon import flags
from podres_exporter.daemon.options import Option
from podres_exporter.deviceplugin.main import PLUGIN_OPTIONS
from podres_exporter.exporter.settings import OPTIONS
from podres_exporter.top.main import INTERVAL, SOURCE_OPTIONS
from podres_sim import __main__ as sim

COMMANDS = ("export", "demo", "snapshot", "plugin", "top", "sim")

TABLES: dict[str, tuple[Option, ...]] = {
    "export": OPTIONS,
    "demo": DEMO_OPTIONS,
    "snapshot": SNAPSHOT_OPTIONS,
    "plugin": PLUGIN_OPTIONS,
    "top": (*SOURCE_OPTIONS, INTERVAL),
    "sim": sim.OPTIONS,
}

SHARED = (
    flags.KUBELET_SOCKET,
    flags.PATH_SYSFS,
    flags.PATH_PROCFS,
    flags.WEB_CONFIG_FILE,
    flags.LOG_LEVEL,
    flags.LOG_FORMAT,
)

# Flags of the same name that are different settings, and why.
NOT_SHARED = {
    "--listen-address": "the exporter serves every interface, the plugin the loopback",
    "--scenario": "the simulator's help lists its scenarios; podres imports it only to run it",
    "--churn-interval": "the demo churns every 5s, the simulator as its scenario says",
}


def help_of(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The ``--help`` of ``command``, its whitespace folded to single spaces."""
    run: Callable[[list[str]], object] = sim.main if command == "sim" else main
    argv = ["--help"] if command == "sim" else [command, "--help"]
    with pytest.raises(SystemExit) as info:
        run(argv)
    assert info.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command", COMMANDS)
def test_the_help_names_what_each_value_is(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No flag shows the placeholder VALUE: each names what it takes (DURATION, PATH ...)."""
    text = help_of(command, capsys)
    assert "VALUE" not in text
    for opt in TABLES[command]:
        if opt.switch:  # takes no value: one --[no-]NAME
            assert f"--[no-]{opt.flag.removeprefix('--')}" in text
        else:
            assert f"{opt.flag} {opt.placeholder}" in text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_default_in_the_help_is_generated(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A default appears only in the [default ...] the declaration generates, never in prose."""
    text = help_of(command, capsys)
    assert re.findall(r".{30}(?<!\[)default.{20}", text, re.IGNORECASE) == []
    for opt in TABLES[command]:
        if opt.default is not None:
            assert f"[default {opt.format(opt.default)}" in text


@pytest.mark.parametrize("command", ["export", "demo"])
def test_each_collector_switch_is_one_flag(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--[no-]collector.NAME, once per collector, with its default and its variable."""
    text = help_of(command, capsys)
    assert "--no-collector." not in text
    for c in collectors.ALL:
        state = "on" if c.default_enabled else "off"
        env = f"PODRES_COLLECTOR_{c.name.upper()}"
        assert re.search(rf"--\[no-\]collector\.{c.name} .*?\[default {state}; env {env}\]", text)


def test_both_spellings_of_a_switch_parse() -> None:
    """--collector.NAME turns a collector on, --no-collector.NAME off; the rest keep theirs."""
    ns = parser().parse_args(["export", "--no-collector.gpu", "--collector.cpu"])
    assert settings_from(ns, {}).collector_overrides == {"gpu": False, "cpu": True}


@pytest.mark.parametrize("shared", SHARED, ids=[o.flag for o in SHARED])
def test_a_shared_flag_is_the_same_declaration_everywhere(shared: Option) -> None:
    """Every command that takes a shared flag takes that very declaration."""
    takers = [name for name, table in TABLES.items() if shared in table]
    assert len(takers) >= 2
    for table in TABLES.values():
        for opt in table:
            assert opt.flag != shared.flag or opt is shared


def test_a_flag_of_two_commands_is_declared_once() -> None:
    """A flag name in two tables is one declaration, unless it names two different settings."""
    seen: dict[str, Option] = {}
    for table in TABLES.values():
        for opt in table:
            first = seen.setdefault(opt.flag, opt)
            assert first is opt or opt.flag in NOT_SHARED, opt.flag


@pytest.mark.parametrize("shared", SHARED, ids=[o.flag for o in SHARED])
def test_a_shared_flag_reads_the_same_in_every_help(
    shared: Option, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shared flag's help line is the same text in every command that takes it."""
    line = f"{shared.flag} {shared.placeholder} {shared.help}{shared.shown()}"
    for command, table in TABLES.items():
        if shared in table:
            assert line in help_of(command, capsys), command
