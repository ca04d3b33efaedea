"""The plugin's resource file as a user meets it through `podres plugin`, a real process.

Every error names it as the resource file, with the flag and variable that name it
(`--resources` / `PODRES_RESOURCES`) and the key, never "config file" (the word of
`podres export`'s settings file): exit 2, said once. A file that declares no resource
(empty, comments only, a `[plugin]` table alone, `resource = []`) is the shipped
example before a user names devices: the plugin starts, registers nothing, serves
`/healthz`, `/readyz` and `/metrics`, and logs one warning, `no_resources_configured`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from podres_sim.kubelet.devicemanager import SimDeviceManager
from tests.cli.test_errors import one_line, podres
from tests.deviceplugin.support import plugin_flags
from tests.support import http_get, log_events, wait_until

NAMED = "(--resources / PODRES_RESOURCES)"
DEV = '[[resource]]\nname = "example.com/dev"\n[resource.discover]\nkind = "dev"\nglob = "fuse"\n'


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, ["No such file or directory"]),
        ("[[resource]\n", ["is not valid TOML"]),
        (DEV + "replica = 2\n", ["resource[0].discover.replica: unknown key"]),
        (
            DEV.replace("[resource.discover]", "replica = 2\n[resource.discover]"),
            ["resource[0].replica: unknown key (did you mean replicas?)"],
        ),
        (
            DEV.replace("[resource.discover]", 'replicas = "2"\n[resource.discover]'),
            ["resource[0].replicas: expected a whole number, got the string '2'"],
        ),
        (
            "[plugin]\nhealth_interval = 5\n" + DEV,
            [
                "plugin.health_interval: expected a duration as a string with its unit, as in "
                'health_interval = "5s"; got the number 5'
            ],
        ),
        ("resourse = []\n", ["resourse: unknown key (did you mean resource?)"]),
    ],
    ids=[
        "missing",
        "not-toml",
        "unknown-discover-key",
        "did-you-mean",
        "wrong-type",
        "bare-number-duration",
        "top-level-did-you-mean",
    ],
)
@pytest.mark.parametrize("named_by", ["flag", "env"])
def test_a_bad_resource_file_is_named_as_such_once_and_exits_2(
    tmp_path: Path, content: str | None, words: list[str], named_by: str
) -> None:
    """Each error path of the resource file: exit 2, one line naming the resource file,
    --resources / PODRES_RESOURCES and the key; "config file" appears nowhere."""
    path = tmp_path / "plugin.toml"
    if content is not None:
        path.write_text(content)
    args = ["plugin", "--listen-address", "127.0.0.1:0"]
    if named_by == "flag":
        rc, err = podres(*args, "--resources", str(path))
    else:
        rc, err = podres(*args, env={"PODRES_RESOURCES": str(path)})
    assert rc == 2, err
    line = one_line(err, f"podres plugin: error: resource file {path} {NAMED}", *words)
    assert "config file" not in line


@pytest.fixture
def nothing_declared(tmp_path: Path) -> Callable[[str], Path]:
    """A resource file of the given text."""

    def write(text: str) -> Path:
        path = tmp_path / "plugin.toml"
        path.write_text(text)
        return path

    return write


@pytest.mark.parametrize(
    "text",
    [
        "",
        '# The devices this node advertises: none yet.\n# [[resource]]\n# name = "x/y"\n',
        '[plugin]\nhealth_interval = "1s"\n',
        "resource = []\n",
    ],
    ids=["empty", "comments-only", "plugin-table-only", "empty-array"],
)
def test_a_resource_file_that_declares_nothing_starts_and_serves(
    text: str,
    nothing_declared: Callable[[str], Path],
    make_kubelet: Callable[..., SimDeviceManager],
    tmp_path: Path,
) -> None:
    """`podres plugin` with nothing declared: starts, registers nothing with a live
    kubelet, answers /healthz, /readyz and /metrics with 200 (its page says none is
    declared), logs one warning `no_resources_configured`, and stops on SIGTERM with 0."""
    kubelet = make_kubelet()
    config = nothing_declared(text)
    log = tmp_path / "plugin.log"
    argv = [sys.executable, "-m", "podres_exporter", "plugin"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*argv, *plugin_flags(config, kubelet.directory, tmp_path)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        started = wait_until(lambda: log_events(log, "plugin_started"), timeout=30)
        url = started[0]["url"]
        assert started[0]["resources"] == []
        for path in ("/healthz", "/readyz", "/metrics"):
            status, _, body = http_get(url + path)
            assert status == 200, (path, body)
        assert b"podres_plugin_" in http_get(url + "/metrics")[2]
        assert b"resources: <code>none declared</code>" in http_get(url + "/")[2]
        time.sleep(1.5)  # past a health check and a registration attempt, were there any
        assert kubelet.registrations == ()
        assert [p.name for p in kubelet.directory.glob("*.sock")] == ["kubelet.sock"]
        warnings = log_events(log, "no_resources_configured")
        assert len(warnings) == 1, log.read_text()
        assert warnings[0]["level"] == "warning"
        assert warnings[0]["path"] == str(config)
        assert proc.poll() is None, log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
