"""Shared fixtures: the simulated kubelet, a running exporter, a Prometheus server; the helpers
they use live in ``support.py``."""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import structlog
from structlog.testing import capture_logs

from podres_exporter.cli.export import Exporter
from podres_sim import Scenario, SimKubelet, load_builtin
from podres_sim.host import SimHost
from tests.support import (
    Prometheus,
    exporter_settings,
    free_port,
    http_get,
    started_daemons,
    wait_until,
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="rewrite tests/golden/*.prom from the current output",
    )


_SLOW_FOLDERS = frozenset({"deploy", "image", "monitoring", "rules", "e2e"})


_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.resolve().relative_to(_TESTS).parts[0]
        if folder in _SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


def _logs_to_stderr() -> None:
    """structlog's defaults print to stdout; the daemons log to stderr. A daemon a test runs
    in-process logs from its threads at any moment (the Pods API reader's sync), and on
    stdout that would land in the output a test reads from an in-process command."""
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Undo any structlog configuration a test made (a CLI run in-process sets a level)."""
    _logs_to_stderr()
    yield
    structlog.reset_defaults()
    _logs_to_stderr()


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


@pytest.fixture
def make_exporter() -> Iterator[Callable[..., Exporter]]:
    """Start an Exporter against a sim; stopped at teardown."""

    def build(sim: SimKubelet, **overrides: Any) -> Exporter:
        backend = sim.host.gpu_backend()  # type: ignore[attr-defined]
        return Exporter(exporter_settings(sim, **overrides), gpu_backend=backend)

    yield from started_daemons(build)


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
