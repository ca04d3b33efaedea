"""The one-command run (``tools/gpu-tier.sh``, ``make test-gpu``) where no driver answers:
from a copy of the tree in another directory, with a venv whose interpreter starts and with
one whose base interpreter is not at its path, it exits 0, prints the skip message and
writes a report that says "no GPU". And on the stand-in driver (``standin.py``), the gated
tests themselves run green."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.gpu.conftest import driver
from tests.gpu.probe import SKIP_PREFIX
from tests.gpu.standin import H100 as STANDIN_H100
from tests.gpu.standin import MIG as STANDIN_MIG
from tests.gpu.standin import write_standin
from tests.support import run_in_group

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
_TREE = ("src", "tests", "tools", "pyproject.toml", "Makefile")
_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture
def copied_tree(tmp_path: Path) -> Path:
    """The tree's source, tests, tools and build files under another (0700) directory."""
    if driver().ok:
        pytest.skip("a driver answers here: the skip path is for machines without one")
    home = tmp_path / "private"
    home.mkdir(mode=0o700)
    tree = home / "copy"
    tree.mkdir()
    for name in _TREE:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, tree / name)
    return tree


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PODRES_GPU", "PYTHON", "PYTEST"))
    }
    env.pop("OUT", None)
    return {**env, **extra}


def _check_report(out: Path, stdout: str) -> None:
    assert f"{SKIP_PREFIX} (" in stdout
    assert "no GPU: " in stdout
    report = json.loads((out / "report.json").read_text())
    assert report["gpu"] is False and report["summary"].startswith(f"no GPU: {SKIP_PREFIX}")
    assert {o["outcome"] for o in report["outcomes"]} == {"skipped"}
    assert len(report["outcomes"]) >= 6
    assert (out / "report.md").read_text().startswith("# GPU tier report\n\n**no GPU: ")


def test_the_script_skips_and_reports_no_gpu_from_a_copied_tree(
    copied_tree: Path, tmp_path: Path
) -> None:
    """tools/gpu-tier.sh from the copy, on this test's venv: exit 0, the skip message,
    a report saying "no GPU" in the folder given."""
    out = tmp_path / "report"
    done = run_in_group(
        [str(copied_tree / "tools" / "gpu-tier.sh"), str(out)],
        timeout=120,
        cwd=tmp_path,
        env=_env(PODRES_GPU_VENV=sys.prefix),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _check_report(out, done.stdout)


def test_make_test_gpu_writes_its_report_under_out(copied_tree: Path, tmp_path: Path) -> None:
    """``make test-gpu`` with ``OUT`` set: the report goes there."""
    if shutil.which("make") is None:
        pytest.skip("no make here")
    out = tmp_path / "out"
    done = run_in_group(
        ["make", "-s", "-C", str(copied_tree), "test-gpu"],
        timeout=120,
        env=_env(PODRES_GPU_VENV=sys.prefix, OUT=str(out)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _check_report(out, done.stdout)


def test_a_venv_whose_interpreter_moved_runs_on_a_python_of_its_version(
    copied_tree: Path, tmp_path: Path
) -> None:
    """A venv copied from a machine whose base interpreter lived elsewhere (its python a
    dangling link): the script runs python3.X from PATH with the venv's packages."""
    if shutil.which(f"python{_VERSION}") is None:
        pytest.skip(f"no python{_VERSION} on PATH")
    venv = copied_tree / ".venv-gpu"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / f"python{_VERSION}").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = /nowhere/bin\nversion = {sys.version.split()[0]}\n")
    (venv / "bin" / "python").symlink_to("/nowhere/bin/python3")
    packages = next(p for p in map(Path, sys.path) if p.name == "site-packages" and p.is_dir())
    (venv / "lib" / f"python{_VERSION}" / "site-packages").symlink_to(packages)
    out = tmp_path / "report"
    done = run_in_group(
        [str(copied_tree / "tools" / "gpu-tier.sh"), str(out)],
        timeout=120,
        cwd=copied_tree,
        env=_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"using python{_VERSION} with its packages" in done.stdout
    _check_report(out, done.stdout)


def test_the_tier_runs_green_on_a_stand_in_driver(tmp_path: Path) -> None:
    """With the stand-in driver on PYTHONPATH (a fake NVML: one H100 without PCIe
    throughput, one A100 with MIG on), the tier's gated tests run: the script exits 0 and
    its report lists each field read or unsupported, the timings and the plugin's answer;
    only the checks that need nvidia-smi or libcuda skip, each saying why."""
    if driver().ok:
        pytest.skip("a driver answers here: the tier runs on it instead")
    write_standin(tmp_path / "standin")
    out = tmp_path / "report"
    done = run_in_group(
        [str(ROOT / "tools" / "gpu-tier.sh"), str(out)],
        timeout=300,
        cwd=tmp_path,
        env=_env(PODRES_GPU_VENV=sys.prefix, PYTHONPATH=str(tmp_path / "standin")),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["gpu"] is True and report["summary"].startswith("GPU tier passed: ")
    outcomes = {o["test"].rsplit("::", 1)[1]: o for o in report["outcomes"]}
    skipped = {name for name, o in outcomes.items() if o["outcome"] == "skipped"}
    assert skipped <= {
        "test_export_names_the_gpus_as_nvidia_smi_does",
        "test_a_cuda_process_is_counted_unattributed",
    }
    assert {o["outcome"] for o in outcomes.values()} <= {"passed", "skipped"}
    status = {(f["uuid"], f["field"]): f["status"] for f in report["fields"]}
    assert status[(STANDIN_H100, "pcie_tx_bytes_per_second")] == "unsupported"
    assert status[(STANDIN_H100, "power_watts")] == "read"
    assert status[(STANDIN_MIG, "memory_total_bytes")] == "read"
    assert len(report["timings"]) == 4
    assert "one NVML read, fake NVML, 2 GPU(s), every field: median " in done.stdout
    assert "nvidia.com/mig: 1 advertised healthy" in " ".join(report["checks"]["plugin"])
