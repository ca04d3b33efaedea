"""The fault suite's daemons as processes: the exporter and the device plugin started as a
user starts them, each logging JSON lines to a file (a pipe nobody reads fills up and
blocks every thread that logs), and read from outside: their HTTP endpoints, their log
events, and their thread and file-descriptor counts from ``/proc``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from podres_sim import SimKubelet
from podres_sim.host import SimHost
from tests.support import Samples, http_get, parse_samples, wait_until

ROOT = Path(__file__).resolve().parents[2]
PODRES = (sys.executable, "-m", "podres_exporter")
# A launcher of `podres export` with a fake NVML in its process (gpu_exporter.py).
GPU_EXPORTER = (sys.executable, "-m", "tests.faults.gpu_exporter")

Event = dict[str, Any]


@dataclass
class DaemonProcess:
    """A daemon under test, running as a process; its JSON log in ``log_path``."""

    name: str
    argv: Sequence[str]
    log_path: Path
    proc: subprocess.Popen[bytes] = field(init=False)
    _log: IO[bytes] = field(init=False, repr=False)
    _url: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            list(self.argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- the log

    def lines(self) -> list[str]:
        """Every line logged so far (a line being written may be cut short)."""
        return self.log_path.read_text(errors="replace").splitlines()

    def events(self, name: str | None = None, **fields: Any) -> list[Event]:
        """The JSON events logged so far (named ``name``, with ``fields``), in order."""
        out = []
        for line in self.lines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if name is not None and event.get("event") != name:
                continue
            if all(event.get(k) == v for k, v in fields.items()):
                out.append(event)
        return out

    def wait_event(self, name: str, timeout: float = 20.0, **fields: Any) -> Event:
        """The first event ``name`` (with ``fields``); fails the test after ``timeout``."""
        found: list[Event] = wait_until(
            lambda: self.events(name, **fields) or self.exited(), timeout=timeout
        )
        assert isinstance(found, list), f"{self.name} exited early:\n{self.tail()}"
        return found[0]

    def problems(self) -> list[str]:
        """Tracebacks and events that carry one: what a daemon must never log on bad data
        or a missing peer."""
        out = []
        for line in self.lines():
            try:
                event = json.loads(line)
            except ValueError:
                if "Traceback" in line:
                    out.append(line)
                continue
            if not isinstance(event, dict) or "exception" in event or "Traceback" in line:
                out.append(line)
        return out

    def foreign_lines(self) -> list[str]:
        """Lines that are no JSON event: anything else on the daemon's stderr (a bare
        print, a library's own log) breaks a JSON log pipeline."""
        out = []
        for line in self.lines():
            try:
                json.loads(line)
            except ValueError:
                if line.strip():
                    out.append(line)
        return out

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.lines()[-lines:])

    # -- HTTP

    @property
    def url(self) -> str:
        """The daemon's base URL, from its start event (it listens on an ephemeral port)."""
        if self._url is None:
            for event in self.events():
                if event.get("event") in ("exporter_started", "plugin_started") and "url" in event:
                    self._url = str(event["url"])
                    break
            else:
                raise AssertionError(f"{self.name} has not logged its URL:\n{self.tail()}")
        return self._url

    def wait_url(self, timeout: float = 30.0) -> str:
        wait_until(lambda: self.exited() or any("url" in e for e in self.events()), timeout=timeout)
        assert not self.exited(), f"{self.name} exited early:\n{self.tail()}"
        return self.url

    def scrape(self) -> Samples:
        status, _, body = http_get(self.url + "/metrics")
        assert status == 200, f"{self.name} /metrics answered {status}"
        return parse_samples(body.decode())

    # -- the process

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def threads(self) -> int:
        """Threads of the process, from ``/proc/<pid>/task``."""
        return len(os.listdir(f"/proc/{self.pid}/task"))

    def fds(self) -> int:
        """Open file descriptors of the process, from ``/proc/<pid>/fd``."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def terminate(self, timeout: float = 10.0) -> tuple[int, float]:
        """SIGTERM; the exit status and the seconds it took (the test fails past
        ``timeout``, and the process is killed)."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.name} still running {timeout}s after SIGTERM:\n{self.tail()}"
            ) from None
        return code, time.monotonic() - start

    def kill(self) -> None:
        """Teardown: kill it if it still runs, wait, close the log."""
        if self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        self._log.close()


def host_of(sim: SimKubelet) -> SimHost:
    """The simulated host the fixtures put beside a simulated kubelet."""
    host = sim.host  # type: ignore[attr-defined]
    assert isinstance(host, SimHost)
    return host


def exporter_flags(sim: SimKubelet, **flags: str) -> list[str]:
    """The command line of a fast test exporter against ``sim`` and its host; ``flags``
    (``kubelet_timeout="1s"`` for ``--kubelet-timeout 1s``) override the defaults."""
    host = host_of(sim)
    values = {
        "kubelet-socket": str(sim.socket_path),
        "listen-address": "127.0.0.1:0",
        "poll-interval": "100ms",
        "kubelet-backoff-initial": "50ms",
        "kubelet-backoff-max": "200ms",
        "kubelet-empty-confirm": "1s",
        "kubelet-timeout": "2s",
        "source-timeout": "1s",
        "path.sysfs": str(host.sysfs),
        "path.procfs": str(host.procfs),
        "path.pod-logs": str(host.pod_logs),
        "path.container-logs": str(host.container_logs),
        "kubelet-config": str(host.kubelet_config),
        "kubelet-device-checkpoint": str(host.device_checkpoint),
        "log-format": "json",
    }
    values.update({k.replace("_", "-"): v for k, v in flags.items()})
    return [part for k, v in values.items() for part in (f"--{k}", v)]


Starter = Callable[..., DaemonProcess]


def started(directory: Path) -> Iterator[Starter]:
    """The body of a fixture that starts daemons (``start(name, argv)``) and, at
    teardown, kills those still running and echoes their logs (pytest shows them when
    the test failed)."""
    made: list[DaemonProcess] = []

    def start(name: str, argv: Sequence[str]) -> DaemonProcess:
        daemon = DaemonProcess(name, argv, directory / f"{name}-{len(made)}.log")
        made.append(daemon)
        return daemon

    yield start
    for daemon in made:
        daemon.kill()
        sys.stderr.write(f"--- {daemon.name} log ---\n{daemon.tail(200)}\n")


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of every sample of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lbl), v in samples.items() if n == name and want <= lbl)


def start_exporter(daemons: Starter, sim: SimKubelet, **flags: str) -> DaemonProcess:
    """``podres export`` against ``sim`` (see :func:`exporter_flags`), once it serves a
    first reading."""
    exporter = daemons("exporter", [*PODRES, "export", *exporter_flags(sim, **flags)])
    exporter.wait_url()
    wait_until(lambda: http_get(exporter.url + "/readyz")[0] == 200, timeout=20)
    return exporter


def failed_calls(exporter: DaemonProcess, code: str) -> float:
    """Kubelet calls that ended with ``code``, as the exporter counts them."""
    return total(exporter.scrape(), "podres_kubelet_requests_total", code=code)
