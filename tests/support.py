"""Helpers the tests share: waiting, HTTP, exposition parsing, daemons started for a test.

The fixtures that use them live in ``conftest.py``; a test imports these from here by name.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podres_exporter.exporter.settings import Settings, build
from podres_sim import SimKubelet


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(interval)


def log_events(log: Path, name: str) -> list[dict[str, Any]]:
    """The JSON lines of the log file ``log`` whose event is ``name`` (others skipped)."""
    found = []
    for line in log.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == name:
            found.append(event)
    return found


def http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET ``url``; returns status, headers and the (decompressed) body, errors included."""
    req = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - loopback test URLs
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310
            status, hdrs, body = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        status, hdrs, body = err.code, dict(err.headers), err.read()
    except (urllib.error.URLError, ConnectionError):
        return 0, {}, b""  # nothing listens (yet): status 0
    if hdrs.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return status, hdrs, body


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_samples(text: str) -> Samples:
    """Exposition text -> {(sample name, labels): value}."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def select(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """Every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return {lbl: v for (n, lbl), v in samples.items() if n == name and want <= lbl}


def scrape(url: str) -> Samples:
    status, _, body = http_get(url + "/metrics")
    assert status == 200
    return parse_samples(body.decode())


def exporter_settings(sim: SimKubelet, **overrides: Any) -> Settings:
    """Settings for a fast test exporter on an ephemeral loopback port."""
    base = build(
        {
            "--kubelet-socket": str(sim.socket_path),
            "--listen-address": "127.0.0.1:0",
            "--poll-interval": "0.2s",
            "--kubelet-backoff-initial": "0.05s",
            "--kubelet-backoff-max": "0.2s",
            "--kubelet-empty-confirm": "1s",
            "--kubelet-timeout": "2s",
            "--path.sysfs": str(sim.host.sysfs),  # type: ignore[attr-defined]
            "--path.procfs": str(sim.host.procfs),  # type: ignore[attr-defined]
            "--path.pod-logs": str(sim.host.pod_logs),  # type: ignore[attr-defined]
            "--path.container-logs": str(sim.host.container_logs),  # type: ignore[attr-defined]
            "--kubelet-config": str(sim.host.kubelet_config),  # type: ignore[attr-defined]
            "--kubelet-device-checkpoint": str(sim.host.device_checkpoint),  # type: ignore[attr-defined]
            "--source-timeout": "2s",
        },
        {},
    )
    return replace(base, **overrides)


class Daemon(Protocol):
    """What a factory fixture starts and stops: the exporter, the device plugin."""

    def start(self) -> None: ...

    def stop(self, reason: str = ...) -> None: ...


D = TypeVar("D", bound=Daemon)


def started_daemons(build: Callable[..., D]) -> Iterator[Callable[..., D]]:
    """The body of a factory fixture: each daemon ``build`` makes is started, and stopped
    at teardown."""
    started: list[D] = []

    def factory(*args: Any, **kwargs: Any) -> D:
        daemon = build(*args, **kwargs)
        daemon.start()
        started.append(daemon)
        return daemon

    yield factory
    for daemon in started:
        daemon.stop("test teardown")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": promql})
        status, _, body = http_get(f"{self.url}/api/v1/query?{q}")
        assert status == 200, body
        data = json.loads(body)
        assert data["status"] == "success"
        return list(data["data"]["result"])


def run_in_group(
    args: list[str], *, timeout: float, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``args`` to its end in a session of its own, its output captured as text, and
    kill its whole process group however the call ends (its own timeout, a test timeout,
    an interrupt): whatever it started, a benchmark's servers say, does not outlive it.
    ``stdout``: captured unless given (a file, a pipe's end)."""
    with subprocess.Popen(
        args,
        stdout=kwargs.pop("stdout", subprocess.PIPE),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.toml"
    os.mkfifo(path)
    return path


def _deep(tmp_path: Path) -> Path:
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    return path


def _deep_tables(tmp_path: Path) -> Path:
    path = tmp_path / "deep-tables.toml"
    path.write_text("a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n")
    return path


def _large(tmp_path: Path) -> Path:
    path = tmp_path / "large.toml"
    path.write_bytes(b"# padding\n" * (2**20 // 10 + 1))
    return path


def _long_int(tmp_path: Path) -> Path:
    path = tmp_path / "long-int.toml"
    path.write_text("poll-interval = " + "1" * 5000 + "\n")
    return path


NOT_CONFIG_FILES: list[tuple[Callable[[Path], Path], str]] = [
    (lambda _: Path("/dev/zero"), "not a regular file"),
    (_fifo, "not a regular file"),
    (lambda tmp: tmp, "a directory"),
    (_large, "larger than 1Mi"),
    (_deep, "nested too deep"),
    (_deep_tables, "nested too deep"),
    (_long_int, "a number in it is too long"),
]


NOT_CONFIG_IDS = ["dev-zero", "fifo", "directory", "over-1MiB", "deep-arrays", "deep-tables", "int"]


@contextlib.contextmanager
def default_hangup() -> Iterator[None]:
    """SIGHUP at its default action in this process while inside, for the processes
    started meanwhile: an ignored one is inherited across exec, and a daemon command run
    in this process earlier ignores it here."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def spawn_with_default_hangup(argv: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    """``argv`` started with SIGHUP at its default action (:func:`default_hangup`)."""
    with default_hangup(), log.open("w") as out:  # a file, not a pipe nobody reads
        return subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=out,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def hang_up_through_start_and_stop(
    proc: subprocess.Popen[bytes],
    log: Path,
    started: str,
    ready: Callable[[str], object],
    while_stopping: signal.Signals = signal.SIGHUP,
) -> int:
    """SIGHUP ``proc`` every few milliseconds from the moment it ignores SIGHUP (its first
    step) until it logged ``started`` and ``ready(url)`` holds; then SIGTERM and
    ``while_stopping`` (SIGHUP; SIGINT: a second Ctrl-C) until it exits. Its exit status;
    the test fails if no SIGHUP came before ``started``."""
    wait_until(
        lambda: proc.poll() is not None or hangup_ignored(proc.pid), timeout=30, interval=0.001
    )
    early = 0
    deadline = time.monotonic() + 30
    while not (seen := log_events(log, started)) and proc.poll() is None:
        proc.send_signal(signal.SIGHUP)
        early += 1
        assert time.monotonic() < deadline, "the daemon did not start"
        time.sleep(0.005)
    assert proc.poll() is None, log.read_text()
    assert early > 0, "no SIGHUP was sent before the daemon started"
    wait_until(lambda: ready(seen[0]["url"]), timeout=30)
    proc.send_signal(signal.SIGTERM)
    while proc.poll() is None:
        try:
            proc.send_signal(while_stopping)
        except ProcessLookupError:  # gone between poll and kill
            break
        time.sleep(0.002)
    return proc.wait(timeout=20)


def hangup_ignored(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGHUP (bit 0 of SigIgn in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & 1)
    return False


@contextlib.contextmanager
def http_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """A real threaded HTTP server on the loopback with ``handler``: its port; shut down and
    joined on leaving."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
