"""The end-to-end tier: the real image, the real manifests, a real single-node cluster.

Opt-in: set ``PODRES_E2E_KUBERNETES`` to a directory holding upstream ``kubelet``,
``kube-apiserver``, ``kube-controller-manager`` and ``kube-scheduler`` binaries (plain, or
``NAME-v1.28.7-linux-amd64.xz``). Without it every test here is skipped, saying so.
It needs root, and etcd, containerd, runc, the CNI plugins, podman, debootstrap, a C
compiler and kubectl on the machine (``.ci/run`` installs them); ``docs/deploy.md`` says
how to run it by hand. ``PODRES_E2E_KEEP=1`` keeps the work directory (logs) afterwards.
Before anything is built or started, the node ports its pods listen on (9842, 9843) must
be free (``ports``): if one is taken, every test fails saying which, and by what.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import images
from tests.e2e.cluster import PAUSE_IMAGE, Cluster, unpack_binaries, wait_for
from tests.e2e.ports import busy_ports

ENV_KUBERNETES = "PODRES_E2E_KUBERNETES"
ENV_KEEP = "PODRES_E2E_KEEP"
REPO = Path(__file__).resolve().parents[2]
# The install of docs/deploy.md: the exporter alone, then with the device plugin added.
OVERLAY = REPO / "tests" / "e2e" / "overlay"
PLUGIN_OVERLAY = REPO / "tests" / "e2e" / "overlay-plugin"
CRDS = REPO / "tests" / "deploy" / "crds"
TOOLS = (
    "etcd",
    "containerd",
    "runc",
    "ctr",
    "podman",
    "kubectl",
    "unshare",
    "nsenter",
    "cc",
    "make",
    "openssl",
    "xz",
    "debootstrap",
)


def _log(message: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {message}", flush=True)  # noqa: T201 - progress


@pytest.fixture(scope="session")
def kube_binaries_dir() -> Path:
    value = os.environ.get(ENV_KUBERNETES)
    if not value:
        pytest.skip(
            f"end-to-end tier not requested: set {ENV_KUBERNETES} to a directory with the "
            "Kubernetes v1.28 kubelet, kube-apiserver, kube-controller-manager and "
            "kube-scheduler binaries (docs/deploy.md, 'End-to-end tests on a real cluster')"
        )
    busy = busy_ports()  # before anything is built or started
    if busy is not None:
        pytest.fail(busy)
    path = Path(value)
    if not path.is_dir():
        pytest.fail(f"{ENV_KUBERNETES}={value}: no such directory")
    if os.geteuid() != 0:
        pytest.fail(f"{ENV_KUBERNETES} is set but the end-to-end tier needs root")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{ENV_KUBERNETES} is set but these tools are missing: {', '.join(missing)}")
    return path


@pytest.fixture(scope="session")
def cluster(kube_binaries_dir: Path) -> Iterator[Cluster]:
    """Images built, a cluster started with them imported; everything removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix="podres-e2e-"))
    started = time.monotonic()
    binaries = unpack_binaries(kube_binaries_dir, work / "bin")
    images.ensure_base_image(_log)
    images.build_project_image(REPO, _log)
    images.build_pause_image(PAUSE_IMAGE, _log)
    archives = [
        images.save(images.PROJECT_IMAGE, work / "podres.tar"),
        images.save(PAUSE_IMAGE, work / "pause.tar"),
    ]
    _log(f"images ready after {time.monotonic() - started:.0f}s; starting the cluster in {work}")
    cluster = Cluster(binaries, work)
    ok = False
    try:
        cluster.start()
        for archive in archives:
            cluster.import_image(archive)
        _log(f"cluster ready after {time.monotonic() - started:.0f}s")
        yield cluster
        ok = True
    finally:
        stopping = time.monotonic()
        cluster.stop()
        _log(f"cluster torn down in {time.monotonic() - stopping:.0f}s")
        if ok and not os.environ.get(ENV_KEEP):
            shutil.rmtree(work, ignore_errors=True)
        else:
            _log(f"work directory kept: {work} (logs in {work / 'logs'})")


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> None:
    """The Prometheus Operator CRDs the install's ServiceMonitor needs, established."""
    for crd in sorted(CRDS.glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
    wait_for(
        "the Prometheus Operator CRDs to be established",
        lambda: (
            cluster.kubectl(
                "wait", "--for=condition=Established", "--timeout=5s", "crd", "--all"
            ).returncode
            == 0
        ),
        timeout=60,
    )
