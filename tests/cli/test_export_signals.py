"""`podres export` as a process: SIGHUP is a reload request, never the end of the daemon,
neither while it starts nor while it stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from podres_sim import SimKubelet
from tests.support import (
    hang_up_through_start_and_stop,
    http_get,
    spawn_with_default_hangup,
    wait_until,
)
from tests.support import log_events as events

pytestmark = pytest.mark.slow  # runs the podres command as a process

MakeSim = Callable[..., SimKubelet]


def test_sighup_keeps_the_exporter_serving(make_sim: MakeSim, tmp_path: Path) -> None:
    """SIGHUP: one reload_requested event; the process keeps polling and serving, and a
    SIGTERM still ends it with status 0."""
    sim = make_sim("minimal")
    log = tmp_path / "export.log"
    with log.open("w") as out:  # a file, not a pipe nobody reads
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "podres_exporter", "export",
                "--kubelet-socket", str(sim.socket_path),
                "--listen-address", "127.0.0.1:0",
                "--poll-interval", "200ms",
                "--path.sysfs", str(sim.host.sysfs),  # type: ignore[attr-defined]
                "--no-collector.gpu",
                "--log-format", "json",
            ],
            stdout=subprocess.DEVNULL,
            stderr=out,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        url = wait_until(lambda: events(log, "exporter_started"), timeout=30)[0]["url"]
        wait_until(lambda: http_get(url + "/readyz")[0] == 200, timeout=30)
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: events(log, "reload_requested"))
        calls = sum(sim.request_count.values())
        wait_until(lambda: sum(sim.request_count.values()) > calls + 2)  # still polling
        assert proc.poll() is None
        assert http_get(url + "/healthz")[::2] == (200, b"ok\n")
        assert http_get(url + "/metrics")[0] == 200
        (reload,) = events(log, "reload_requested")
        assert reload["signal"] == "SIGHUP"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    assert code == 0, log.read_text()
    assert events(log, "exporter_stopped")[0]["reason"] == "signal SIGTERM"


@pytest.mark.parametrize("while_stopping", [signal.SIGHUP, signal.SIGINT])
def test_sighup_while_starting_or_stopping_never_ends_the_exporter(
    make_sim: MakeSim, tmp_path: Path, while_stopping: signal.Signals
) -> None:
    """SIGHUPs from the first moment of `podres export` until it serves, and SIGHUPs (or
    Ctrl-Cs) again right after SIGTERM until it is gone: the exporter starts, serves, stops
    with status 0 (never 129, death by SIGHUP; never a KeyboardInterrupt through its stop)
    and logs why it stopped."""
    sim = make_sim("minimal")
    log = tmp_path / "export.log"
    proc = spawn_with_default_hangup(
        [
            sys.executable, "-m", "podres_exporter", "export",
            "--kubelet-socket", str(sim.socket_path),
            "--listen-address", "127.0.0.1:0",
            "--poll-interval", "200ms",
            "--path.sysfs", str(sim.host.sysfs),  # type: ignore[attr-defined]
            "--no-collector.gpu",
            "--log-format", "json",
        ],
        log,
    )  # fmt: skip
    try:
        code = hang_up_through_start_and_stop(
            proc,
            log,
            "exporter_started",
            lambda url: http_get(url + "/readyz")[0] == 200,
            while_stopping,
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
    assert events(log, "exporter_stopped")[0]["reason"] in stopped_by


# Runs an entry point of ours with an import hook that reports, at the first import of a
# module beyond the entry's own few, whether SIGHUP is ignored by then; and exits there.
_FIRST_IMPORT_PROBE = r"""
import importlib.abc, importlib.metadata, os, runpy, signal, sys

ENTRY = {
    "podres_exporter", "podres_exporter.entry", "podres_exporter.__main__",
    "podres_exporter.deviceplugin", "podres_exporter.deviceplugin.__main__", "__future__",
}

class Probe(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in ENTRY:
            ignored = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            sys.stdout.write(f"{name} {'ignored' if ignored else 'default'}\n")
            sys.stdout.flush()
            os._exit(0)
        return None

how, target, *args = sys.argv[1:]
sys.argv = [target, *args]
if how == "script":
    (script,) = importlib.metadata.entry_points(group="console_scripts", name=target)
    sys.meta_path.insert(0, Probe())
    sys.exit(script.load()())
sys.meta_path.insert(0, Probe())
runpy.run_module(target, run_name="__main__", alter_sys=True)
"""


def _first_import(how: str, target: str, *args: str) -> str:
    """What the probe saw: the first module imported beyond the entry, and SIGHUP then."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a daemon run in this process ignores it
    try:
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_IMPORT_PROBE, how, target, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("how", "target", "command"),
    [
        ("script", "podres", "export"),
        ("script", "podres", "plugin"),
        ("script", "podres", "demo"),
        ("module", "podres_exporter", "export"),
        ("module", "podres_exporter", "plugin"),
        ("module", "podres_exporter.deviceplugin", "--resources"),
    ],
)
def test_a_daemon_ignores_sighup_before_it_imports_anything(
    how: str, target: str, command: str
) -> None:
    """The console script and both ``-m`` entries of a daemon command ignore SIGHUP before
    they import any module beyond their entry (the imports take half a second or more,
    and a SIGHUP then would end the process)."""
    seen = _first_import(how, target, command)
    assert seen.endswith(" ignored"), seen


def test_a_one_shot_command_keeps_the_default_sighup() -> None:
    """``podres snapshot`` / ``top`` are no daemons: a hang-up still ends them."""
    assert _first_import("script", "podres", "snapshot").endswith(" default")
