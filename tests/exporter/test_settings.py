"""Settings precedence (flags > env > file > defaults) and clear errors on bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from podres_exporter.cli import main
from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon.options import Option
from podres_exporter.daemon.values import (
    Count,
    Duration,
    Size,
    format_duration,
    format_size,
    parse_duration,
    parse_listen_address,
    parse_size,
)
from podres_exporter.exporter.settings import BY_FLAG, OPTIONS, build
from podres_exporter.sources import sysfs

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


@pytest.mark.parametrize(
    "flag",
    [
        "--kubelet-max-pods",
        "--kubelet-max-containers",
        "--kubelet-max-devices",
        "--kubelet-max-cpus",
        "--kubelet-max-entries",
    ],
)
def test_answer_limits_are_settings_of_at_least_one(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each --kubelet-max-* count reaches the client's limits; 0 exits 2 naming the flag."""
    limits = build({flag: "7"}, {}).answer_limits
    attr = flag.removeprefix("--kubelet-max-")
    assert getattr(limits, attr) == 7
    with pytest.raises(ConfigError, match=flag):
        build({flag: "0"}, {})
    assert main(["export", flag, "0"], env={}) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err


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


# ------------------------------------------------------------------------------ bounds

BOUNDED = [o for o in OPTIONS if isinstance(o.parse, Duration | Size | Count)]


def test_every_duration_and_size_has_an_upper_bound() -> None:
    """No option parses a duration or a size without a bound (the bare parsers have none
    a wait could survive)."""
    assert {o.flag for o in BOUNDED} == {
        "--kubelet-max-message-size", "--kubelet-timeout", "--poll-interval",
        "--kubelet-backoff-initial", "--kubelet-backoff-max", "--kubelet-empty-confirm",
        "--source-timeout", "--source-interval.gpu", "--source-interval.gpu-slow",
        "--source-interval.sysfs", "--source-interval.cpu", "--sysfs-open-files",
        "--kubelet-max-pods", "--kubelet-max-containers", "--kubelet-max-devices",
        "--kubelet-max-cpus", "--kubelet-max-entries",
    }  # fmt: skip
    assert not [o.flag for o in OPTIONS if o.parse in (parse_duration, parse_size)]
    assert BY_FLAG["--kubelet-max-message-size"].limit == "max 1Gi"  # gRPC stops at 2 GiB


def _env(opt: Option) -> str:
    """The environment variable of an exporter option (every one has one)."""
    assert opt.env is not None
    return opt.env


def _over(opt: Option) -> str:
    """A value just above ``opt``'s bound."""
    if isinstance(opt.parse, Size):
        return str(opt.parse.max_bytes + 1)
    if isinstance(opt.parse, Count):
        return str(opt.parse.max_count + 1)
    assert isinstance(opt.parse, Duration)
    return f"{opt.parse.max_s + 1:g}s"


