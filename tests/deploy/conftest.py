"""The manifests under deploy/, rendered with ``kubectl kustomize`` once per test session.

Every kustomization a user can apply is rendered: the base and each overlay, the end-to-end
tier's installs, and the combinations of components that docs/deploy.md names (each component
that no overlay uses, with the exporter alone and with the device plugin), so that those are
validated too. Without kubectl on PATH these tests are skipped, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

# name -> the kustomization's directory (relative to the checkout): every overlay, and the
# end-to-end tier's kustomize installs (the image rewritten to a local one).
KUSTOMIZATIONS: dict[str, str] = {
    "base": "deploy/base",
    "prometheus-operator": "deploy/overlays/prometheus-operator",
    "gpu": "deploy/overlays/gpu",
    "device-plugin": "deploy/overlays/device-plugin",
    "gpu-with-podres-plugin": "deploy/overlays/gpu-with-podres-plugin",
    "e2e": "tests/e2e/overlay",
    "e2e-plugin": "tests/e2e/overlay-plugin",
    "e2e-gpu": "tests/e2e/overlay-gpu",
    "e2e-gpu-plugin": "tests/e2e/overlay-gpu-plugin",
}
# name -> (the kustomization it builds on, the components added in this order): the
# combinations docs/deploy.md names, written as a kustomization for the test, so that each
# component is rendered and validated alone and with the device plugin.
SYNTHETIC: dict[str, tuple[str, tuple[str, ...]]] = {
    "base+pod-monitor": ("base", ("pod-monitor",)),
    "base+network-policy": ("base", ("network-policy",)),
    "base+web-config": ("base", ("web-config",)),
    "base+kubelet-root-microk8s": ("base", ("kubelet-root-microk8s",)),
    "device-plugin+network-policy": ("overlays/device-plugin", ("network-policy",)),
    "device-plugin+web-config": ("overlays/device-plugin", ("web-config",)),
    "device-plugin+kubelet-root-k0s": ("overlays/device-plugin", ("kubelet-root-k0s",)),
    "prometheus-operator+kube-prometheus-stack": (
        "overlays/prometheus-operator",
        ("kube-prometheus-stack",),
    ),
    "device-plugin+pod-monitor+prometheus-rules+kube-prometheus-stack": (
        "overlays/device-plugin",
        ("pod-monitor", "prometheus-rules", "kube-prometheus-stack"),
    ),
}
# The opt-in kubelet mounts (components pods-api and kubelet-files): each alone, and both
# with a kubelet root listed after them (the plugin's overlay) and before them.
SYNTHETIC.update(
    {
        "base+pods-api": ("base", ("pods-api",)),
        "base+kubelet-files": ("base", ("kubelet-files",)),
        "device-plugin+kubelet-files+pods-api+kubelet-root-k0s": (
            "overlays/device-plugin",
            ("kubelet-files", "pods-api", "kubelet-root-k0s"),
        ),
        "base+kubelet-root-microk8s+kubelet-files+pods-api": (
            "base",
            ("kubelet-root-microk8s", "kubelet-files", "pods-api"),
        ),
    }
)
ALL_RENDERINGS = (*KUSTOMIZATIONS, *SYNTHETIC)

# The renderings that hold the device plugin; every other one must hold no trace of it.
WITH_PLUGIN = frozenset(
    {"device-plugin", "gpu-with-podres-plugin", "e2e-plugin", "e2e-gpu-plugin"}
    | {name for name in SYNTHETIC if name.startswith("device-plugin+")}
)

Doc = dict[str, Any]


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip(
            "kubectl is not on PATH: the manifests under deploy/ are rendered with "
            "`kubectl kustomize` (kubectl 1.27 or later)"
        )
    return kubectl


def _render(kubectl: str, directory: Path) -> list[Doc]:
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


def _synthetic(root: Path, resource: str, components: tuple[str, ...]) -> Path:
    """A kustomization of ``resource`` plus ``components`` (both relative to deploy/);
    kustomize takes only relative paths."""
    root.mkdir(parents=True)

    def rel(target: str) -> str:
        return os.path.relpath(DEPLOY / target, root)

    text = yaml.safe_dump(
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [rel(resource)],
            "components": [rel(f"components/{c}") for c in components],
        }
    )
    (root / "kustomization.yaml").write_text(text)
    return root


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking ``rendering`` runs once per name in ALL_RENDERINGS; one that also takes
    ``agent`` runs once per agent the rendering holds (the module's ``AGENTS``, the exporter
    first: the device plugin only where WITH_PLUGIN says)."""
    if "rendering" not in metafunc.fixturenames:
        return
    if "agent" not in metafunc.fixturenames:
        metafunc.parametrize("rendering", ALL_RENDERINGS)
        return
    exporter, *others = metafunc.module.AGENTS
    pairs = [(name, exporter) for name in ALL_RENDERINGS]
    pairs += [(name, agent) for name in sorted(WITH_PLUGIN) for agent in others]
    ids = [f"{name}-{agent.component}" for name, agent in pairs]
    metafunc.parametrize(("rendering", "agent"), pairs, ids=ids)


@pytest.fixture(scope="session")
def render(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[Doc]]:
    """Render one of ALL_RENDERINGS by name (cached for the session)."""
    kubectl = _kubectl()
    cache: dict[str, list[Doc]] = {}

    def get(name: str) -> list[Doc]:
        if name not in cache:
            if name in KUSTOMIZATIONS:
                directory = REPO / KUSTOMIZATIONS[name]
            else:
                resource, components = SYNTHETIC[name]
                root = tmp_path_factory.mktemp("kustomize") / name
                directory = _synthetic(root, resource, components)
            cache[name] = _render(kubectl, directory)
        return cache[name]

    return get
