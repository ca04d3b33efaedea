"""`podres demo`'s first hour: what it prints works when pasted and agrees with /metrics;
it serves on the loopback and logs quietly on a terminal unless told otherwise."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.cli import DEMO_OPTIONS, main, parser, settings_from
from podres_exporter.cli.demo import DEMO_LISTEN, demo_settings, podres_command
from podres_exporter.daemon.options import given
from podres_exporter.daemon.values import parse_listen_address
from podres_exporter.exporter.settings import CONFIG, Settings
from tests.support import Samples, http_get, parse_samples, select, wait_until


def _podres() -> list[str]:
    """The venv's console script when there is one (as `make demo` runs it), else -m."""
    script = Path(sys.executable).parent / "podres"
    return [str(script)] if script.exists() else [sys.executable, "-m", "podres_exporter"]


@dataclass
class Demo:
    lines: list[str]
    metrics_url: str
    plugin_url: str
    snapshot: str


@pytest.fixture
def demo() -> Iterator[Demo]:
    """`podres demo` on a free loopback port, its banner read; stopped (its whole process
    group) at teardown."""
    flags = ["--listen-address", "127.0.0.1:0", "--poll-interval", "0.5s", "--churn-interval", "0"]
    proc = subprocess.Popen(
        [*_podres(), "demo", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while not lines or lines[-1] != "Ctrl-C to stop.":
            line = proc.stdout.readline()
            assert line and time.monotonic() < deadline, f"no banner; so far: {lines}"
            lines.append(line.rstrip("\n"))
        found = {
            m.group(1): m.group(2) for m in map(re.compile(r"\s+(.+?):\s+(.*)").match, lines) if m
        }
        yield Demo(
            lines,
            found["metrics"].removesuffix("/metrics"),
            found["device plugin metrics"].removesuffix("/metrics"),
            found["snapshot"],
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            if proc.stdout is not None:
                proc.stdout.close()


def _scrape(url: str) -> Samples:
    """The samples /metrics serves now."""
    return parse_samples(http_get(url + "/metrics")[2].decode())


def _pasted(command: str, cwd: Path) -> dict[str, Any]:
    """Run ``command`` as a shell runs a pasted line, from another directory."""
    proc = subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, cwd=cwd, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def _cpus(samples: Samples, pool: str) -> dict[str, int]:
    """CPUs of ``pool`` by NUMA node, as /metrics says."""
    return {
        dict(k)["numa_node"]: int(v)
        for k, v in select(samples, "podres_node_cpus", pool=pool).items()
    }


def _snapshot_cpus(snap: dict[str, Any], pool: str) -> dict[str, int]:
    """CPUs of ``pool`` by NUMA node, as the snapshot says."""
    return {numa: int(c[pool]) for numa, c in snap["node"]["cpus"].items()}


def test_the_printed_snapshot_command_agrees_with_metrics(demo: Demo, tmp_path: Path) -> None:
    """The snapshot line, pasted into a shell elsewhere, reads the same node as /metrics:
    CPUs, devices, the fake NVML's GPUs and their memory."""
    # The demo's pods that ask for the plugin's resource are admitted once it registers.
    wait_until(
        lambda: select(
            _scrape(demo.metrics_url), "podres_container_device_info", resource="podres.io/rdma-vf"
        ),
        timeout=30,
    )
    assert http_get(demo.plugin_url + "/metrics")[0] == 200
    snap = _pasted(demo.snapshot, tmp_path)
    metrics = _scrape(demo.metrics_url)
    assert _snapshot_cpus(snap, "allocatable") == {
        dict(k)["numa_node"]: int(v)
        for k, v in select(metrics, "podres_node_allocatable_cpus").items()
    }
    assert _snapshot_cpus(snap, "reserved") == _cpus(metrics, "reserved")
    devices = {
        (resource, numa): counts["allocatable"]
        for resource, by_numa in snap["node"]["devices"].items()
        for numa, counts in by_numa.items()
    }
    assert devices == {
        (dict(k)["resource"], dict(k)["numa_node"]): int(v)
        for k, v in select(metrics, "podres_node_allocatable_devices").items()
    }
    telemetry = snap["telemetry"]
    assert telemetry["nvml_available"] is True
    gpus = {g["uuid"]: g["memory_total_bytes"] for g in telemetry["gpus"]}
    assert gpus == {
        dict(k)["uuid"]: int(v) for k, v in select(metrics, "podres_gpu_memory_total_bytes").items()
    }
    assert len(gpus) == len(select(metrics, "podres_gpu_info"))
    # The kubelet's own files of the simulated node, read as the exporter reads them.
    assert telemetry["sources"]["kubelet_config"]["ok"] is True
    assert telemetry["sources"]["device_checkpoint"]["ok"] is True
    # Exclusive CPUs move with the pods: the next readings agree.
    wait_until(
        lambda: (
            _snapshot_cpus(_pasted(demo.snapshot, tmp_path), "exclusive")
            == _cpus(_scrape(demo.metrics_url), "exclusive")
        ),
        timeout=30,
    )


def test_the_demo_names_its_node_as_the_simulated_one(demo: Demo) -> None:
    """The exporter and the plugin of the demo call their node by the simulated node's name
    (the banner's), not the machine's host name."""
    name = re.search(r"simulated node '([^']+)'", demo.lines[0])
    assert name is not None, demo.lines[0]
    # Served from the exporter's first reading on.
    exported = wait_until(lambda: select(_scrape(demo.metrics_url), "podres_node_info"), timeout=30)
    assert [dict(k)["node"] for k in exported] == [name.group(1)]
    plugin = select(_scrape(demo.plugin_url), "podres_plugin_node_info")
    assert [dict(k)["node"] for k in plugin] == [name.group(1)]


def test_the_printed_command_names_the_podres_being_run(demo: Demo) -> None:
    """The snapshot line starts with the full path of the podres that runs the demo."""
    command = demo.snapshot.split(" ", 1)[1]  # after PYTHONPATH=...
    assert command.startswith(" ".join(_podres()) + " snapshot ")
    assert os.path.isabs(command.split()[0])
    for flag in (
        "--kubelet-socket",
        "--path.sysfs",
        "--path.procfs",
        "--path.pod-logs",
        "--kubelet-config",
        "--kubelet-device-checkpoint",
    ):
        assert f" {flag} " in command


def _demo(argv: list[str], env: dict[str, str], *, terminal: bool) -> Settings:
    """The settings `podres demo ARGV` runs with, in ``env``, on a terminal or not."""
    ns = parser().parse_args(["demo", *argv])
    flags = given(ns, DEMO_OPTIONS)
    return demo_settings(
        settings_from(ns, env), flags, env, config_path=getattr(ns, CONFIG.flag), terminal=terminal
    )


def test_the_demo_serves_on_the_loopback_unless_told(tmp_path: Path) -> None:
    """Nothing said: 127.0.0.1:9842; a flag, a variable or a config key is obeyed."""
    assert DEMO_LISTEN == ("127.0.0.1", 9842)
    assert _demo([], {}, terminal=False).listen_address == ("127.0.0.1", 9842)
    assert _demo(["--listen-address", ":9842"], {}, terminal=False).listen_address == (
        "0.0.0.0",
        9842,
    )
    env = {"PODRES_LISTEN_ADDRESS": "0.0.0.0:9000"}
    assert _demo([], env, terminal=False).listen_address == ("0.0.0.0", 9000)
    config = tmp_path / "podres.toml"
    config.write_text('listen-address = "127.0.0.2:9001"\n')
    assert _demo(["--config", str(config)], {}, terminal=False).listen_address == (
        "127.0.0.2",
        9001,
    )


def test_on_a_terminal_the_demo_logs_warnings_only_unless_told() -> None:
    """Start-up logs do not bury the banner on a terminal; --log-level still wins."""
    assert _demo([], {}, terminal=True).log_level == "warning"
    assert _demo([], {}, terminal=False).log_level == "info"
    assert _demo(["--log-level", "debug"], {}, terminal=True).log_level == "debug"
    assert _demo([], {"PODRES_LOG_LEVEL": "info"}, terminal=True).log_level == "info"


def test_podres_command_is_the_running_program_by_full_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console script by its absolute path; otherwise this Python with -m."""
    script = tmp_path / "bin" / "podres"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert podres_command("bin/podres") == [str(script)]
    assert podres_command("/x/podres_exporter/__main__.py", "/venv/bin/python") == [
        "/venv/bin/python",
        "-m",
        "podres_exporter",
    ]


def test_the_demo_help_shows_the_address_it_serves_on(capsys: pytest.CaptureFixture[str]) -> None:
    """`podres demo --help` names the loopback default, the very one the demo uses unset."""
    with pytest.raises(SystemExit):
        main(["demo", "--help"], {})
    text = " ".join(capsys.readouterr().out.split())
    shown = re.search(r"--listen-address ADDRESS .*?\[default (\S+?);", text)
    assert shown is not None, text
    assert shown.group(1) == "127.0.0.1:9842"
    assert parse_listen_address(shown.group(1)) == _demo([], {}, terminal=False).listen_address
