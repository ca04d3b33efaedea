"""Output that cannot be written: a reader that left (a broken pipe), a full disk
(``/dev/full``), a daemon's log pipe closed. Commands end with the documented status and
at most one message, never a traceback; daemons keep running without their log."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from podres_exporter.cli.export import Exporter
from podres_sim import SimKubelet
from tests.deviceplugin.support import plugin_flags, write_sysfs
from tests.support import http_get, run_in_group, wait_until

MakeSim = Callable[..., SimKubelet]
MakeExporter = Callable[..., Exporter]
PODRES = [sys.executable, "-m", "podres_exporter"]
BROKEN = ("Traceback", "Exception ignored", "BrokenPipeError")


def snapshot_args(sim: SimKubelet) -> list[str]:
    host = sim.host  # type: ignore[attr-defined]
    return [
        "snapshot", "--kubelet-socket", str(sim.socket_path), "--path.sysfs", str(host.sysfs),
        "--path.procfs", str(host.procfs), "--no-telemetry",
    ]  # fmt: skip


def _run(args: list[str], stdout: int | IO[Any]) -> tuple[int, str]:
    """``podres ARGS`` with ``stdout`` as its standard output; its status and stderr."""
    proc = run_in_group([*PODRES, *args], timeout=60, stdout=stdout, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stderr


@contextlib.contextmanager
def reader_gone() -> Iterator[int]:
    """The write end of a pipe whose read end is already closed: every write is EPIPE."""
    r, w = os.pipe()
    os.close(r)
    try:
        yield w
    finally:
        os.close(w)


def _top_args(make_sim: MakeSim, make_exporter: MakeExporter) -> list[str]:
    exp = make_exporter(make_sim("minimal"))
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    return ["top", "--once", "--exporter", exp.url, "--interval", "0.2"]


@pytest.mark.parametrize("command", ["snapshot", "top"])
def test_a_reader_that_left_ends_the_command_quietly(
    command: str, make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """Output into a pipe nobody reads any more (`| head` done): status 0, nothing on
    stderr, no BrokenPipeError at exit."""
    args = (
        snapshot_args(make_sim("demo"))
        if command == "snapshot"
        else _top_args(make_sim, make_exporter)
    )
    with reader_gone() as w:
        rc, err = _run(args, w)
    assert rc == 0, err
    assert err == ""


def test_snapshot_piped_into_head_exits_cleanly(make_sim: MakeSim, tmp_path: Path) -> None:
    """`podres snapshot | head -c 100` in a shell: head gets its 100 bytes, snapshot ends
    with status 0 and says nothing."""
    args = " ".join(f"'{a}'" for a in [*PODRES, *snapshot_args(make_sim("demo"))])
    script = f"{args} 2>{tmp_path}/err | head -c 100 >{tmp_path}/out; echo ${{PIPESTATUS[0]}}"
    proc = run_in_group(["bash", "-c", script], timeout=60)
    assert proc.stdout.strip() == "0", (tmp_path / "err").read_text()
    assert (tmp_path / "err").read_text() == ""
    assert len((tmp_path / "out").read_bytes()) == 100


@pytest.mark.parametrize("command", ["snapshot", "top"])
def test_a_full_disk_is_one_message_and_status_1(
    command: str, make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """Output into /dev/full (ENOSPC): status 1 and one message saying so, no traceback."""
    args = (
        snapshot_args(make_sim("demo"))
        if command == "snapshot"
        else _top_args(make_sim, make_exporter)
    )
    with open("/dev/full", "w") as full:
        rc, err = _run(args, full)
    assert rc == 1, err
    assert not any(word in err for word in BROKEN), err
    assert err.strip().splitlines() == [
        f"podres {command}: error: cannot write the output: No space left on device"
    ]


def _events_until(stream: IO[str], name: str) -> dict[str, Any]:
    """Read JSON log lines from ``stream`` until the event ``name``; that event."""
    for line in stream:
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if event.get("event") == name:
                return dict(event)
    raise AssertionError(f"the daemon ended before logging {name}")


def _daemon(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PODRES, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _keeps_running_without_its_log(proc: subprocess.Popen[str], started: str) -> None:
    """Close the daemon's log pipe once it serves; SIGHUPs make it log into the closed
    pipe; it still serves, and SIGTERM still ends it with status 0."""
    try:
        assert proc.stderr is not None
        url = _events_until(proc.stderr, started)["url"]
        wait_until(lambda: http_get(url + "/healthz")[0] == 200, timeout=30)
        proc.stderr.close()  # the log's reader is gone: every log line is EPIPE now
        for _ in range(3):
            proc.send_signal(signal.SIGHUP)  # each is logged: reload_requested
            assert http_get(url + "/healthz")[0] == 200
        wait_until(lambda: http_get(url + "/metrics")[0] == 200, timeout=30)
        assert proc.poll() is None, "the daemon died when its log pipe closed"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


@pytest.mark.slow  # a daemon as a process
def test_the_exporter_keeps_running_when_its_log_pipe_closes(make_sim: MakeSim) -> None:
    """`podres export` whose stderr reader left: it keeps polling and serving."""
    sim = make_sim("minimal")
    proc = _daemon(
        [
            "export", "--kubelet-socket", str(sim.socket_path), "--listen-address", "127.0.0.1:0",
            "--poll-interval", "200ms", "--path.sysfs", str(sim.host.sysfs),  # type: ignore[attr-defined]
            "--no-collector.gpu", "--log-format", "json", "--log-level", "debug",
        ]
    )  # fmt: skip
    _keeps_running_without_its_log(proc, "exporter_started")


@pytest.mark.slow  # a daemon as a process
def test_the_plugin_keeps_running_when_its_log_pipe_closes(tmp_path: Path) -> None:
    """`podres plugin` whose stderr reader left (no kubelet yet: it retries and logs):
    it keeps serving its own endpoints."""
    write_sysfs(tmp_path / "sys")
    config = tmp_path / "plugin.toml"
    config.write_text(
        '[[resource]]\nname = "intel.com/sriov_vf"\n[resource.discover]\nkind = "pci"\n'
        'vendor = "0x8086"\ndevice = "0x1889"\n'
    )
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    proc = _daemon(
        ["plugin", *plugin_flags(config, plugins, tmp_path / "sys"), "--log-level", "debug"]
    )
    _keeps_running_without_its_log(proc, "plugin_started")
