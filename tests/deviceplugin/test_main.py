"""Settings precedence, the sub-parser, and run_plugin as the CLI will call it."""

from __future__ import annotations

import argparse
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.core.errors import ConfigError
from podres_exporter.deviceplugin.main import (
    add_plugin_parser,
    plugin_settings,
    run_plugin,
)
from tests.deviceplugin.support import advertised, files, plugin_flags, write_sysfs

CONFIG = """
[plugin]
health_interval = "2s"

[[resource]]
name = "intel.com/sriov_vf"
[resource.discover]
kind = "pci"
device = "0x1889"
"""


def parse(argv: list[str]) -> argparse.Namespace:
    top = argparse.ArgumentParser(prog="podres")
    sub = top.add_subparsers(dest="command", required=True)
    add_plugin_parser(sub)
    return top.parse_args(["plugin", *argv])


def test_flags_win_over_the_environment_which_wins_over_defaults() -> None:
    """--flag beats PODRES_* beats the default; --resources may come from PODRES_RESOURCES."""
    ns = parse(["--path.sysfs", "/host/sys", "--health-interval", "250ms"])
    env = {
        "PODRES_RESOURCES": "/etc/podres/plugin.toml",
        "PODRES_PATH_SYSFS": "/env/sys",
        "PODRES_PATH_DEV": "/host/dev",
        "PODRES_LISTEN_ADDRESS": "127.0.0.1:9999",
    }
    settings = plugin_settings(ns, env)
    assert settings.config_path == "/etc/podres/plugin.toml"
    assert settings.path_sysfs == "/host/sys"
    assert settings.path_dev == "/host/dev"
    assert settings.listen_address == ("127.0.0.1", 9999)
    assert settings.health_interval_s == 0.25
    assert settings.xid_unhealthy_for_s is None  # the resource file decides
    defaults = plugin_settings(parse(["--resources", "x.toml"]), {})
    assert defaults.device_plugin_dir == "/var/lib/kubelet/device-plugins"
    assert defaults.listen_address == ("127.0.0.1", 9843)  # the loopback unless told
    assert (defaults.path_sysfs, defaults.path_dev) == ("/sys", "/dev")


def test_a_bad_environment_value_names_the_variable() -> None:
    """A bad PODRES_* value is a ConfigError naming the flag and the variable."""
    with pytest.raises(ConfigError, match=r"--listen-address .*PODRES_LISTEN_ADDRESS"):
        plugin_settings(parse(["--resources", "x"]), {"PODRES_LISTEN_ADDRESS": "nowhere"})


def test_run_plugin_serves_until_stopped_then_returns_0(
    sockdir: Path, tmp_path: Path, make_kubelet: Any
) -> None:
    """run_plugin registers, serves until its stop event, removes its socket, returns 0;
    the health interval comes from the file unless a flag says otherwise."""
    kubelet = make_kubelet()
    write_sysfs(tmp_path / "sys")
    (tmp_path / "plugin.toml").write_text(CONFIG)
    flags = plugin_flags(
        tmp_path / "plugin.toml", kubelet.directory, tmp_path / "sys", log_format="console"
    )
    ns = parse([*flags, "--log-level", "warning"])
    stop = threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(run_plugin(ns, {}, stop=stop)))
    thread.start()
    assert kubelet.wait_for(lambda: advertised(kubelet, "intel.com/sriov_vf"))
    assert len(advertised(kubelet, "intel.com/sriov_vf") or []) == 4
    stop.set()
    thread.join(timeout=10)
    assert result == [0]
    assert files(kubelet) == ["kubelet.sock"]


def test_run_plugin_returns_2_for_a_bad_resource_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resource file that does not validate: exit status 2, the key on stderr."""
    (tmp_path / "bad.toml").write_text('[[resource]]\nname = "gpu"\n')
    assert run_plugin(parse(["--resources", str(tmp_path / "bad.toml")]), {}) == 2
    assert "resource[0].name: resource name 'gpu' has no domain" in capsys.readouterr().err


def test_run_plugin_returns_2_when_it_cannot_listen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A listen address already in use: exit status 2, the message names --listen-address."""
    (tmp_path / "plugin.toml").write_text(CONFIG)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        ns = parse(
            [
                "--resources",
                str(tmp_path / "plugin.toml"),
                "--device-plugin-dir",
                str(tmp_path),
                "--listen-address",
                f"127.0.0.1:{port}",
            ]
        )
        assert run_plugin(ns, {}) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"podres plugin: error: cannot listen on 127.0.0.1:{port} (--listen-address)"
    )
