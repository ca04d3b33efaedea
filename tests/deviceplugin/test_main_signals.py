"""`podres plugin` as a process: SIGHUP re-reads the resource file and says whether it
changed; the plugin keeps serving, its socket stays registered. A SIGHUP while it starts
or stops is ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deviceplugin.support import accepted, advertised, files, plugin_flags, write_sysfs
from tests.support import (
    hang_up_through_start_and_stop,
    http_get,
    spawn_with_default_hangup,
    wait_until,
)
from tests.support import log_events as events

pytestmark = pytest.mark.slow  # runs the podres command as a process

VF = "intel.com/sriov_vf"
CONFIG = f"""
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


def test_sighup_rereads_the_resource_file_and_keeps_serving(
    make_kubelet: Any, tmp_path: Path
) -> None:
    """Two SIGHUPs: one reload_requested each; the first finds the file unchanged, the
    second names the resource added (a restart applies it). The socket and its
    registration stay as they were, the plugin stays healthy, SIGTERM still ends it."""
    kubelet = make_kubelet()
    write_sysfs(tmp_path / "sys")
    config = tmp_path / "plugin.toml"
    config.write_text(CONFIG)
    log = tmp_path / "plugin.log"
    with log.open("w") as out:  # a file, not a pipe nobody reads
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "podres_exporter", "plugin",
                *plugin_flags(config, kubelet.directory, tmp_path / "sys"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=out,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        assert kubelet.wait_for(lambda: advertised(kubelet, VF), timeout=20)
        url = wait_until(lambda: events(log, "plugin_started"))[0]["url"]
        registered = (files(kubelet), len(accepted(kubelet)))
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: events(log, "plugin_config_unchanged"))
        config.write_text(CONFIG + NIC)
        proc.send_signal(signal.SIGHUP)
        (changed,) = wait_until(lambda: events(log, "plugin_config_changed"))
        assert changed["added"] == ["example.com/uplink"] and "restart" in changed["applies"]
        assert len(events(log, "reload_requested")) == 2
        assert proc.poll() is None
        assert (files(kubelet), len(accepted(kubelet))) == registered
        assert kubelet.connected(VF) and advertised(kubelet, VF)
        assert http_get(url + "/healthz")[::2] == (200, b"ok\n")
        assert http_get(url + "/readyz")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    assert code == 0, log.read_text()
    assert files(kubelet) == ["kubelet.sock"]


@pytest.mark.parametrize("while_stopping", [signal.SIGHUP, signal.SIGINT])
def test_sighup_while_starting_or_stopping_never_ends_the_plugin(
    make_kubelet: Any, tmp_path: Path, while_stopping: signal.Signals
) -> None:
    """SIGHUPs from the first moment of `podres plugin` until it serves, and SIGHUPs (or
    Ctrl-Cs) again right after SIGTERM until it is gone: it starts, registers, stops with
    status 0 (never 129, death by SIGHUP; never a KeyboardInterrupt through its stop) and
    removes its socket."""
    kubelet = make_kubelet()
    write_sysfs(tmp_path / "sys")
    config = tmp_path / "plugin.toml"
    config.write_text(CONFIG)
    log = tmp_path / "plugin.log"
    proc = spawn_with_default_hangup(
        [
            sys.executable, "-m", "podres_exporter", "plugin",
            *plugin_flags(config, kubelet.directory, tmp_path / "sys"),
        ],
        log,
    )  # fmt: skip
    try:
        code = hang_up_through_start_and_stop(
            proc, log, "plugin_started", lambda _url: advertised(kubelet, VF), while_stopping
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()
    # A Ctrl-C pending with the SIGTERM may be handled first (Python runs pending
    # handlers in signal-number order): either stop signal names the stop.
    stopped_by = {"signal SIGTERM", f"signal {while_stopping.name}"} - {"signal SIGHUP"}
    assert events(log, "plugin_stopped")[0]["reason"] in stopped_by
    assert files(kubelet) == ["kubelet.sock"]
