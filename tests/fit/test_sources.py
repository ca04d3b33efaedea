"""`podres fit`'s three sources over real HTTP and a real kubelet socket: one exporter, the
local kubelet, and a real Prometheus whose fleet answer equals each exporter's own; the
scheduler's check from kube-state-metrics' series when they are in the same Prometheus."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.cli import main
from podres_exporter.cli.export import Exporter
from podres_exporter.fit.state import FAMILIES
from podres_sim import SimKubelet
from tests.monitoring.prom import running_prometheus
from tests.support import (
    Prometheus,
    http_get,
    http_server,
    run_in_group,
    scrape,
    wait_until,
)

MakeSim = Callable[..., SimKubelet]
SHAPES = (
    ["--cpu", "2", "--memory", "1Gi"],
    ["--cpu", "4", "--memory", "2Gi", "--resource", "nvidia.com/mig-1g.10gb=1"],
    ["--gpu", "1"],
    ["--container", "cpu=1,memory=1Gi", "--container", "cpu=3,memory=1Gi,example.com/vf=1"],
)
# The nodes of the fleet: a scenario each, and the name its exporter gives itself.
FLEET = (("node-a", "demo"), ("node-b", "minimal"), ("node-c", "policy-none"))
GI = 2**30
# kube-state-metrics' view of node-a and node-b (node-c has none): node-a's pods request
# all but 2 of its 48 cores (a pod that ended requests more, and does not count).
KSM = f"""\
kube_node_status_allocatable{{node="node-a",resource="cpu",unit="core"}} 48
kube_node_status_allocatable{{node="node-a",resource="memory",unit="byte"}} {256 * GI}
kube_node_status_allocatable{{node="node-a",resource="pods",unit="integer"}} 110
kube_node_status_allocatable{{node="node-b",resource="cpu",unit="core"}} 16
kube_node_status_allocatable{{node="node-b",resource="memory",unit="byte"}} {64 * GI}
kube_node_status_allocatable{{node="node-b",resource="pods",unit="integer"}} 110
kube_pod_container_resource_requests{{namespace="ml",pod="big",container="c",node="node-a",resource="cpu",unit="core"}} 45.5
kube_pod_container_resource_requests{{namespace="ml",pod="big",container="d",node="node-a",resource="cpu",unit="core"}} 0.5
kube_pod_status_phase{{namespace="ml",pod="big",phase="Running"}} 1
kube_pod_status_phase{{namespace="ml",pod="big",phase="Succeeded"}} 0
kube_pod_info{{namespace="ml",pod="big",node="node-a"}} 1
kube_pod_container_resource_requests{{namespace="ml",pod="done",container="c",node="node-a",resource="cpu",unit="core"}} 40
kube_pod_status_phase{{namespace="ml",pod="done",phase="Running"}} 0
kube_pod_status_phase{{namespace="ml",pod="done",phase="Succeeded"}} 1
kube_pod_info{{namespace="ml",pod="done",node="node-a"}} 1
"""  # noqa: E501 - series as kube-state-metrics writes them


def fit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`podres fit ARGS` in-process (remote sources only); its status, stdout and stderr."""
    capsys.readouterr()
    rc = main(["fit", *args], env={})
    out, err = capsys.readouterr()
    return rc, out, err


def fit_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    rc, out, err = fit(capsys, *args, "-o", "json")
    assert rc in (0, 1), err
    doc: dict[str, Any] = json.loads(out)
    assert rc == (0 if doc["fleet"]["fitting"] else 1)
    return doc


@pytest.fixture
def fleet(make_sim: MakeSim, make_exporter: Callable[..., Exporter]) -> dict[str, Exporter]:
    """Three exporters, each on a simulated node of its own scenario, named node-a/b/c."""
    out = {}
    for name, scenario in FLEET:
        sim = make_sim(scenario)
        out[name] = make_exporter(sim, **{"node_name": name})
    wait_until(lambda: all(http_get(e.url + "/readyz")[0] == 200 for e in out.values()))
    return out


