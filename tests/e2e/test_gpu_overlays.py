"""The two GPU overlays installed on the real single-node cluster, as on a GPU node with
no GPU driver (there is no GPU here).

The node is made to look like a GPU node to the overlays: it gets the label
``nvidia.com/gpu.present=true`` that NVIDIA's GPU feature discovery sets, and the cluster a
RuntimeClass ``nvidia`` whose handler exists in the cluster's containerd (on plain runc: see
``Cluster._start_containerd``), standing in for what the NVIDIA GPU Operator provides. Then
``deploy/overlays/gpu`` (tests/e2e/overlay-gpu) is installed, checked and uninstalled, and
``deploy/overlays/gpu-with-podres-plugin`` (tests/e2e/overlay-gpu-plugin) after it. Without
a driver NVML is unavailable: that is no data, not an error, and no GPU is advertised.

The agents listen on the node's ports 9842 and 9843, as test_helm.py's and test_install.py's
do: this module sorts before them, and removes its installs, the label and the RuntimeClass
before it ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import NVIDIA_RUNTIME_HANDLER, Cluster, ClusterError, wait_for
from tests.e2e.conftest import REPO
from tests.e2e.test_install import (
    EXPORTER_URL,
    NAMESPACE,
    PART_OF,
    PLUGIN_URL,
    daemon_processes,
    device_resources,
    exporter_once,
    metrics,
    node_resources,
    one,
    plugin_sockets,
    pods_ready,
)
from tests.support import Samples, http_get

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

GPU_OVERLAY = REPO / "tests" / "e2e" / "overlay-gpu"
GPU_PLUGIN_OVERLAY = REPO / "tests" / "e2e" / "overlay-gpu-plugin"
GPU = "nvidia.com/gpu"
GPU_LABEL = "nvidia.com/gpu.present"
RUNTIME_CLASS = "nvidia"
EXPORTER = "exporter"
PLUGIN = "device-plugin"
# What pynvml raises where no libnvidia-ml.so is in the container (no driver, no toolkit).
NO_DRIVER = "NVML Shared Library Not Found"


def ready(cluster: Cluster, component: str) -> dict[str, Any]:
    """The one pod of ``component`` once it is Ready (the kubelet's own probes)."""
    (pod,) = wait_for(
        f"the {component} to be Ready",
        partial(pods_ready, cluster, NAMESPACE, f"app.kubernetes.io/component={component}"),
        timeout=120,
        interval=0.5,
    )
    return dict(pod)


def environment(pid: int) -> set[str]:
    return {e.decode() for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if e}


def log_events(cluster: Cluster, pod: dict[str, Any], event: str) -> list[dict[str, Any]]:
    """The JSON log events named ``event`` in the pod's container log, as the kubelet wrote
    it on the node (``kubectl logs`` would need the node's name to resolve)."""
    meta = pod["metadata"]
    container = pod["spec"]["containers"][0]["name"]
    directory = cluster.pod_logs / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
    found = []
    for log in sorted((directory / container).glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            # The CRI log format: time, stream, P(artial) or F(ull), then the line itself.
            fields = line.split(" ", 3)
            with contextlib.suppress(ValueError, IndexError):
                record = json.loads(fields[3])
                if isinstance(record, dict) and record.get("event") == event:
                    found.append(record)
    return found


def plugin_watched() -> Samples | None:
    """The plugin's /metrics once the kubelet holds its ListAndWatch stream for the GPUs."""
    samples = metrics(PLUGIN_URL)
    streams = one(samples, "podres_plugin_list_and_watch_streams", resource=GPU)
    return samples if streams == 1 else None


def assert_scheduled_as_a_gpu_pod(cluster: Cluster, pod: dict[str, Any]) -> None:
    spec = pod["spec"]
    assert spec["nodeName"] == cluster.node_name
    assert spec["nodeSelector"][GPU_LABEL] == "true"
    assert spec["runtimeClassName"] == RUNTIME_CLASS


def assert_no_gpu_resource(cluster: Cluster, before: dict[str, dict[str, str]]) -> None:
    """The node advertises no GPU: none in capacity or allocatable (absent, or 0 once a
    plugin registered the name with no device), and none in the kubelet's devices."""
    after = node_resources(cluster)
    for kind in ("capacity", "allocatable"):
        assert after[kind].get(GPU, "0") == "0", (kind, after[kind])
        assert set(after[kind]) - {GPU} <= set(before[kind]), kind
    assert GPU not in device_resources(cluster)


def uninstall(cluster: Cluster, overlay: Path) -> None:
    """``kubectl delete -k``, then check that nothing of the install is left: no object, no
    namespace, no process, no plugin socket, nothing listening on 9842 or 9843."""
    cluster.kubectl("delete", "-k", str(overlay), "--wait=true", "--timeout=120s")
    kinds = "all,configmaps,serviceaccounts,servicemonitors,podmonitors,prometheusrules"
    left = cluster.kubectl("get", kinds, "-A", "-l", PART_OF, "-o", "name").stdout.split()
    assert left == []
    gone = cluster.kubectl("get", "namespace", NAMESPACE, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    wait_for("the agents' processes to exit", lambda: not daemon_processes(), timeout=60)
    assert plugin_sockets(cluster) == []
    for url in (EXPORTER_URL, PLUGIN_URL):
        assert http_get(url + "/metrics")[0] == 0  # nothing listens any more


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def gpu_node(cluster: Cluster, crds: None) -> Iterator[tuple[Cluster, dict[str, Any]]]:
    """The node labelled as a GPU node and a RuntimeClass ``nvidia``, with what the node
    advertised before; afterwards both overlays, the RuntimeClass and the label removed."""
    before = node_resources(cluster)
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS},
        "handler": NVIDIA_RUNTIME_HANDLER,
    }
    try:
        cluster.kubectl("apply", "-f", "-", input_text=json.dumps(runtime_class))
        cluster.kubectl("label", "node", cluster.node_name, f"{GPU_LABEL}=true", "--overwrite")
        yield cluster, before
    finally:
        for overlay in (GPU_PLUGIN_OVERLAY, GPU_OVERLAY):
            cluster.kubectl(
                "delete", "-k", str(overlay), "--ignore-not-found", "--wait=true", check=False
            )
        with contextlib.suppress(ClusterError):
            wait_for("the agents' processes to exit", lambda: not daemon_processes(), timeout=60)
        cluster.kubectl("delete", "runtimeclass", RUNTIME_CLASS, "--ignore-not-found", check=False)
        cluster.kubectl("label", "node", cluster.node_name, f"{GPU_LABEL}-", check=False)


@pytest.fixture(scope="module")
def gpu_exporter(gpu_node: tuple[Cluster, dict[str, Any]]) -> tuple[Cluster, dict[str, Any]]:
    """``kubectl apply -k`` of the GPU overlay (the exporter with NVML)."""
    cluster, before = gpu_node
    cluster.kubectl("apply", "-k", str(GPU_OVERLAY))
    return cluster, before


@pytest.fixture(scope="module")
def gpu_plugin(gpu_node: tuple[Cluster, dict[str, Any]]) -> tuple[Cluster, dict[str, Any]]:
    """``kubectl apply -k`` of the GPU overlay with our device plugin for nvidia.com/gpu."""
    cluster, before = gpu_node
    cluster.kubectl("apply", "-k", str(GPU_PLUGIN_OVERLAY))
    return cluster, before


# --------------------------------------------------------------------------- tests


def test_gpu_overlay_runs_the_exporter_with_nvml_on_the_gpu_node(
    gpu_exporter: tuple[Cluster, dict[str, Any]],
) -> None:
    """The exporter runs Ready on the labelled node through the RuntimeClass, with every GPU
    visible to it; it reads the kubelet, says NVML is unavailable (no data, not an error),
    and the node advertises no GPU: the overlay has no device plugin."""
    cluster, before = gpu_exporter
    pod = ready(cluster, EXPORTER)
    assert_scheduled_as_a_gpu_pod(cluster, pod)
    samples = wait_for(
        "the exporter to read the kubelet",
        exporter_once(lambda m: one(m, "podres_kubelet_up") == 1),
        timeout=60,
        interval=0.5,
    )
    assert one(samples, "podres_nvml_available") == 0
    assert one(samples, "podres_collector_success", collector="gpu") == 1
    daemonsets = cluster.get_json("daemonsets", "-n", NAMESPACE)["items"]
    assert [d["metadata"]["name"] for d in daemonsets] == ["podres-exporter"]
    daemons = daemon_processes()
    assert set(daemons) == {"export"}
    env = environment(daemons["export"])
    assert {"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility"} <= env
    said = log_events(cluster, pod, "nvml_unavailable")
    assert said and all(e["level"] == "info" and NO_DRIVER in e["error"] for e in said), said
    assert plugin_sockets(cluster) == []
    assert_no_gpu_resource(cluster, before)


def test_gpu_overlay_uninstall_leaves_nothing(gpu_exporter: tuple[Cluster, dict[str, Any]]) -> None:
    """``kubectl delete -k`` of the GPU overlay removes all it installed."""
    cluster, _ = gpu_exporter
    uninstall(cluster, GPU_OVERLAY)


def test_gpu_plugin_overlay_advertises_no_gpu_without_a_driver(
    gpu_plugin: tuple[Cluster, dict[str, Any]],
) -> None:
    """With our plugin for nvidia.com/gpu and no driver, both agents run Ready on the GPU
    node; the plugin registers the resource with the kubelet but advertises no device, its
    /metrics count 0 devices, its log says NVML is unavailable, and the node has no GPU."""
    cluster, before = gpu_plugin
    exporter = ready(cluster, EXPORTER)
    plugin = ready(cluster, PLUGIN)  # /readyz: every resource registered with the kubelet
    for pod in (exporter, plugin):
        assert_scheduled_as_a_gpu_pod(cluster, pod)
    samples = wait_for(
        "the kubelet to watch the plugin's (empty) device list", plugin_watched, timeout=30
    )
    assert one(samples, "podres_plugin_registered", resource=GPU) == 1
    assert one(samples, "podres_plugin_devices", resource=GPU) == 0  # Healthy + Unhealthy
    daemons = daemon_processes()
    assert set(daemons) == {"export", "plugin"}
    assert "NVIDIA_VISIBLE_DEVICES=all" in environment(daemons["plugin"])
    said = log_events(cluster, plugin, "nvml_unavailable")
    assert said and all(NO_DRIVER in e["error"] for e in said), said
    assert plugin_sockets(cluster)  # the plugin serves its socket, registered
    assert_no_gpu_resource(cluster, before)


def test_gpu_plugin_overlay_uninstall_leaves_nothing(
    gpu_plugin: tuple[Cluster, dict[str, Any]],
) -> None:
    """``kubectl delete -k`` of the GPU plugin overlay removes all it installed, and the
    plugin takes its socket with it."""
    cluster, _ = gpu_plugin
    uninstall(cluster, GPU_PLUGIN_OVERLAY)
