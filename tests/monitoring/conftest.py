"""A real Prometheus that has scraped ``podres demo`` (exporter and device plugin) for a while.

Shared by the dashboard and alert-rule tests: every query they ship is executed here. The
scrape configuration gives the series the labels a cluster install gives them (``node`` from
the ServiceMonitor's relabelling, ``cluster`` as an external or target label), so that the
queries' ``node`` and ``cluster`` matchers select data.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.monitoring.prom import NodePrometheus, prometheus_scraping, stop
from tests.support import free_port

SCRAPE_INTERVAL_S = 1
NODE = "demo"
CLUSTER = "test"
# How long Prometheus scrapes the demo before the queries run: a rate() over a window of four
# scrape intervals needs at least that much, and the demo's churn moves pods meanwhile.
WARM_UP_S = 20


@pytest.fixture(scope="session")
def demo_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodePrometheus]:
    """``podres demo`` and a Prometheus scraping it, warmed up for :data:`WARM_UP_S`."""
    if not shutil.which("prometheus"):
        pytest.fail("install the Debian package prometheus (make test does)")
    tmp = tmp_path_factory.mktemp("demo-prometheus")
    port = free_port()
    demo_log = (tmp / "demo.log").open("w")
    demo = subprocess.Popen(
        [sys.executable, "-m", "podres_exporter", "demo",
         f"--listen-address=127.0.0.1:{port}", "--log-format=json", "--churn-interval=5s"],
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
        exporter = f"127.0.0.1:{port}"
        plugin = found.group(1).removeprefix("http://")
        with prometheus_scraping(
            tmp, exporter, plugin, node=NODE, cluster=CLUSTER, scrape_interval_s=SCRAPE_INTERVAL_S
        ) as prom:
            time.sleep(WARM_UP_S)
            yield prom
    finally:
        stop(demo)
        if demo.stdout is not None:
            demo.stdout.close()
        demo_log.close()
