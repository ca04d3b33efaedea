"""The joins of docs/peers.md, run by a real Prometheus on data that has both label sets.

Prometheus scrapes ``podres demo`` (as our ServiceMonitor does), and two real HTTP servers of
this test: one serving the demo's GPUs in dcgm-exporter's exact exposition format (its label
order: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, the MIG labels, ``Hostname``,
the Kubernetes mapping's ``container``/``namespace``/``pod``, then attributes), one serving the
demo's GPU pods in kube-state-metrics' format (``kube_pod_owner``, ``kube_pod_labels``,
``kube_pod_container_resource_requests``). Each documented join must give what the served
data says it should.
"""

from __future__ import annotations

import contextlib
import http.server
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.monitoring.prom import running_prometheus
from tests.support import Prometheus, Samples, http_server, scrape, select

pytestmark = pytest.mark.prometheus

DOC = Path(__file__).resolve().parents[2] / "docs" / "peers.md"
DRIVER = "550.54.15"
# The one container whose GPU request the kube-state-metrics exposition overstates by one.
OVERSTATED = ("ml-training", "llm-pretrain-0", "trainer")


def doc_queries() -> dict[str, str]:
    """Every ``promql`` block of docs/peers.md: each query under its comment, by comment."""
    out = {}
    for block in DOC.read_text().split("```promql\n")[1:]:
        lines = block.split("```", 1)[0].strip().splitlines()
        for comment, query in zip(lines[::2], lines[1::2], strict=True):
            out[comment.removeprefix("# ").split(":", 1)[0]] = query
    return out


@dataclass(frozen=True)
class Gpu:
    """A GPU or MIG instance of the demo, as podres_gpu_info names it."""

    uuid: str
    index: str
    model: str
    pci_bus_id: str
    numa_node: str
    parent_uuid: str
    gpu_instance: str


def gpus(ours: Samples) -> list[Gpu]:
    out = []
    for labels in select(ours, "podres_gpu_info"):
        found = dict(labels)
        out.append(
            Gpu(found["uuid"], found["gpu"], found["model"], found["pci_bus_id"],
                found["numa_node"], found.get("parent_uuid", ""), found.get("gpu_instance", ""))
        )  # fmt: skip
    return out


def utilisation(gpu: Gpu) -> int:
    """What the dcgm exposition says of a GPU: a figure of its own for each."""
    return 10 + int(gpu.index) + (int(gpu.gpu_instance) if gpu.gpu_instance else 0)


def dcgm_exposition(all_gpus: list[Gpu], hostname: str) -> str:
    """DCGM_FI_DEV_GPU_UTIL as dcgm-exporter writes it: a whole GPU per series, a MIG
    instance as its parent's UUID with GPU_I_PROFILE and GPU_I_ID; no MIG-enabled parent."""
    parents = {g.uuid: g for g in all_gpus}
    lines = [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ]
    for gpu in all_gpus:
        if any(g.parent_uuid == gpu.uuid for g in all_gpus):
            continue  # a MIG-enabled GPU: dcgm-exporter reports its instances
        parent = parents.get(gpu.parent_uuid, gpu)
        mig = ""
        if gpu.parent_uuid:
            profile = gpu.model.rsplit(" MIG ", 1)[1]
            mig = f',GPU_I_PROFILE="{profile}",GPU_I_ID="{gpu.gpu_instance}"'
        lines.append(
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="{parent.index}",UUID="{parent.uuid}",'
            f'pci_bus_id="0000{parent.pci_bus_id}",device="nvidia{parent.index}",'
            f'modelName="{parent.model}"{mig},Hostname="{hostname}",container="",namespace="",'
            f'pod="",DCGM_FI_DRIVER_VERSION="{DRIVER}"}} {utilisation(gpu)}'
        )
    return "\n".join(lines) + "\n"


def holders(ours: Samples) -> list[dict[str, str]]:
    return [dict(labels) for labels in select(ours, "podres_container_device_info")]


def owner(pod: str) -> str:
    return pod.rsplit("-", 1)[0]


