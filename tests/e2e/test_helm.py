"""The Helm chart on a real single-node cluster: ``helm install`` with the defaults (the
exporter alone) and the image built from this tree, the exporter Ready and reading the
kubelet with nothing advertised to it; ``helm upgrade`` adding the device plugin with a
resource named in the values; then ``helm uninstall`` leaving nothing behind.

Its own release and namespace; the exporter listens on the node's port 9842, as the kustomize
install's does, so the install is removed (and its process gone) before this module ends and
test_install.py's begins. Needs Helm as tests/helm finds it (``make helm``).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, ClusterError, wait_for
from tests.e2e.test_install import (
    EXPORTER_URL,
    FUSE,
    PLUGIN_URL,
    daemon_processes,
    fuse_allocatable,
    kubelet,
    metrics,
    one,
    pods_ready,
    proc_status,
)
from tests.helm.conftest import CHART, ENV_HELM, find_helm
from tests.support import http_get

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    # Before the session's cluster is built for nothing.
    pytest.mark.skipif(
        find_helm() is None,
        reason=f"helm not found (${ENV_HELM}, .tools/bin/helm, PATH): run `make helm`",
    ),
]

RELEASE = "podres-e2e"
NAMESPACE = "podres-helm"
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"
# The image the cluster fixture built and imported (tests/e2e/images.py PROJECT_IMAGE).
IMAGE_VALUES = ("image.registry=localhost", "image.repository=podres-exporter", "image.tag=e2e")
FUSE_REPLICAS = 4
PLUGIN_VALUES = json.dumps(
    {
        "enabled": True,
        "resources": [
            {"name": FUSE, "replicas": FUSE_REPLICAS, "discover": {"kind": "dev", "glob": "fuse"}}
        ],
    }
)


def component_ready(cluster: Cluster, component: str) -> bool:
    """Every pod of the release's ``component`` (exporter, device-plugin) Ready."""
    selector = f"{INSTANCE},app.kubernetes.io/component={component}"
    return bool(pods_ready(cluster, NAMESPACE, selector))


def plugin_sockets(cluster: Cluster) -> list[str]:
    return sorted(p.name for p in cluster.device_plugin_dir.iterdir() if p.is_socket())


class Helm:
    """Helm against the test cluster, with its caches and settings in a directory of its own."""

    def __init__(self, binary: str, cluster: Cluster, home: Path) -> None:
        self.binary = binary
        self.env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.binary, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=300,
            check=False,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"helm {' '.join(args)} failed: {result.stderr.strip()}")
        return result


@pytest.fixture(scope="module")
def helm(cluster: Cluster) -> Iterator[Helm]:
    binary = find_helm()
    assert binary is not None  # the module is skipped otherwise
    with tempfile.TemporaryDirectory(prefix="podres-e2e-helm-") as home:
        yield Helm(binary, cluster, Path(home))


@pytest.fixture(scope="module")
def released(cluster: Cluster, helm: Helm) -> Iterator[Cluster]:
    """The chart installed with its defaults and the local image; removed afterwards whatever
    happened, the agents' processes gone (the node's ports free again)."""
    sets = [arg for value in IMAGE_VALUES for arg in ("--set", value)]
    try:
        helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace", *sets)
        yield cluster
    finally:
        helm(
            "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout=120s", check=False
        )
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true")
        wait_for("the agents' processes to exit", lambda: not daemon_processes(), timeout=60)


def test_install_runs_the_exporter_alone(released: Cluster) -> None:
    """The release is the exporter's DaemonSet, Service and ServiceAccount; its pod becomes
    Ready, runs with no capabilities and knows its node's name."""
    cluster = released
    wait_for(
        "the exporter installed by Helm to be Ready",
        lambda: component_ready(cluster, "exporter"),
        timeout=180,
        interval=1,
    )
    names = cluster.kubectl(
        "get", "all,configmaps,serviceaccounts", "-n", NAMESPACE, "-l", INSTANCE, "-o", "name"
    ).stdout.split()
    assert sorted(n for n in names if not n.startswith(("pod/", "controllerrevision"))) == [
        "daemonset.apps/podres-exporter",
        "service/podres-exporter",
        "serviceaccount/podres-exporter",
    ]
    daemons = daemon_processes()
    assert set(daemons) == {"export"}  # no device plugin
    status = proc_status(daemons["export"])
    assert int(status["CapEff"], 16) == 0
    assert status["NoNewPrivs"] == "1"
    environ = Path(f"/proc/{daemons['export']}/environ").read_bytes().split(b"\0")
    assert f"NODE_NAME={cluster.node_name}".encode() in environ
    # Nothing advertised to the kubelet: no plugin socket beside its own.
    assert plugin_sockets(cluster) == ["kubelet.sock"]
    assert fuse_allocatable(cluster) == 0


def test_exporter_reads_the_kubelet(released: Cluster) -> None:
    """/metrics on the node's port 9842 says the kubelet is up and counts the pods the
    kubelet lists."""
    cluster = released

    def counted() -> bool:
        samples = metrics(EXPORTER_URL)
        listed, _ = kubelet(cluster)
        return (
            one(samples, "podres_kubelet_up") == 1
            and one(samples, "podres_pods") == len(listed.pod_resources) >= 1
        )

    wait_for("the exporter to count the kubelet's pods", counted, timeout=60, interval=1)


def test_upgrade_adds_the_plugin_with_the_named_resource(released: Cluster, helm: Helm) -> None:
    """``helm upgrade`` with devicePlugin values adds the plugin, which the real kubelet
    registers with the resource file the chart rendered: exactly the devices named there."""
    cluster = released
    helm(
        "upgrade",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--reuse-values",
        "--set-json",
        f"devicePlugin={PLUGIN_VALUES}",
    )
    wait_for(
        "the plugin installed by Helm to be Ready and its devices advertised",
        lambda: (
            component_ready(cluster, "device-plugin") and fuse_allocatable(cluster) == FUSE_REPLICAS
        ),
        timeout=240,
        interval=1,
    )
    assert one(metrics(PLUGIN_URL), "podres_plugin_registered", resource=FUSE) == 1
    assert set(daemon_processes()) == {"export", "plugin"}


def test_uninstall_leaves_nothing(released: Cluster, helm: Helm) -> None:
    """``helm uninstall`` removes every object of the release and the release itself; both
    agents' processes exit, the plugin's sockets go, and nothing listens on 9842 or 9843."""
    cluster = released
    helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout=120s")

    def left() -> list[str]:
        kinds = "all,configmaps,secrets,serviceaccounts,networkpolicies"
        args = ("get", kinds, "-n", NAMESPACE, "-l", INSTANCE, "-o", "name")
        names: list[str] = cluster.kubectl(*args).stdout.split()
        return names

    # The DaemonSet's pods go after it (background deletion): a grace period at most.
    wait_for("the release's objects to be gone", lambda: not left(), timeout=60, interval=1)
    releases = cluster.kubectl(
        "get", "secrets", "-n", NAMESPACE, "-l", f"owner=helm,name={RELEASE}", "-o", "name"
    ).stdout.split()
    assert releases == []
    assert helm("status", RELEASE, "--namespace", NAMESPACE, check=False).returncode != 0
    wait_for("the agents' processes to exit", lambda: not daemon_processes(), timeout=60)
    assert plugin_sockets(cluster) == ["kubelet.sock"]  # the plugin took its sockets along
    for url in (EXPORTER_URL, PLUGIN_URL):
        assert http_get(url + "/metrics")[0] == 0  # nothing listens any more
