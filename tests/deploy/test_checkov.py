"""checkov's Kubernetes checks pass on every rendered kustomization.

checkov pins its dependencies tightly (packaging < 24, which pytest 9.2 refuses), so it lives
in a virtualenv of its own and is looked up, in order, at ``$PODRES_CHECKOV``, on PATH, and at
``.venv-checkov/bin/checkov``; without it these tests are skipped, saying how to install it.
The checks it must skip are annotated on the objects and listed in test_manifests.py.
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

REPO = Path(__file__).resolve().parents[2]
ENV_CHECKOV = "PODRES_CHECKOV"
CHECKOV_VENV = REPO / ".venv-checkov"
INSTALL = (
    f"python3 -m venv {CHECKOV_VENV.name} && {CHECKOV_VENV.name}/bin/pip install checkov==3.3.30"
)

Render = Callable[[str], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def checkov() -> str:
    configured = os.environ.get(ENV_CHECKOV)
    if configured:
        if not os.access(configured, os.X_OK):
            pytest.fail(f"{ENV_CHECKOV}={configured} is not an executable")
        return configured
    found = shutil.which("checkov") or shutil.which("checkov", path=str(CHECKOV_VENV / "bin"))
    if found is None:
        pytest.skip(
            f"checkov not found (${ENV_CHECKOV}, PATH, {CHECKOV_VENV.name}/bin): install it "
            f"in its own virtualenv with `{INSTALL}` (its pins conflict with the dev "
            f"dependencies), or point {ENV_CHECKOV} at a checkov executable"
        )
    return found


def run_checkov(checkov: str, directory: Path) -> dict[str, Any]:
    """checkov's JSON report on ``directory``, offline."""
    # No download of the guideline mappings, so that it runs offline and quietly.
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE"}
    command = [checkov, "-d", str(directory), "--framework", "kubernetes"]
    command += ["--compact", "--quiet", "-o", "json", "--skip-download"]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=110, env=env, check=False
    )
    # 0: nothing failed, 1: some checks failed; anything else is checkov itself failing.
    assert result.returncode in (0, 1), f"checkov failed:\n{result.stdout}\n{result.stderr}"
    report = json.loads(result.stdout)
    # One framework gives one report; checkov answers a list when there are several.
    reports = report if isinstance(report, list) else [report]
    assert [r["check_type"] for r in reports] == ["kubernetes"]
    found: dict[str, Any] = reports[0]
    return found


def test_checkov_finds_nothing(
    render: Render, checkov: str, tmp_path: Path, rendering: str
) -> None:
    """checkov reports no failed check on the rendered objects (one file per object)."""
    docs = render(rendering)
    for i, doc in enumerate(docs):
        filename = f"{i:02d}-{doc['kind'].lower()}-{doc['metadata']['name']}.yaml"
        (tmp_path / filename).write_text(yaml.safe_dump(doc, sort_keys=False))

    report = run_checkov(checkov, tmp_path)
    summary = report["summary"]
    failed = [
        f"{c['check_id']} {c['check_name']}: {c['resource']} ({c['file_path']})"
        for c in report["results"].get("failed_checks", [])
    ]
    assert not failed, "checkov:\n" + "\n".join(failed)
    assert summary["failed"] == 0
    assert summary["parsing_errors"] == 0
    # Not vacuous: every object was read (checkov also counts each DaemonSet's pod), checks ran,
    # and the reviewed skips (two DaemonSets) were seen.
    assert summary["resource_count"] >= len(docs)
    assert summary["passed"] > 50
    assert summary["skipped"] >= 2