def ksm_exposition(held: list[dict[str, str]]) -> str:
    """The GPU pods in kube-state-metrics' format: owner, a team label, GPU requests (the
    OVERSTATED container's one more than it holds)."""
    pods = sorted({(h["namespace"], h["pod"]) for h in held if h["resource"].startswith("nvidia")})
    requests: dict[tuple[str, str, str], int] = {}
    for h in held:
        if h["resource"] == "nvidia.com/gpu":
            key = (h["namespace"], h["pod"], h["container"])
            requests[key] = requests.get(key, 0) + 1
    requests[OVERSTATED] += 1
    lines = [
        "# HELP kube_pod_owner Information about the Pod's owner.",
        "# TYPE kube_pod_owner gauge",
        *(f'kube_pod_owner{{namespace="{ns}",pod="{pod}",uid="uid-{pod}",'
          f'owner_kind="StatefulSet",owner_name="{owner(pod)}",owner_is_controller="true"}} 1'
          for ns, pod in pods),
        "# HELP kube_pod_labels Kubernetes labels converted to Prometheus labels.",
        "# TYPE kube_pod_labels gauge",
        *(f'kube_pod_labels{{namespace="{ns}",pod="{pod}",uid="uid-{pod}",'
          f'label_team="team-{ns}"}} 1' for ns, pod in pods),
        "# HELP kube_pod_container_resource_requests The number of requested request resource "
        "by a container. It is recommended to use the kube_pod_resource_requests metric "
        "exposed by kube-scheduler instead, as it is more precise.",
        "# TYPE kube_pod_container_resource_requests gauge",
        *(f'kube_pod_container_resource_requests{{namespace="{ns}",pod="{pod}",uid="uid-{pod}",'
          f'container="{c}",node="demo",resource="nvidia_com_gpu",unit="integer"}} {n}'
          for (ns, pod, c), n in sorted(requests.items())),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def serving(text: str) -> Iterator[str]:
    """A real HTTP server answering ``/metrics`` with ``text``: its ``HOST:PORT``."""
    body = text.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with http_server(Handler) as port:
        yield f"127.0.0.1:{port}"


@dataclass(frozen=True)
class Peers:
    prom: Prometheus
    gpus: list[Gpu]
    held: list[dict[str, str]]


@pytest.fixture(scope="module")
def peers(quiet_demo: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peers]:
    """Prometheus scraping the demo's exporter, the dcgm and the kube-state-metrics servers."""
    exporter, _ = quiet_demo
    ours = scrape(f"http://{exporter}")
    [node] = [dict(labels)["node"] for labels in select(ours, "podres_node_info")]
    all_gpus, held = gpus(ours), holders(ours)
    with serving(dcgm_exposition(all_gpus, node)) as dcgm, serving(ksm_exposition(held)) as ksm:
        jobs = [
            {"job_name": name, "honor_labels": True,
             "static_configs": [{"targets": [target], "labels": labels}]}
            for name, target, labels in (
                ("podres-exporter", exporter, {"node": node}),
                ("gpu-operator/nvidia-dcgm-exporter", dcgm, {}),
                ("kube-state-metrics", ksm, {}),
            )
        ]  # fmt: skip
        tmp = tmp_path_factory.mktemp("peers")
        with running_prometheus(tmp, jobs, up=3) as url:
            yield Peers(Prometheus(url), all_gpus, held)


def _ask(peers: Peers, question: str) -> list[dict[str, Any]]:
    return peers.prom.query(doc_queries()[question])


def _whole(peers: Peers) -> dict[str, Gpu]:
    """The GPUs dcgm-exporter reports as a whole (not MIG-enabled, not instances), by UUID."""
    parents = {g.parent_uuid for g in peers.gpus}
    return {g.uuid: g for g in peers.gpus if not g.parent_uuid and g.uuid not in parents}


def _holder(labels: dict[str, str]) -> tuple[str, str, str, str]:
    return labels["namespace"], labels["pod"], labels["container"], labels["device_id"]


def test_dcgm_utilisation_of_each_holder_by_uuid(peers: Peers) -> None:
    """Each holder of a whole GPU (each of a shared GPU too) gets dcgm's figure of its GPU."""
    whole = _whole(peers)
    want = {_holder(h): utilisation(whole[h["uuid"]]) for h in peers.held if h.get("uuid") in whole}
    assert len({h[1] for h in want}) > 2
    got = {_holder(r["metric"]): float(r["value"][1]) for r in _ask(peers, _UUID)}
    assert got == want


_UUID = "dcgm utilisation of each holder, by UUID"


def test_dcgm_utilisation_of_each_holder_by_index_and_node(peers: Peers) -> None:
    """The same figures joined on podres's gpu and node against dcgm's gpu and Hostname."""
    whole = {g.index: g for g in _whole(peers).values()}
    want = {
        _holder(h): utilisation(whole[h["gpu"]])
        for h in peers.held
        if h.get("gpu") in whole and not h.get("gpu_instance")
    }
    assert want
    question = "dcgm utilisation of each holder, by index and node"
    got = {_holder(r["metric"]): float(r["value"][1]) for r in _ask(peers, question)}
    assert got == want


def test_dcgm_series_get_the_gpus_numa_node(peers: Peers) -> None:
    """Every dcgm series (MIG instances too, by their parent's UUID) gets its NUMA node."""
    by_uuid = {g.uuid: g for g in peers.gpus}
    rows = _ask(peers, "dcgm series with the GPU's NUMA node from podres")
    served = len(dcgm_exposition(peers.gpus, "x").splitlines()) - 2
    assert len(rows) == served > 0
    for row in rows:
        labels = row["metric"]
        assert labels["numa_node"] == by_uuid[labels["UUID"]].numa_node, labels
        assert labels["modelName"] == by_uuid[labels["UUID"]].model


def test_dcgm_joins_the_kubelets_device_ids_without_the_gpu_collector(peers: Peers) -> None:
    """On the kubelet's device id alone, each holder of a whole GPU or of a time-sliced
    replica of one gets dcgm's figure; MIG devices and other devices stay out."""
    whole = _whole(peers)
    want = {}
    for h in peers.held:
        uuid = h["device_id"].split("::", 1)[0]
        if uuid in whole:
            want[_holder(h)] = utilisation(whole[uuid])
    assert any("::" in key[3] for key in want)
    question = "dcgm utilisation of each holder with podres's GPU collector off"
    got = {_holder(r["metric"]): float(r["value"][1]) for r in _ask(peers, question)}
    assert got == want


def test_gpus_held_per_owner(peers: Peers) -> None:
    """kube_pod_owner groups the held GPUs by the pods' controllers."""
    want: dict[tuple[str, str], float] = {}
    for h in peers.held:
        if h["resource"] == "nvidia.com/gpu":
            key = (h["namespace"], owner(h["pod"]))
            want[key] = want.get(key, 0) + 1
    assert want
    got = {
        (r["metric"]["namespace"], r["metric"]["owner_name"]): float(r["value"][1])
        for r in _ask(peers, "GPUs held per owner (Deployment's ReplicaSet, StatefulSet, Job...)")
        if r["metric"]["owner_kind"] == "StatefulSet"
    }
    assert got == want


def test_devices_held_with_the_pods_team_label(peers: Peers) -> None:
    """kube_pod_labels puts each pod's label on the devices it holds."""
    want = {
        _holder(h): f"team-{h['namespace']}"
        for h in peers.held
        if h["resource"].startswith("nvidia")
    }
    rows = _ask(peers, "Devices held with the pod's team label (kube-state-metrics exports the "
                "pod labels in its --metric-labels-allowlist)")  # fmt: skip
    assert {_holder(r["metric"]): r["metric"]["label_team"] for r in rows} == want


def test_containers_holding_another_number_of_gpus_than_requested(peers: Peers) -> None:
    """The one container whose request the exposition overstates, by one; no other."""
    rows = _ask(peers, "Containers holding another number of GPUs than they request")
    got = {
        (r["metric"]["namespace"], r["metric"]["pod"], r["metric"]["container"]):
        float(r["value"][1])
        for r in rows
    }  # fmt: skip
    assert got == {OVERSTATED: 1.0}
