"""The manifests under deploy/, rendered with ``kubectl kustomize`` once per test session.

Every kustomization a user can apply is rendered: the base and each overlay, plus the base with
each component that no overlay uses (pod-monitor, network-policy, web-config), so that those are
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

# name -> the kustomization's directory (relative to deploy/), or the components added to the
# base by a kustomization written for the test.
KUSTOMIZATIONS: dict[str, str] = {
    "base": "base",
    "prometheus-operator": "overlays/prometheus-operator",
    "gpu": "overlays/gpu",
}
SYNTHETIC: dict[str, tuple[str, ...]] = {
    "base+pod-monitor": ("components/pod-monitor",),
    "base+network-policy": ("components/network-policy",),
    "base+web-config": ("components/web-config",),
}
ALL_RENDERINGS = (*KUSTOMIZATIONS, *SYNTHETIC)

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


def _synthetic(root: Path, components: tuple[str, ...]) -> Path:
    """A kustomization of the base plus ``components``; kustomize takes only relative paths."""
    root.mkdir(parents=True)

    def rel(target: str) -> str:
        return os.path.relpath(DEPLOY / target, root)

    text = yaml.safe_dump(
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [rel("base")],
            "components": [rel(c) for c in components],
        }
    )
    (root / "kustomization.yaml").write_text(text)
    return root


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test taking ``rendering`` runs once per name in ALL_RENDERINGS."""
    if "rendering" in metafunc.fixturenames:
        metafunc.parametrize("rendering", ALL_RENDERINGS)


@pytest.fixture(scope="session")
def render(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[Doc]]:
    """Render one of ALL_RENDERINGS by name (cached for the session)."""
    kubectl = _kubectl()
    cache: dict[str, list[Doc]] = {}

    def get(name: str) -> list[Doc]:
        if name not in cache:
            if name in KUSTOMIZATIONS:
                directory = DEPLOY / KUSTOMIZATIONS[name]
            else:
                directory = _synthetic(tmp_path_factory.mktemp("kustomize") / name, SYNTHETIC[name])
            cache[name] = _render(kubectl, directory)
        return cache[name]

    return get
