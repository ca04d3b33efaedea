"""The scrape set-ups users have, each proven with a real Prometheus scraping ``podres demo``.

For each set-up a Prometheus of its own scrapes the same demo with the scrape configuration
that set-up produces, the service-discovery metadata given as the ``__meta_*`` labels of a
static target (Prometheus hands them to ``relabel_configs`` as it would a discovered
target's, and drops them after):

- **service-monitor**: what the Prometheus Operator generates for our ServiceMonitor
  (deploy/components/service-monitor): its own target labels, then ours (``node`` from the
  pod's node name, the agent's ``namespace``/``pod``/``container`` dropped), honor_labels.
- **kubernetes-pods** / **kubernetes-pods-no-honor**: the ``kubernetes-pods`` job of the
  prometheus-community chart (target labels ``namespace``, ``pod``, ``node`` of the agent's
  pod, its pod labels), with honor_labels true as docs/deploy.md asks, and false, where the
  boards' banner must say what to change and ``podres top`` must refuse.
- **static**: a plain static target, no labels at all.

In each, the questions of docs/dashboards.md ("Asking Prometheus directly") are answered as the
exporter's own /metrics answers them, the recording rules' join finds the node, the boards'
banner says what it should, and ``podres top --prometheus`` shows the exporter's figures.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.monitoring.dashboard_lint import panels, substitute
from tests.monitoring.prom import running_prometheus
from tests.support import Prometheus, Samples, scrape, select
from tests.top.support import assert_header_matches
from tests.top.test_prometheus_source import top_json

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "dashboards.md"
# The node name the documented queries are written for; the test puts the demo's in its place.
DOCS_NODE = "gpu-node-a1"
AGENT_NAMESPACE = "podres-system"
# The recording rules' join (docs/rules.md), as tools/rules.py writes it with the defaults.
NODE_JOIN = "* on (cluster, job, instance) group_left (node) podres_node_info"
# How long Prometheus scrapes before the questions: two scrapes for rate() and then some.
WARM_UP_S = 5


def docs_queries() -> dict[str, str]:
    """The PromQL of docs/dashboards.md's "Asking Prometheus directly", by its comment."""
    section = DOCS.read_text().split("## Asking Prometheus directly", 1)[1].split("\n## ", 1)[0]
    block = section.split("```promql\n", 1)[1].split("```", 1)[0]
    lines = block.strip().splitlines()
    return {
        comment.removeprefix("# ").split(":", 1)[0]: query
        for comment, query in zip(lines[::2], lines[1::2], strict=True)
    }


@dataclass(frozen=True)
class SetUp:
    """One scrape set-up: its name, its scrape jobs, whether the series get a ``node`` label
    from it, and what the boards' banner shows (0 fine, 1 no node label, 2 renamed holders)."""

    name: str
    jobs: tuple[dict[str, Any], ...]
    targets: int
    node_label: bool
    banner: int


def _meta(pod: str, node: str, app: str) -> dict[str, str]:
    """A static target's stand-in for what pod discovery knows of an agent's pod."""
    return {
        "__meta_kubernetes_namespace": AGENT_NAMESPACE,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_container_name": app.removeprefix("podres-"),
        "__meta_kubernetes_pod_node_name": node,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": app,
        "__meta_kubernetes_service_name": app,
        "__meta_kubernetes_endpoint_port_name": "metrics",
    }


def _replace(source: str, target: str) -> dict[str, Any]:
    return {"source_labels": [source], "target_label": target, "action": "replace"}