class _Ksm(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = KSM.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fleet_prometheus(tmp_path: Path, fleet: dict[str, Exporter]) -> Iterator[Prometheus]:
    """A real Prometheus scraping the fleet's exporters (job ``podres``) and a
    kube-state-metrics exposition (job ``kube-state-metrics``), every family in."""
    with http_server(_Ksm) as ksm_port:
        targets = [e.url.removeprefix("http://") for e in fleet.values()]
        jobs = [
            {"job_name": "podres", "honor_labels": True,
             "static_configs": [{"targets": targets}]},
            {"job_name": "kube-state-metrics", "honor_labels": True,
             "static_configs": [{"targets": [f"127.0.0.1:{ksm_port}"]}]},
        ]  # fmt: skip
        with running_prometheus(tmp_path, jobs, up=4) as url:
            prom = Prometheus(url)
            names = [{n for n, _ in scrape(e.url)} for e in fleet.values()]
            served = {f: sum(f in these for these in names) for f in FAMILIES}
            wait_until(
                lambda: (
                    all(
                        len({r["metric"]["instance"] for r in prom.query(f)}) == n
                        for f, n in served.items()
                    )
                    and prom.query("kube_pod_info")
                ),
                timeout=30,
            )
            yield prom


def _kubelet_part(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k not in ("scheduler", "fits", "more", "more_capped")}


@pytest.mark.prometheus
def test_fleet_answer_from_prometheus_equals_each_exporters_answer(
    fleet: dict[str, Exporter],
    fleet_prometheus: Prometheus,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """For every shape, --prometheus over the fleet answers each node as --exporter does."""
    url = fleet_prometheus.url
    for shape in SHAPES:
        whole = fit_json(capsys, "--prometheus", url, "--selector", 'job="podres"', *shape)
        assert whole["scheduler_checked"] is False
        nodes = {n["node"]: n for n in whole["nodes"]}
        assert set(nodes) == set(fleet)
        for name, exporter in fleet.items():
            (alone,) = fit_json(capsys, "--exporter", exporter.url, *shape)["nodes"]
            assert nodes[name] == alone, (shape, name)
        assert whole["fleet"]["more"] == sum(n["more"] for n in nodes.values())
        one = fit_json(capsys, "--prometheus", url, "--node", "node-b", *shape)
        assert [n["node"] for n in one["nodes"]] == ["node-b"]


@pytest.mark.prometheus
def test_kube_state_metrics_in_the_same_prometheus_adds_the_schedulers_check(
    fleet_prometheus: Prometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    """With kube-state-metrics' series, a node whose requests leave too few cores is refused
    by the scheduler's check; a node it does not know is answered by the kubelet alone."""
    url = fleet_prometheus.url
    doc = fit_json(capsys, "--prometheus", url, "--cpu", "4", "--memory", "1Gi")
    assert doc["scheduler_checked"] is True and doc["scheduler_note"] is None
    nodes = {n["node"]: n for n in doc["nodes"]}
    a, b, c = nodes["node-a"], nodes["node-b"], nodes["node-c"]
    assert a["scheduler"] == {"fits": False, "short": ["cpu"], "count": 0}
    assert a["fits"] is False and a["more"] == 0
    assert b["scheduler"]["fits"] is True and b["scheduler"]["count"] == 4  # 16 cores / 4
    assert b["more"] <= 4
    assert c["scheduler"] is None
    one = fit_json(capsys, "--prometheus", url, "--cpu", "500m", "--memory", "1Gi")
    a = next(n for n in one["nodes"] if n["node"] == "node-a")
    # 2 cores left: the ended pod's 40 are not counted.
    assert a["scheduler"] == {"fits": True, "short": [], "count": 4}
    _, out, _ = fit(capsys, "--prometheus", url, "--cpu", "4", "--memory", "1Gi")
    assert "scheduler: cpu short of allocatable" in out
    assert "node-c: kube-state-metrics has no allocatable for it" in out


@pytest.mark.prometheus
def test_prometheus_selector_that_picks_nothing_exits_2(
    fleet_prometheus: Prometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    """A selector no podres series matches, or a --node not there: exit 2, said once."""
    url = fleet_prometheus.url
    rc, out, err = fit(capsys, "--prometheus", url, "--selector", 'cluster="nope"', "--cpu", "1")
    assert rc == 2 and not out
    assert err.count("\n") == 1 and "no podres metrics matching --selector" in err
    rc, _, err = fit(capsys, "--prometheus", url, "--node", "node-z", "--cpu", "1")
    assert rc == 2 and "--node 'node-z': no such node" in err and "node-a" in err


def test_one_exporter_answers_its_node_and_says_the_scheduler_was_not_checked(
    make_sim: MakeSim, make_exporter: Callable[..., Exporter], capsys: pytest.CaptureFixture[str]
) -> None:
    """--exporter: the node its podres_node_info names; exit 0 when it fits, 1 when not."""
    exporter = make_exporter(make_sim("demo"), node_name="gpu-node-a1")
    wait_until(lambda: http_get(exporter.url + "/readyz")[0] == 200)
    rc, out, err = fit(capsys, "--exporter", exporter.url, "--cpu", "1", "--memory", "1Gi")
    assert rc == 0, err
    lines = out.splitlines()
    assert "scheduler check: not made: kube-state-metrics is not in this source" in lines[1]
    assert any(line.startswith("gpu-node-a1 ") and " yes " in line for line in lines)
    rc, out, _ = fit(capsys, "--exporter", exporter.url, "--gpu", "64")
    assert rc == 1 and "fits on no node of 1" in out


def test_local_kubelet_is_the_default_source(make_sim: MakeSim) -> None:
    """Without --exporter or --prometheus: the local kubelet socket, in a process of its own."""
    sim = make_sim("demo")
    host = sim.host  # type: ignore[attr-defined]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
    proc = run_in_group(
        [sys.executable, "-m", "podres_exporter", "fit", "-o", "json", "--cpu", "1",
         "--kubelet-socket", str(sim.socket_path), "--path.sysfs", str(host.sysfs),
         "--path.procfs", str(host.procfs)],
        timeout=60,
        env={**env, "NODE_NAME": "local-node"},
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (node,) = json.loads(proc.stdout)["nodes"]
    assert node["node"] == "local-node" and node["admitted"] is True
