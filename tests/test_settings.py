"""Settings precedence (flags > env > file > defaults) and clear errors on bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from podres_exporter.cli import main
from podres_exporter.errors import ConfigError
from podres_exporter.options import parse_duration, parse_listen_address, parse_size
from podres_exporter.settings import build

NAMES = ("cpu", "devices")


def test_defaults() -> None:
    """With nothing set, the documented defaults apply."""
    s = build({}, {})
    assert s.kubelet_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert s.poll_interval_s == 10.0
    assert s.kubelet_max_message_bytes == 16 * 2**20
    assert s.listen_address == ("0.0.0.0", 9842)


def test_flag_beats_env_beats_file(tmp_path: Path) -> None:
    """A flag wins over PODRES_* which wins over the config file."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('poll-interval = "30s"\nlog-level = "debug"\n[path]\nsysfs = "/host/sys"\n')
    env = {"PODRES_POLL_INTERVAL": "20s", "PODRES_PATH_SYSFS": "/env/sys"}
    s = build({"--poll-interval": "5s"}, env, config_path=str(cfg))
    assert s.poll_interval_s == 5.0
    assert s.path_sysfs == "/env/sys"
    assert s.log_level == "debug"
    s2 = build({}, {}, config_path=str(cfg))
    assert (s2.poll_interval_s, s2.path_sysfs) == (30.0, "/host/sys")


def test_collector_switches_from_every_source(tmp_path: Path) -> None:
    """collector.NAME from file, PODRES_COLLECTOR_NAME and --no-collector.NAME all apply."""
    cfg = tmp_path / "c.toml"
    cfg.write_text("[collector]\ncpu = false\n")
    assert build({}, {}, config_path=str(cfg), collector_names=NAMES).collector_overrides == {
        "cpu": False
    }
    s = build(
        {},
        {"PODRES_COLLECTOR_DEVICES": "off"},
        config_path=str(cfg),
        collector_names=NAMES,
        collector_flags={"cpu": True},
    )
    assert s.collector_overrides == {"cpu": True, "devices": False}


@pytest.mark.parametrize(
    ("flags", "env", "needle"),
    [
        ({"--poll-interval": "soon"}, {}, "--poll-interval (from flag --poll-interval)"),
        ({}, {"PODRES_POLL_INTERVAL": "-1s"}, "environment variable PODRES_POLL_INTERVAL"),
        ({"--listen-address": "9842"}, {}, "--listen-address"),
        ({"--kubelet-max-message-size": "lots"}, {}, "--kubelet-max-message-size"),
        ({"--log-level": "loud"}, {}, "--log-level"),
    ],
)
def test_bad_values_name_the_flag_and_source(
    flags: dict[str, str], env: dict[str, str], needle: str
) -> None:
    """A bad value raises ConfigError naming the flag and where it came from."""
    with pytest.raises(ConfigError, match="invalid value") as info:
        build(flags, env)
    assert needle in str(info.value)


def test_malformed_config_file_names_the_file(tmp_path: Path) -> None:
    """Invalid TOML is a ConfigError that names the file."""
    cfg = tmp_path / "bad.toml"
    cfg.write_text("poll-interval = [unterminated\n")
    with pytest.raises(ConfigError, match=r"bad\.toml.*not valid TOML"):
        build({}, {}, config_path=str(cfg))


def test_unknown_config_key_is_named(tmp_path: Path) -> None:
    """A key we do not know is an error naming it, not silently ignored."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('poll-intervall = "5s"\n')
    with pytest.raises(ConfigError, match="unknown key 'poll-intervall'"):
        build({}, {}, config_path=str(cfg))


def test_cli_exits_2_on_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`podres export --config BAD` exits 2 and says which file and why."""
    cfg = tmp_path / "bad.toml"
    cfg.write_text("=\n")
    assert main(["export", "--config", str(cfg)], env={}) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "error" in err


def test_cli_exits_2_on_missing_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A config file that does not exist is named in the error."""
    assert main(["snapshot", "--config", str(tmp_path / "nope.toml")], env={}) == 2
    assert "nope.toml" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10.0), ("500ms", 0.5), ("1m", 60.0), ("2.5", 2.5), ("1h", 3600.0)]
)
def test_durations(text: str, seconds: float) -> None:
    """Durations accept ms/s/m/h and bare seconds."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("16Mi", 16 * 2**20),
        ("64MiB", 64 * 2**20),
        (" 16 Mi ", 16 * 2**20),
        ("4194304", 4194304),
        ("100B", 100),
        ("2Ki", 2048),
        ("1Gi", 2**30),
        ("4K", 4000),
        ("4KB", 4000),
        ("5M", 5 * 10**6),
        ("1G", 10**9),
    ],
)
def test_size_forms(text: str, size: int) -> None:
    """Sizes are whole bytes with Ki/Mi/Gi or K/M/G, an optional B and spaces."""
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "1.5Mi", "16k", "16Ti", "Mi", "-1", "16 M i", ""])
def test_sizes_refused(text: str) -> None:
    """Anything else is not a size, and the message says so with examples."""
    with pytest.raises(ValueError, match=r"is not a size \(examples: 16Mi, 4194304\)"):
        parse_size(text)


@pytest.mark.parametrize("text", ["0", "0Mi", "0KB"])
def test_a_size_must_be_positive(text: str) -> None:
    """A zero size is refused as such."""
    with pytest.raises(ValueError, match="must be greater than zero"):
        parse_size(text)


def test_sizes_and_addresses() -> None:
    """Sizes take binary and decimal suffixes; addresses take :PORT, HOST:PORT and [v6]:PORT."""
    assert parse_size("16Mi") == 16 * 2**20
    assert parse_size("4194304") == 4194304
    assert parse_listen_address("127.0.0.1:80") == ("127.0.0.1", 80)
    assert parse_listen_address("[::1]:9842") == ("::1", 9842)
    with pytest.raises(ValueError, match="brackets"):
        parse_listen_address("::1:9842")
