"""`podres export` as a process: SIGHUP is a reload request, never the end of the daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.sim import SimKubelet
from tests.conftest import http_get, wait_until

pytestmark = pytest.mark.slow  # runs the podres command as a process

MakeSim = Callable[..., SimKubelet]


def events(log: Path, name: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``log`` whose event is ``name``."""
    found = []
    for line in log.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == name:
            found.append(event)
    return found


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