def service_monitor(exporter: str, plugin: str, node: str) -> SetUp:
    """Our ServiceMonitor, as the Operator writes it: the Operator's target labels, then the
    endpoint's relabelings (node; the agent's namespace, pod and container dropped)."""
    job = {
        "job_name": f"serviceMonitor/{AGENT_NAMESPACE}/podres-exporter/0",
        "honor_labels": True,
        "static_configs": [
            {"targets": [target], "labels": _meta(f"{app}-x7k2p", node, app)}
            for app, target in (("podres-exporter", exporter), ("podres-device-plugin", plugin))
        ],
        "relabel_configs": [
            _replace("__meta_kubernetes_namespace", "namespace"),
            _replace("__meta_kubernetes_service_name", "service"),
            _replace("__meta_kubernetes_pod_name", "pod"),
            _replace("__meta_kubernetes_pod_container_name", "container"),
            _replace("__meta_kubernetes_service_name", "job"),
            {"target_label": "endpoint", "replacement": "metrics"},
            # deploy/components/service-monitor/servicemonitor.yaml
            _replace("__meta_kubernetes_pod_node_name", "node"),
            {"action": "labeldrop", "regex": "namespace|pod|container"},
        ],
    }
    return SetUp("service-monitor", (job,), targets=2, node_label=True, banner=0)


def kubernetes_pods(exporter: str, plugin: str, node: str, *, honor: bool) -> SetUp:
    """The prometheus-community chart's ``kubernetes-pods`` job, both agents' pods in it."""
    job = {
        "job_name": "kubernetes-pods",
        "honor_labels": honor,
        "static_configs": [
            {"targets": [target], "labels": _meta(f"{app}-x7k2p", node, app)}
            for app, target in (("podres-exporter", exporter), ("podres-device-plugin", plugin))
        ],
        "relabel_configs": [
            {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"},
            _replace("__meta_kubernetes_namespace", "namespace"),
            _replace("__meta_kubernetes_pod_name", "pod"),
            {"source_labels": ["__meta_kubernetes_pod_phase"],
             "regex": "Pending|Succeeded|Failed|Completed", "action": "drop"},
            _replace("__meta_kubernetes_pod_node_name", "node"),
        ],
    }  # fmt: skip
    name = "kubernetes-pods" if honor else "kubernetes-pods-no-honor"
    return SetUp(name, (job,), targets=2, node_label=True, banner=0 if honor else 2)


def static(exporter: str) -> SetUp:
    """A plain static target: the exporter alone, no labels."""
    job = {"job_name": "podres", "static_configs": [{"targets": [exporter]}]}
    return SetUp("static", (job,), targets=1, node_label=False, banner=1)


@dataclass(frozen=True)
class Scraped:
    """A set-up's Prometheus, the exporter's own /metrics URL and the demo's node name."""

    setup: SetUp
    prom: Prometheus
    exporter_url: str
    node: str


def node_name(ours: Samples) -> str:
    """The node the exporter names itself (``podres_node_info{node}``)."""
    named = [dict(labels)["node"] for labels in select(ours, "podres_node_info")]
    assert len(named) == 1, f"the exporter serves one podres_node_info: {named}"
    return named[0]


SETUPS = ("service-monitor", "kubernetes-pods", "kubernetes-pods-no-honor", "static")


@pytest.fixture(scope="module")
def scraped(
    quiet_demo: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Scraped]]:
    """Every set-up's Prometheus, scraping the quiet demo, warmed up."""
    exporter, plugin = quiet_demo
    ours = scrape(f"http://{exporter}")
    node = node_name(ours) if select(ours, "podres_node_info") else "demo"
    setups = (
        service_monitor(exporter, plugin, node),
        kubernetes_pods(exporter, plugin, node, honor=True),
        kubernetes_pods(exporter, plugin, node, honor=False),
        static(exporter),
    )
    out: dict[str, Scraped] = {}
    with contextlib.ExitStack() as stack:
        for setup in setups:
            tmp = tmp_path_factory.mktemp(setup.name)
            url = stack.enter_context(running_prometheus(tmp, list(setup.jobs), up=setup.targets))
            out[setup.name] = Scraped(setup, Prometheus(url), f"http://{exporter}", node)
        time.sleep(WARM_UP_S)
        yield out


