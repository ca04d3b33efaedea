"""`podres plugin --resources FILE` with a resource file that is wrong, and durations past
their bounds: exit status 2, the file and the key named, never a traceback."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podres_exporter.cli import main
from podres_exporter.deviceplugin.config import HEALTH_INTERVAL, XID_UNHEALTHY_FOR
from tests.support import NOT_CONFIG_FILES, NOT_CONFIG_IDS

RESOURCE = """
[[resource]]
name = "intel.com/sriov_vf"
[resource.discover]
kind = "pci"
device = "0x1889"
"""


def run(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = main(["plugin", "--resources", str(path), "--listen-address", "127.0.0.1:0", *flags], {})
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "names"),
    [
        pytest.param(RESOURCE.encode("utf-16"), "is not UTF-8 text", id="utf-16"),
        pytest.param(
            RESOURCE.replace("sriov_vf", "sriov_v\xe9").encode("latin-1"),
            "is not UTF-8 text",
            id="latin-1",
        ),
        pytest.param(
            RESOURCE.replace('kind = "pci"', 'kind = "pci'), "is not valid TOML", id="syntax"
        ),
        pytest.param(
            RESOURCE.replace('name = "intel.com/sriov_vf"', "name = 5"),
            "resource[0].name: expected a string, got the number 5",
            id="number-for-string",
        ),
        pytest.param(
            RESOURCE.replace('device = "0x1889"', 'device = ["0x1889"]'),
            "resource[0].discover.device: expected a string, got an array",
            id="array-for-string",
        ),
        pytest.param(
            RESOURCE + "replicas = { n = 2 }\n",
            "resource[0].discover.replicas: unknown key",
            id="table-in-discover",
        ),
        pytest.param(
            RESOURCE.replace("[resource.discover]", "replicas = { n = 2 }\n[resource.discover]"),
            "resource[0].replicas: expected a whole number, got a table",
            id="table-for-number",
        ),
        pytest.param(
            'resource = "intel.com/sriov_vf"\n',
            "resource: expected [[resource]] tables, got the string",
            id="string-for-tables",
        ),
        pytest.param(
            "plugin = 5\n" + RESOURCE,
            "plugin: expected a table, got the number 5",
            id="number-for-table",
        ),
        pytest.param(
            "[plugin]\nhealth_interval = [1]\n" + RESOURCE,
            "plugin.health_interval: expected a duration",
            id="array-for-duration",
        ),
        pytest.param(
            '[plugin]\nhealth_interval = "2m"\n' + RESOURCE,
            "plugin.health_interval: '2m' is more than the maximum, 1m",
            id="health-over-bound",
        ),
        pytest.param(
            '[plugin]\nxid_unhealthy_for = "25h"\n' + RESOURCE,
            "plugin.xid_unhealthy_for: '25h' is more than the maximum, 24h",
            id="xid-over-bound",
        ),
        pytest.param(
            '[plugin]\nhealth = "1s"\n' + RESOURCE,
            "plugin.health: unknown key",
            id="unknown-plugin-key",
        ),
        pytest.param(
            RESOURCE.replace('kind = "pci"', 'kind = "pci"\nsubsystem = "x"'),
            "resource[0].discover.subsystem: unknown key",
            id="unknown-discover-key",
        ),
    ],
)
def test_a_wrong_resource_file_exits_2_naming_file_and_key(
    tmp_path: Path, content: str | bytes, names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another encoding, not TOML, a value of the wrong type, a bound passed or an unknown
    key: exit 2, one line naming the file and the key, no traceback."""
    path = tmp_path / "plugin.toml"
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    code, err = run(path, capsys)
    assert code == 2
    assert err.startswith(
        f"podres plugin: error: resource file {path} (--resources / PODRES_RESOURCES)"
    )
    assert "config file" not in err
    assert names in err and "Traceback" not in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("flag", "value", "bound"),
    [("--health-interval", "61s", "1m"), ("--xid-unhealthy-for", "1441m", "24h")],
)
def test_a_flag_over_its_bound_exits_2_naming_it(
    tmp_path: Path, flag: str, value: str, bound: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plugin's durations have the resource file's bounds on the command line too."""
    path = tmp_path / "plugin.toml"
    path.write_text(RESOURCE)
    code, err = run(path, capsys, flag, value)
    assert code == 2
    assert (
        f"invalid value for {flag} (from flag {flag}): '{value}' is more than the maximum, {bound}"
        in err
    )


def test_the_help_states_the_bounds_and_the_loopback_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`podres plugin --help`: each bound, the resource file's value (or its default) when
    a flag is unset, and the metrics on 127.0.0.1:9843 by default."""
    with pytest.raises(SystemExit):
        main(["plugin", "--help"], {})
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "[default the file's plugin.health_interval, else 500ms; "
        f"{HEALTH_INTERVAL.limit}; env PODRES_HEALTH_INTERVAL]"
    ) in text
    assert (
        "[default the file's plugin.xid_unhealthy_for, else 5m; "
        f"{XID_UNHEALTHY_FOR.limit}; env PODRES_XID_UNHEALTHY_FOR]"
    ) in text
    assert "[default 127.0.0.1:9843; env PODRES_LISTEN_ADDRESS]" in text


@pytest.fixture
def hangup_restored() -> Iterator[None]:
    """`podres plugin` ignores SIGHUP first thing; the test process gets its own back."""
    previous = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, previous)


@pytest.mark.usefixtures("hangup_restored")
@pytest.mark.parametrize(("make", "message"), NOT_CONFIG_FILES, ids=NOT_CONFIG_IDS)
def test_a_resource_file_that_is_no_file_exits_2_naming_it(
    tmp_path: Path,
    make: Callable[[Path], Path],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`podres plugin --resources` naming a device, a FIFO, a directory, more than 1 MiB or
    TOML nested too deep: exit 2 naming the file, no traceback, no hang."""
    path = make(tmp_path)
    code, err = run(path, capsys)
    assert code == 2
    assert err.startswith(
        f"podres plugin: error: resource file {path} (--resources / PODRES_RESOURCES)"
    )
    assert "config file" not in err
    assert message in err and "Traceback" not in err


@pytest.mark.usefixtures("hangup_restored")
def test_a_health_interval_under_its_floor_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--health-interval and [plugin] health_interval: at least 50ms."""
    path = tmp_path / "plugin.toml"
    path.write_text(RESOURCE)
    code, err = run(path, capsys, "--health-interval", "10ms")
    assert code == 2
    assert (
        "invalid value for --health-interval (from flag --health-interval): '10ms' is less "
        "than the minimum, 50ms"
    ) in err
    path.write_text('[plugin]\nhealth_interval = "1ms"\n' + RESOURCE)
    code, err = run(path, capsys)
    assert code == 2
    assert "plugin.health_interval: '1ms' is less than the minimum, 50ms" in err
