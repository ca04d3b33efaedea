"""The plugin says what it waits for: a missing or refusing ``kubelet.sock`` is logged at
once, again on a doubling schedule, and the registration that ends the wait is logged."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog

from podres_exporter.daemon.backoff import NO_JITTER, Backoff
from podres_exporter.daemon.values import parse_listen_address
from podres_exporter.deviceplugin.lifecycle import Timing
from podres_exporter.deviceplugin.main import (
    DevicePlugin,
    PluginSettings,
    build_plugin,
    load_plugin_config,
)
from podres_exporter.deviceplugin.registration import WaitReport
from podres_sim.kubelet.devicemanager import SimDeviceManager
from tests.deviceplugin.support import advertised, write_sysfs
from tests.support import started_daemons, wait_until

RESOURCE = "intel.com/sriov_vf"
CONFIG = f"""
[[resource]]
name = "{RESOURCE}"
[resource.discover]
kind = "pci"
vendor = "0x8086"
device = "0x1889"
"""


@pytest.fixture
def make_plugin(sockdir: Path, tmp_path: Path) -> Iterator[Callable[..., DevicePlugin]]:
    """The plugin on ``sockdir/plugins`` (no kubelet there yet), stopped at teardown."""

    def build(timing: Timing | None = None) -> DevicePlugin:
        (sockdir / "plugins").mkdir(exist_ok=True)
        write_sysfs(tmp_path / "sys")
        (tmp_path / "plugin.toml").write_text(CONFIG)
        settings = PluginSettings(
            config_path=str(tmp_path / "plugin.toml"),
            device_plugin_dir=str(sockdir / "plugins"),
            listen_address=parse_listen_address("127.0.0.1:0"),
            path_sysfs=str(tmp_path / "sys"),
            path_dev=str(tmp_path / "dev"),
        )
        return build_plugin(settings, load_plugin_config(settings), timing=timing)

    yield from started_daemons(build)


def events(logs: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    """The captured log events called ``name``, in order."""
    return [e for e in logs if e["event"] == name]


def registration_errors(plugin: DevicePlugin) -> float:
    value = plugin.metrics.registry.get_sample_value(
        "podres_plugin_registrations_total", {"resource": RESOURCE, "result": "error"}
    )
    return value or 0.0


def test_report_schedule_doubles_up_to_its_ceiling() -> None:
    """Reported at the first failure, then 10, 20, 40 s later, never more than 60 s apart."""
    now = [0.0]
    report = WaitReport(Backoff(10.0, 60.0, jitter=NO_JITTER), clock=lambda: now[0])
    reported = []
    for tick in range(0, 400):
        now[0] = float(tick)
        if report.failed("missing") is not None:
            reported.append(tick)
    assert reported == [0, 10, 30, 70, 130, 190, 250, 310, 370]


def test_a_new_cause_is_reported_at_once_and_a_registration_ends_the_wait() -> None:
    """A change of cause is news; a registration says how long the wait was, and the
    next failure starts a new wait, reported at once."""
    now = [0.0]
    report = WaitReport(Backoff(10.0, 60.0, jitter=NO_JITTER), clock=lambda: now[0])
    assert report.failed("missing") == 0.0
    now[0] = 2.0
    assert report.failed("missing") is None
    assert report.failed("connection refused") == 2.0
    now[0] = 3.5
    assert report.succeeded() == 3.5
    assert report.succeeded() is None
    now[0] = 4.0
    assert report.failed("missing") == 0.0


def test_a_missing_kubelet_socket_is_logged_at_once_until_it_registers(
    make_plugin: Callable[..., DevicePlugin], make_kubelet: Callable[..., SimDeviceManager]
) -> None:
    """No kubelet.sock: one warning naming the socket and 'missing' at start-up (not one
    per retry); the kubelet appears: one registration that says how long it waited."""
    with structlog.testing.capture_logs() as logs:
        plugin = make_plugin()
        wait_until(lambda: events(logs, "kubelet_unavailable"))
        (waiting,) = events(logs, "kubelet_unavailable")
        kubelet_sock = Path(plugin.manager.watch.path)
        assert waiting["socket"] == str(kubelet_sock)
        assert waiting["cause"] == "missing"
        assert waiting["resource"] == RESOURCE
        assert waiting["log_level"] == "warning"
        kubelet = make_kubelet()
        assert kubelet.wait_for(lambda: advertised(kubelet, RESOURCE) is not None)
        wait_until(lambda: events(logs, "plugin_registered"))
    (registered,) = events(logs, "plugin_registered")
    assert registered["waited_s"] >= 0
    assert len(events(logs, "kubelet_unavailable")) == 1


def test_a_refusing_kubelet_socket_is_logged_once_per_report_not_per_retry(
    make_plugin: Callable[..., DevicePlugin], sockdir: Path
) -> None:
    """A kubelet.sock nobody listens on: 'connection refused' logged at once; the
    retries that follow within the report interval add no lines."""
    (sockdir / "plugins").mkdir()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sockdir / "plugins" / "kubelet.sock"))  # bound, never listening
    try:
        with structlog.testing.capture_logs() as logs:
            plugin = make_plugin()
            wait_until(lambda: registration_errors(plugin) >= 3)
        (waiting,) = events(logs, "kubelet_unavailable")
        assert waiting["cause"] == "connection refused"
        assert waiting["socket"] == str(sockdir / "plugins" / "kubelet.sock")
        assert "Connection refused" in waiting["error"]
        assert events(logs, "registration_failed") == []
    finally:
        stale.close()


def test_the_wait_is_logged_again_with_backoff(
    make_plugin: Callable[..., DevicePlugin],
) -> None:
    """Still no kubelet: the warning comes again, each saying how long it has waited."""
    timing = Timing(report_initial_s=0.2, report_max_s=0.4)
    with structlog.testing.capture_logs() as logs:
        make_plugin(timing)
        wait_until(lambda: len(events(logs, "kubelet_unavailable")) >= 3)
    waited = [e["waited_s"] for e in events(logs, "kubelet_unavailable")]
    assert waited[0] == 0.0
    assert waited == sorted(waited) and waited[2] > waited[1] > 0