def _holders(rows: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (r["metric"].get("namespace", ""), r["metric"].get("pod", ""),
         r["metric"].get("container", ""))
        for r in rows
    }  # fmt: skip


def _ask(s: Scraped, question: str, **put: str) -> list[dict[str, Any]]:
    query = docs_queries()[question].replace(f'node="{DOCS_NODE}"', f'node="{s.node}"')
    for old, new in put.items():
        query = query.replace(old, new)
    return s.prom.query(query)


def _served_gpus(ours: Samples) -> tuple[str, str]:
    """A GPU index held by one container and one shared by several, as the exporter serves."""
    holders: dict[str, set[str]] = {}
    for labels in select(ours, "podres_container_device_info"):
        found = dict(labels)
        if found.get("gpu"):
            holders.setdefault(found["gpu"], set()).add(found["pod"])
    assert holders, "podres_container_device_info names GPUs by index (gpu)"
    one = min(g for g, pods in holders.items() if len(pods) == 1)
    shared = min(g for g, pods in holders.items() if len(pods) > 1)
    return one, shared


@pytest.mark.parametrize("name", SETUPS)
def test_who_holds_a_gpu_and_how_busy_it_is(scraped: dict[str, Scraped], name: str) -> None:
    """ "Who holds GPU N" gives the exporter's holders (every holder of a shared GPU), and
    its utilisation the exporter's holder labels, in every set-up that keeps our labels."""
    s = scraped[name]
    ours = scrape(s.exporter_url)
    for gpu in _served_gpus(ours):
        holders = _ask(s, "Who holds GPU 3 of node gpu-node-a1", **{'gpu="3"': f'gpu="{gpu}"'})
        served = select(ours, "podres_container_device_info", gpu=gpu)
        want = {(dict(k)["namespace"], dict(k)["pod"], dict(k)["container"]) for k in served}
        busy = _ask(s, "How busy is GPU 3 of node gpu-node-a1", **{'gpu="3"': f'gpu="{gpu}"'})
        [device] = select(ours, "podres_gpu_utilization_ratio", gpu=gpu)
        labels = dict(device)
        busy_want = {(labels["namespace"], labels["pod"], labels["container"])}
        assert {r["metric"]["node"] for r in holders + busy} == {s.node}
        if s.setup.banner == 2:
            # honor_labels false: our namespace became exported_namespace, and namespace is the
            # agent's own: the answer is wrong, which is why the banner speaks.
            assert {h[0] for h in _holders(holders)} == {AGENT_NAMESPACE}
            continue
        assert _holders(holders) == want, gpu
        assert len(busy) == 1 and 0 <= float(busy[0]["value"][1]) <= 1
        assert _holders(busy) == busy_want, gpu


@pytest.mark.parametrize("name", SETUPS)
def test_free_devices_per_numa_node(scraped: dict[str, Scraped], name: str) -> None:
    """Free devices per node, NUMA node and resource are the exporter's, named by its node."""
    s = scraped[name]
    ours = scrape(s.exporter_url)
    want = {
        (s.node, dict(k)["resource"], dict(k)["numa_node"]): v
        for k, v in select(ours, "podres_node_devices", state="free").items()
    }
    assert want
    got = {
        (r["metric"]["node"], r["metric"]["resource"], r["metric"]["numa_node"]):
        float(r["value"][1])
        for r in _ask(s, "Free devices per node, NUMA node and resource")
    }  # fmt: skip
    assert got == want


@pytest.mark.parametrize("name", SETUPS)
def test_gpus_per_namespace(scraped: dict[str, Scraped], name: str) -> None:
    """GPUs per namespace count each namespace's distinct GPUs and MIG instances; with
    honor_labels false every GPU lands in the agent's namespace (the banner says so)."""
    s = scraped[name]
    ours = scrape(s.exporter_url)
    held: dict[str, set[str]] = {}
    for labels in select(ours, "podres_container_device_info"):
        found = dict(labels)
        if found.get("uuid"):
            held.setdefault(found["namespace"], set()).add(found["uuid"])
    assert held
    got = {
        r["metric"].get("namespace", ""): float(r["value"][1])
        for r in _ask(s, "GPUs (and MIG instances) per namespace")
    }
    if s.setup.banner == 2:
        assert set(got) == {AGENT_NAMESPACE}
    else:
        assert got == {ns: len(uuids) for ns, uuids in held.items()}


