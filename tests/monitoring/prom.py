"""A real Prometheus (the Debian ``prometheus`` binary) scraping one node's exporter and
device plugin, labelled as a cluster install labels them: ``job`` the Services' names
(``podres-exporter``, ``podres-device-plugin``, as the ServiceMonitor gives), ``node`` (the
ServiceMonitor's relabelling) and ``cluster``. The demo's tests and the end-to-end tier on a
real kubelet both run the shipped dashboards' and alert rules' queries through it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import free_port, http_get, wait_until


@dataclass(frozen=True)
class NodePrometheus:
    """Prometheus at ``url`` scraping a node's exporter and device plugin every
    ``scrape_interval_s`` seconds, under the job names the ServiceMonitor gives them (the
    Services' names: ``podres-exporter``, ``podres-device-plugin``)."""

    url: str
    exporter_url: str
    plugin_url: str
    node: str
    cluster: str
    scrape_interval_s: int

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query; fails the test on a query error (bad PromQL included)."""
        q = urllib.parse.urlencode({"query": promql})
        status, _, body = http_get(f"{self.url}/api/v1/query?{q}")
        assert status == 200, f"{promql}: {body.decode(errors='replace')}"
        data = json.loads(body)
        assert data["status"] == "success", data
        result = data["data"]["result"]
        return list(result) if isinstance(result, list) else [result]

    def series(self, selector: str) -> list[dict[str, str]]:
        """The series a selector matches over the last five minutes (``/api/v1/series``)."""
        q = urllib.parse.urlencode({"match[]": selector, "start": time.time() - 300})
        status, _, body = http_get(f"{self.url}/api/v1/series?{q}")
        assert status == 200, f"{selector}: {body.decode(errors='replace')}"
        return list(json.loads(body)["data"])

    def label_values(self, label: str, selector: str | None = None) -> list[str]:
        params = {"start": time.time() - 300}
        if selector:
            params["match[]"] = selector  # type: ignore[assignment]
        q = urllib.parse.urlencode(params)
        status, _, body = http_get(f"{self.url}/api/v1/label/{label}/values?{q}")
        assert status == 200, body
        return list(json.loads(body)["data"])


@contextlib.contextmanager
def prometheus_scraping(
    tmp: Path, exporter: str, plugin: str, *, node: str, cluster: str, scrape_interval_s: int = 1
) -> Iterator[NodePrometheus]:
    """Run Prometheus on a free loopback port scraping ``exporter`` and ``plugin``
    (``HOST:PORT``) until the context ends; both targets are up when it is entered."""
    labels = f"{{node: {node}, cluster: {cluster}}}"
    config = tmp / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {scrape_interval_s}s\n"
        f"  scrape_timeout: {scrape_interval_s}s\n"
        "scrape_configs:\n"
        f"  - job_name: podres-exporter\n    honor_labels: true\n    static_configs:\n"
        f"      - targets: ['{exporter}']\n        labels: {labels}\n"
        f"  - job_name: podres-device-plugin\n    honor_labels: true\n    static_configs:\n"
        f"      - targets: ['{plugin}']\n        labels: {labels}\n"
    )
    port = free_port()
    with (tmp / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            prom = NodePrometheus(
                f"http://127.0.0.1:{port}", f"http://{exporter}", f"http://{plugin}",
                node, cluster, scrape_interval_s,
            )  # fmt: skip
            wait_until(lambda: http_get(prom.url + "/-/ready")[0] == 200, timeout=30)
            wait_until(lambda: len(prom.query("up == 1")) == 2, timeout=30)
            yield prom
        finally:
            stop(proc)


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL after 15 s; reaped either way."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def alert_exprs() -> dict[str, str]:
    return {rule["alert"]: rule["expr"] for rule in _rules()}


REPO = Path(__file__).resolve().parents[2]


RULE_FILE = REPO / "deploy" / "prometheus" / "podres-alerts.yaml"


@functools.cache
def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULE_FILE.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]
