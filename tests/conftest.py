"""Shared fixtures: the simulated kubelet, a running exporter, and scrape helpers."""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from podres_exporter.cli.export import Exporter
from podres_exporter.settings import Settings, build
from podres_exporter.sim import Scenario, SimKubelet, load_builtin
from podres_exporter.sim.hostfs import SimHost


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="rewrite tests/golden/*.prom from the current output",
    )


# Tiers. `make test-fast` runs the unit tier: every test not marked slow, prometheus or e2e.
# Slow: the folders that check artefacts with external programs (checkov, hadolint, promtool,
# a Prometheus server, a cluster), and the tests marked slow where they stand (a node at
# full scale, the podres command run as a process).
_SLOW_FOLDERS = frozenset({"deploy", "image", "monitoring", "rules", "e2e"})
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.resolve().relative_to(_TESTS).parts[0]
        if folder in _SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Undo any structlog configuration a test made (a CLI run in-process sets a level)."""
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _hangup_restored() -> Iterator[None]:
    """A daemon command run in-process ignores SIGHUP from its first line; give the
    test process its handler back, or every process it starts later inherits that."""
    previous = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, previous)


@pytest.fixture
def debug_logs() -> Iterator[list[structlog.typing.EventDict]]:
    """Every structlog event, debug included, whatever an earlier test configured."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(**saved)


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


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


@pytest.fixture
def make_sim(tmp_path: Path) -> Iterator[Callable[..., SimKubelet]]:
    """Start a simulated kubelet for a scenario (a name or a Scenario) on a socket in tmp_path."""
    sims: list[SimKubelet] = []

    def factory(
        scenario: str | Scenario = "minimal", *, start: bool = True, **behaviour: Any
    ) -> SimKubelet:
        sc = load_builtin(scenario) if isinstance(scenario, str) else scenario
        sock = tmp_path / f"kubelet-{len(sims)}.sock"
        sim = SimKubelet(sc, str(sock))
        if behaviour:
            sim.set_behaviour(**behaviour)
        # The node's host files and a fake NVML, frozen in time (clock None) so
        # expositions are deterministic; tests call sim.host.refresh() to move on.
        sim.host = SimHost(sim, tmp_path / f"host-{len(sims)}", clock=None)  # type: ignore[attr-defined]
        sim.sysfs_root = sim.host.sysfs  # type: ignore[attr-defined]
        sims.append(sim)
        if start:
            sim.start()
        return sim

    yield factory
    for s in sims:
        s.stop()


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


@pytest.fixture
def make_exporter() -> Iterator[Callable[..., Exporter]]:
    """Start an Exporter against a sim; stopped at teardown."""

    def build(sim: SimKubelet, **overrides: Any) -> Exporter:
        backend = sim.host.gpu_backend()  # type: ignore[attr-defined]
        return Exporter(exporter_settings(sim, **overrides), gpu_backend=backend)

    yield from started_daemons(build)


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


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str | list[str]], Prometheus]]:
    """Start the Debian `prometheus` binary scraping its targets every second."""
    assert shutil.which("prometheus"), "install the Debian package prometheus"
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []

    def start(targets: str | list[str]) -> Prometheus:
        cfg = tmp_path / "prometheus.yml"
        listed = ", ".join(f"'{t}'" for t in ([targets] if isinstance(targets, str) else targets))
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: podres\n    static_configs:\n"
            f"      - targets: [{listed}]\n"
        )
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        logs.append(log)
        proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        prom = Prometheus(f"http://127.0.0.1:{port}")
        wait_until(
            lambda: proc.poll() is None and http_get(prom.url + "/-/ready")[0] == 200, timeout=30
        )
        return prom

    yield start
    for p in procs:
        p.terminate()
        p.wait(10)
    for f in logs:
        f.close()
