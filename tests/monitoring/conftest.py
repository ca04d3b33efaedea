"""A real Prometheus that has scraped ``podres demo`` (exporter and device plugin) for a while.

Shared by the dashboard and alert-rule tests: every query they ship is executed here. The
scrape configuration gives the series the labels a cluster install gives them (``node`` from
the ServiceMonitor's relabelling, ``cluster`` as an external or target label), so that the
queries' ``node`` and ``cluster`` matchers select data. ``quiet_demo`` is a demo without pod
churn, for the tests that compare Prometheus's answers with the exporter's own /metrics (the
scrape set-ups, the peers' joins), each with Prometheus servers of its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.monitoring.prom import NodePrometheus, prometheus_scraping, stop
from tests.support import free_port, http_get, wait_until

SCRAPE_INTERVAL_S = 1
NODE = "demo"
CLUSTER = "test"
# How long Prometheus scrapes the demo before the queries run: a rate() over a window of four
# scrape intervals needs at least that much, and the demo's churn moves pods meanwhile.
WARM_UP_S = 20


@pytest.fixture(scope="session")
def demo_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodePrometheus]:
    """``podres demo`` and a Prometheus scraping it, warmed up for :data:`WARM_UP_S`."""
    tmp = tmp_path_factory.mktemp("demo-prometheus")
    with (
        running_demo(tmp, churn="5s") as (exporter, plugin),
        prometheus_scraping(
            tmp, exporter, plugin, node=NODE, cluster=CLUSTER, scrape_interval_s=SCRAPE_INTERVAL_S
        ) as prom,
    ):
        time.sleep(WARM_UP_S)
        yield prom


@pytest.fixture(scope="session")
def quiet_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``podres demo`` without churn (its pods stay where they are, so that what Prometheus
    answers can be compared with what the exporter serves): the exporter's and the device
    plugin's ``HOST:PORT``."""
    with running_demo(tmp_path_factory.mktemp("quiet-demo"), churn="0s") as targets:
        yield targets


@contextlib.contextmanager
def running_demo(tmp: Path, *, churn: str) -> Iterator[tuple[str, str]]:
    """``podres demo`` until the context ends: the exporter's and the plugin's ``HOST:PORT``."""
    if not shutil.which("prometheus"):
        pytest.fail("install the Debian package prometheus (make test does)")
    port = free_port()
    demo_log = (tmp / "demo.log").open("w")
    demo = subprocess.Popen(
        [sys.executable, "-m", "podres_exporter", "demo",
         f"--listen-address=127.0.0.1:{port}", "--log-format=json", f"--churn-interval={churn}"],
        stdout=subprocess.PIPE,
        stderr=demo_log,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert demo.stdout is not None
        banner = ""
        while "Ctrl-C" not in banner:
            line = demo.stdout.readline()
            if not line:
                pytest.fail(f"podres demo exited: {(tmp / 'demo.log').read_text()[-2000:]}")
            banner += line
        found = re.search(r"device plugin metrics: (http://\S+)/metrics", banner)
        assert found, banner
        # Ready once the exporter has its first reading: every family it serves is there.
        wait_until(lambda: http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200, timeout=30)
        yield f"127.0.0.1:{port}", found.group(1).removeprefix("http://")
    finally:
        stop(demo)
        if demo.stdout is not None:
            demo.stdout.close()
        demo_log.close()
