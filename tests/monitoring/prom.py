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

from tests.support import Prometheus, free_port, http_get, wait_until

REPO = Path(__file__).resolve().parents[2]


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
    (``HOST:PORT``) until the context ends; both targets are up when it is entered. The
    recording rules of deploy/prometheus/ are loaded where that file exists."""
    labels = {"node": node, "cluster": cluster}
    jobs = [
        {"job_name": name, "honor_labels": True,
         "static_configs": [{"targets": [target], "labels": labels}]}
        for name, target in (("podres-exporter", exporter), ("podres-device-plugin", plugin))
    ]  # fmt: skip
    with running_prometheus(tmp, jobs, up=2, scrape_interval_s=scrape_interval_s) as url:
        yield NodePrometheus(
            url, f"http://{exporter}", f"http://{plugin}", node, cluster, scrape_interval_s
        )


RECORDING_FILE = "podres-recording.yaml"


def recording_rules(tmp: Path, interval_s: int) -> list[Path]:
    """deploy/prometheus/podres-recording.yaml, where it exists, with every group evaluated
    every ``interval_s`` seconds (the committed interval would leave a short test without a
    first evaluation)."""
    source = REPO / "deploy" / "prometheus" / RECORDING_FILE
    if not source.exists():
        return []
    rules = yaml.safe_load(source.read_text(encoding="utf-8"))
    for group in rules["groups"]:
        group["interval"] = f"{interval_s}s"
    out = tmp / RECORDING_FILE
    out.write_text(yaml.safe_dump(rules), encoding="utf-8")
    return [out]


@contextlib.contextmanager
def running_prometheus(
    tmp: Path, scrape_configs: list[dict[str, Any]], *, up: int, scrape_interval_s: int = 1
) -> Iterator[str]:
    """Prometheus on a free loopback port with ``scrape_configs`` (and the recording rules,
    :func:`recording_rules`) until the context ends; its URL, once ``up`` targets are up."""
    config = {
        "global": {"scrape_interval": f"{scrape_interval_s}s",
                   "scrape_timeout": f"{scrape_interval_s}s"},
        "rule_files": [str(p) for p in recording_rules(tmp, scrape_interval_s)],
        "scrape_configs": scrape_configs,
    }  # fmt: skip
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    with (tmp / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            ["prometheus", f"--config.file={path}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            prom = Prometheus(url)
            wait_until(lambda: _ready(url, proc, tmp), timeout=30)
            wait_until(lambda: len(prom.query("up == 1")) == up, timeout=30)
            yield url
        finally:
            stop(proc)


def _ready(url: str, proc: subprocess.Popen[bytes], tmp: Path) -> bool:
    if proc.poll() is not None:
        log = (tmp / "prometheus.log").read_text(errors="replace")[-2000:]
        raise AssertionError(f"prometheus exited {proc.returncode}: {log}")
    try:
        return http_get(url + "/-/ready")[0] == 200
    except OSError:
        return False


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


RULE_FILE = REPO / "deploy" / "prometheus" / "podres-alerts.yaml"


@functools.cache
def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULE_FILE.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]
