"""The plugin's /healthz, index page and SIGHUP reload, in-process against the simulated
kubelet's device manager, through the plugin's real HTTP server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from podres_exporter.daemon.values import parse_listen_address
from podres_exporter.deviceplugin.main import (
    DevicePlugin,
    PluginSettings,
    build_plugin,
    load_plugin_config,
)
from podres_sim.kubelet.devicemanager import SimDeviceManager
from tests.deviceplugin.support import accepted, advertised, files, write_sysfs
from tests.support import http_get, started_daemons, wait_until

VF = "intel.com/sriov_vf"
CONFIG = f"""
[plugin]
health_interval = "100ms"

[[resource]]
name = "{VF}"
[resource.discover]
kind = "pci"
vendor = "0x8086"
device = "0x1889"
"""
NIC = """
[[resource]]
name = "example.com/uplink"
[resource.discover]
kind = "netdev"
pattern = "enp175s0f*"
"""


@pytest.fixture
def make_plugin(sockdir: Path, tmp_path: Path) -> Iterator[Callable[..., DevicePlugin]]:
    """The plugin on ``sockdir/plugins`` with a devtree sysfs, its resource file at
    ``tmp_path/plugin.toml``; stopped at teardown."""

    def build() -> DevicePlugin:
        (sockdir / "plugins").mkdir(exist_ok=True)
        path = tmp_path / "plugin.toml"
        path.write_text(CONFIG)
        settings = PluginSettings(
            config_path=str(path),
            device_plugin_dir=str(sockdir / "plugins"),
            listen_address=parse_listen_address("127.0.0.1:0"),
            path_sysfs=str(write_sysfs(tmp_path / "sys")),
            path_dev=str(tmp_path / "dev"),
        )
        return build_plugin(settings, load_plugin_config(settings))

    yield from started_daemons(build)


Running = tuple[SimDeviceManager, DevicePlugin]


@pytest.fixture
def running(make_kubelet: Callable[..., SimDeviceManager], make_plugin: Any) -> Running:
    kubelet = make_kubelet()
    plugin = make_plugin()
    assert kubelet.wait_for(lambda: advertised(kubelet, VF))
    return kubelet, plugin


def test_healthz_fails_when_a_resource_thread_stops(running: Running) -> None:
    """A resource's lifecycle thread gone (it would never register again): 503."""
    _, plugin = running
    assert http_get(plugin.url + "/healthz")[::2] == (200, b"ok\n")
    plugin.manager.plugins[VF].stop()
    assert http_get(plugin.url + "/healthz")[::2] == (503, b"a resource's plugin thread stopped\n")


def test_healthz_fails_when_the_health_loop_stops(running: Running) -> None:
    """The health loop's thread gone: 503, even though PreStartContainer could still run
    a check now and then."""
    _, plugin = running
    plugin.monitor.stop()
    plugin.monitor.check()  # what a PreStartContainer does: not the loop
    assert http_get(plugin.url + "/healthz")[::2] == (503, b"health checks stalled\n")


def test_the_index_names_no_path(running: Running, sockdir: Path) -> None:
    """/ lists the resources, not the device-plugins directory (nor any other path)."""
    _, plugin = running
    status, _, page = http_get(plugin.url + "/")
    assert status == 200 and f"resources: <code>{VF}</code>".encode() in page
    assert str(sockdir).encode() not in page and b"device-plugins" not in page


def test_reload_logs_whether_the_resource_file_changed(running: Running, tmp_path: Path) -> None:
    """reload_config (SIGHUP): unchanged, changed (what, and that a restart applies it)
    or invalid (the running configuration kept); the sockets and registration stay."""
    kubelet, plugin = running
    before = (files(kubelet), len(accepted(kubelet)), plugin.config)
    path = tmp_path / "plugin.toml"
    with capture_logs() as logs:
        plugin.reload_config()
        path.write_text(CONFIG.replace('"100ms"', '"200ms"') + NIC)
        plugin.reload_config()
        path.write_bytes('[[resource]]\nname = "intel.com/v\xe9"\n'.encode("latin-1"))
        plugin.reload_config()
    # The plugin's own threads may log meanwhile (a health check under a loaded machine).
    logs = [e for e in logs if e["event"].startswith("plugin_config_")]
    assert [e["event"] for e in logs] == [
        "plugin_config_unchanged",
        "plugin_config_changed",
        "plugin_config_invalid",
    ]
    changed = logs[1]
    assert changed["added"] == ["example.com/uplink"] and changed["removed"] == []
    assert changed["plugin_settings_changed"] is True
    assert "restart" in changed["applies"]
    assert "not UTF-8" in logs[2]["error"]
    wait_until(lambda: kubelet.connected(VF))
    assert (files(kubelet), len(accepted(kubelet)), plugin.config) == before
    assert http_get(plugin.url + "/healthz")[0] == 200