@pytest.mark.parametrize("opt", BOUNDED, ids=lambda o: o.flag)
def test_a_value_over_the_bound_names_the_key_wherever_it_came_from(
    opt: Option, tmp_path: Path
) -> None:
    """Above the bound: a ConfigError naming the flag and the flag, variable or file key
    the value came from; the bound itself is accepted."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'{opt.key} = "{_over(opt)}"\n')
    for flags, env, origin in (
        ({opt.flag: _over(opt)}, {}, f"flag {opt.flag}"),
        ({}, {_env(opt): _over(opt)}, f"environment variable {opt.env}"),
        ({}, {}, f"key {opt.key!r} of config file {cfg}"),
    ):
        with pytest.raises(ConfigError) as info:
            build(flags, env, config_path=str(cfg))
        assert f"invalid value for {opt.flag} (from {origin})" in str(info.value)
        assert "more than the maximum" in str(info.value)
    if isinstance(opt.parse, Size):
        at_bound = format_size(opt.parse.max_bytes)
    elif isinstance(opt.parse, Count):
        at_bound = str(opt.parse.max_count)
    else:
        assert isinstance(opt.parse, Duration)
        at_bound = format_duration(opt.parse.max_s)
    relation = {"--kubelet-backoff-initial": {"--kubelet-backoff-max": at_bound}}
    value = getattr(build({opt.flag: at_bound, **relation.get(opt.flag, {})}, {}), opt.attr)
    assert value == opt.parse(at_bound)


def test_sysfs_open_files_takes_a_count_from_zero() -> None:
    """--sysfs-open-files: 4096 by default (the devices source's own default), 0 holds
    none; anything but a whole number is refused naming the flag and the value."""
    opt = BY_FLAG["--sysfs-open-files"]
    assert build({}, {}).sysfs_open_files == sysfs.DEFAULT_OPEN_FILES == 4096
    assert build({opt.flag: "0"}, {}).sysfs_open_files == 0
    assert build({}, {_env(opt): "512"}).sysfs_open_files == 512
    for bad in ("-1", "1.5", "lots", "", "٣"):
        with pytest.raises(ConfigError, match=f"invalid value for {opt.flag} .*whole number"):
            build({opt.flag: bad}, {})


FLOORS = {
    "--poll-interval": "50ms",
    "--kubelet-timeout": "100ms",
    "--source-timeout": "100ms",
    "--kubelet-backoff-initial": "10ms",
    "--kubelet-backoff-max": "100ms",
    "--kubelet-empty-confirm": "100ms",
    "--source-interval.gpu-slow": "1s",
}
# Durations where 0 has a meaning ("every poll"): no floor, and 0 is taken.
ZERO_OK = ("--source-interval.gpu", "--source-interval.sysfs", "--source-interval.cpu")


def test_every_duration_has_a_floor() -> None:
    """No duration option takes a value that would only load the kubelet or fail every
    call: each has the floor its help states."""
    floors = {
        o.flag: o.parse.min_s
        for o in OPTIONS
        if isinstance(o.parse, Duration) and o.flag not in ZERO_OK
    }
    assert floors == {flag: parse_duration(floor) for flag, floor in FLOORS.items()}


@pytest.mark.parametrize("flag", ZERO_OK)
def test_a_source_interval_takes_zero_for_every_poll(flag: str) -> None:
    """0 (the default) reads the source at every poll; any other value up to an hour is
    its least interval; a negative one is refused naming the flag."""
    opt = BY_FLAG[flag]
    assert getattr(build({}, {}), opt.attr) == 0.0
    assert getattr(build({flag: "0"}, {}), opt.attr) == 0.0
    assert getattr(build({}, {_env(opt): "30s"}), opt.attr) == 30.0
    assert opt.parse.limit == "0 or max 1h"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=f"invalid value for {flag} .*-1s"):
        build({flag: "-1s"}, {})


@pytest.mark.parametrize(("flag", "floor"), FLOORS.items(), ids=list(FLOORS))
def test_a_value_under_the_floor_names_the_key_wherever_it_came_from(
    flag: str, floor: str, tmp_path: Path
) -> None:
    """Below the floor: a ConfigError naming the flag, where the value came from and the
    floor; the floor itself is accepted."""
    opt = BY_FLAG[flag]
    under = f"{parse_duration(floor) * 1000 / 2:g}ms"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'{opt.key} = "{under}"\n')
    for flags, env, origin in (
        ({flag: under}, {}, f"flag {flag}"),
        ({}, {_env(opt): under}, f"environment variable {opt.env}"),
        ({}, {}, f"key {opt.key!r} of config file {cfg}"),
    ):
        with pytest.raises(ConfigError) as info:
            build(flags, env, config_path=str(cfg))
        assert str(info.value) == (
            f"invalid value for {flag} (from {origin}): '{under}' is less than the minimum, {floor}"
        )
    low = {"--kubelet-backoff-initial": FLOORS["--kubelet-backoff-initial"]}  # not above
    assert getattr(build({**low, flag: floor}, {}), opt.attr) == parse_duration(floor)


def test_backoff_initial_above_max_names_both(tmp_path: Path) -> None:
    """--kubelet-backoff-initial above --kubelet-backoff-max: one error naming both keys."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('kubelet-backoff-max = "10s"\n')
    with pytest.raises(ConfigError) as info:
        build({}, {"PODRES_KUBELET_BACKOFF_INITIAL": "20s"}, config_path=str(cfg))
    assert str(info.value) == (
        "--kubelet-backoff-initial (20s, from environment variable "
        "PODRES_KUBELET_BACKOFF_INITIAL) is more than --kubelet-backoff-max (10s, from key "
        f"'kubelet-backoff-max' of config file {cfg}): the first wait after a failure cannot "
        "be longer than the longest"
    )


def test_the_help_states_each_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """`podres export --help` shows every bound beside the default."""
    with pytest.raises(SystemExit):
        main(["export", "--help"], env={})
    text = " ".join(capsys.readouterr().out.split())
    assert "[default 16Mi; max 1Gi; env PODRES_KUBELET_MAX_MESSAGE_SIZE]" in text
    assert "[default 10s; min 50ms; max 1h; env PODRES_POLL_INTERVAL]" in text
    assert "[default 10s; min 100ms; max 1m; env PODRES_KUBELET_TIMEOUT]" in text
    assert "gRPC cannot take 2Gi" in text


# ------------------------------------------------------------------------- config files


@pytest.mark.parametrize(
    ("content", "names"),
    [
        pytest.param('poll-interval = "10s"\n'.encode("utf-16"), "is not UTF-8 text", id="utf-16"),
        pytest.param(
            'kubelet-socket = "/r\xe9el.sock"\n'.encode("latin-1"),
            "is not UTF-8 text",
            id="latin-1",
        ),
        pytest.param(b'poll-interval = "10s\n', "is not valid TOML", id="syntax"),
        pytest.param(
            b'kubelet-socket = ["/a.sock"]\n',
            "--kubelet-socket (from key 'kubelet-socket'",
            id="list-for-path",
        ),
        pytest.param(
            b"poll-interval = { seconds = 10 }\n",
            "key 'poll-interval': expected a value",
            id="table-for-duration",
        ),
        pytest.param(
            b"kubelet-timeout = {}\n",
            "--kubelet-timeout (from key 'kubelet-timeout'",
            id="empty-table",
        ),
        pytest.param(
            b"log-level = 3\n", "--log-level (from key 'log-level'", id="number-for-string"
        ),
        pytest.param(
            b'path = "/host/sys"\n', "key 'path': expected a table ([path])", id="string-for-table"
        ),
        pytest.param(
            b"[path]\nsysfs = 1\n", "--path.sysfs (from key 'path.sysfs'", id="number-for-path"
        ),
        pytest.param(
            b'[collector]\ncpu = "maybe"\n',
            "--collector.cpu (from key 'collector.cpu'",
            id="string-for-bool",
        ),
        pytest.param(b'poll-intervall = "5s"\n', "unknown key 'poll-intervall'", id="unknown-key"),
        pytest.param(
            b'kubelet-max-message-size = "2Gi"\n',
            "(from key 'kubelet-max-message-size'",
            id="over-bound",
        ),
    ],
)
def test_a_wrong_config_file_exits_2_naming_file_and_key(
    tmp_path: Path, content: bytes, names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`podres export --config FILE`: a file in another encoding, not TOML, with a value
    of the wrong type or an unknown key exits 2 naming the file and the key; no traceback."""
    cfg = tmp_path / "exporter.toml"
    cfg.write_bytes(content)
    assert main(["export", "--config", str(cfg)], env={}) == 2
    err = capsys.readouterr().err
    assert err.startswith("podres export: error: ")
    assert str(cfg) in err and names in err
    assert "Traceback" not in err


def test_the_kubelets_files_default_to_its_root_directory() -> None:
    """Unset, --kubelet-config and --kubelet-device-checkpoint are in the directory that
    holds the socket's directory; set, they are what was given."""
    s = build({"--kubelet-socket": "/var/snap/k/kubelet/pod-resources/kubelet.sock"}, {})
    assert s.kubelet_config_path == "/var/snap/k/kubelet/config.yaml"
    assert s.kubelet_device_checkpoint_path == (
        "/var/snap/k/kubelet/device-plugins/kubelet_internal_checkpoint"
    )
    given = build({"--kubelet-config": "/etc/k/c.json"}, {"PODRES_KUBELET_DEVICE_CHECKPOINT": "/x"})
    assert given.kubelet_config_path == "/etc/k/c.json"
    assert given.kubelet_device_checkpoint_path == "/x"
    assert build({}, {}).kubelet_config_path == "/var/lib/kubelet/config.yaml"