@pytest.mark.parametrize("name", SETUPS)
def test_the_recording_rules_join_names_the_node(scraped: dict[str, Scraped], name: str) -> None:
    """The recording rules' join gives every series of the exporter its node, whether the
    scrape added a node label or not."""
    s = scraped[name]
    rows = s.prom.query(f'podres_node_devices{{job!~".*plugin.*"}} {NODE_JOIN}')
    served = select(scrape(s.exporter_url), "podres_node_devices")
    assert len(rows) == len(served) > 0
    assert {r["metric"]["node"] for r in rows} == {s.node}


@pytest.mark.parametrize("name", SETUPS)
def test_the_banner_says_what_the_scrape_lacks(scraped: dict[str, Scraped], name: str) -> None:
    """Every board's banner: 0 with our ServiceMonitor and a pod job with honor_labels, 1 on
    a static target without a node label, 2 where honor_labels is false."""
    s = scraped[name]
    without_node = s.prom.query('count(podres_build_info{node=""})')
    assert bool(without_node) == (not s.setup.node_label)
    for board in _boards():
        [banner] = [p for p in panels(board) if p["title"] == "Scrape labels"]
        [target] = banner["targets"]
        query = substitute(target["expr"], {"node": ".*", "cluster": ""})
        [row] = s.prom.query(query)
        assert float(row["value"][1]) == s.setup.banner, (board["uid"], query)


def _boards() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((ROOT / "dashboards").glob("*.json"))]


@pytest.mark.parametrize("name", SETUPS)
def test_top_through_each_set_up(
    scraped: dict[str, Scraped], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`podres top --prometheus URL` shows the demo under its node name with the exporter's
    figures (the static target too, its node from podres_node_info); where honor_labels is
    false it refuses, exit 2, naming what to change."""
    s = scraped[name]
    rc, out, err = top_json(capsys, "--prometheus", s.prom.url, "-o", "json", "--node", s.node)
    if s.setup.banner == 2:
        assert rc == 2 and "honor_labels: true" in err and "exported_namespace" in err, err
        return
    assert rc == 0, err
    [node] = json.loads(out)["nodes"]
    assert node["node"] == s.node
    ours = scrape(s.exporter_url)
    assert_header_matches(node, ours)
    exclusive = select(ours, "podres_container_exclusive_cpus")
    held = {(dict(k)["pod"], dict(k)["container"]) for k in exclusive}
    assert {(c["pod"], c["container"]) for c in node["containers"] if c["cpu_ids"]} == held


def test_top_says_what_a_static_target_lacks(
    quiet_demo: tuple[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Where the series have no node label and no podres_node_info names the node (an
    exporter from before it), `podres top --node NAME` exits 2 saying what to add."""
    exporter, _ = quiet_demo
    job = {
        "job_name": "podres",
        "static_configs": [{"targets": [exporter]}],
        "metric_relabel_configs": [
            {"source_labels": ["__name__"], "regex": "podres_node_info", "action": "drop"}
        ],
    }
    with running_prometheus(tmp_path, [job], up=1) as url:
        rows = Prometheus(url).query("podres_pods")
        assert rows and "node" not in rows[0]["metric"]
        rc, _, err = top_json(capsys, "--prometheus", url, "--node", "gpu-node-a1")
    assert rc == 2
    assert "series have no node label" in err and "target label node" in err, err
    assert re.search(r"nodes: 127\.0\.0\.1:\d+", err), err
