"""The distribution: the sdist and wheel that `make dist` builds, the wheel installed alone into
a fresh virtualenv outside the checkout, and its `podres top --prometheus` against a real
Prometheus scraping its own `podres demo`: what a user gets from `pipx install` of the file."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support import (
    Prometheus,
    free_port,
    http_get,
    run_in_group,
    scrape,
    select,
    wait_until,
)
from tests.top.support import assert_header_matches

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("podres_exporter", "podres_sim")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

# What the build leaves in a checkout, and what is not the project's: not copied to build from.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*cache", ".hypothesis"
)


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


@dataclass(frozen=True)
class Installed:
    bin: Path
    home: Path  # a directory outside the checkout: the commands' working directory
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run_in_group(
            [str(self.bin / "podres"), *args],
            timeout=timeout,
            cwd=self.home,
            env=self.env,
            stdin=subprocess.DEVNULL,
        )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist, and the wheel built from it, as `make dist` builds them (without build
    isolation: the project venv's setuptools, no registry), from a copy of the checkout."""
    tree = tmp_path_factory.mktemp("tree") / "src-tree"
    shutil.copytree(ROOT, tree, ignore=_NOT_SOURCE, symlinks=True)
    out = tree.parent / "dist"
    done = run_in_group(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(tree)],
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return Dist(wheel, sdist)


@pytest.fixture(scope="module")
def installed(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel in a fresh virtualenv (no system site-packages, no editable checkout), its
    declared dependencies resolved by pip; pinned to the project venv's versions, so that
    pip's cache answers instead of the registry where it can."""
    base = tmp_path_factory.mktemp("laptop")
    venv = base / "venv"
    made = run_in_group([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=60)
    assert made.returncode == 0, made.stderr
    frozen = run_in_group([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], timeout=60)
    assert frozen.returncode == 0, frozen.stderr
    pins = base / "pins.txt"
    # A package installed from a URL cannot be a constraint: pip resolves it from the index.
    pins.write_text("".join(p for p in frozen.stdout.splitlines(True) if " @ " not in p))
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    done = run_in_group([*pip, "install", "-q", "-c", str(pins), str(dist.wheel)], timeout=300)
    assert done.returncode == 0, done.stderr
    home = base / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PODRES_"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return Installed(venv / "bin", home, env)


def _source_files(package: str) -> set[str]:
    src = ROOT / "src"
    return {
        p.relative_to(src).as_posix()
        for p in (src / package).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_wheel_holds_both_packages_their_data_the_script_and_the_dependencies(
    dist: Dist,
) -> None:
    """Every file of src/ (scenario TOMLs, py.typed, stubs), `podres`, the declared deps."""
    with zipfile.ZipFile(dist.wheel) as whl:
        names = set(whl.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        metadata = whl.read(f"{info}/METADATA").decode()
    for package in PACKAGES:
        missing = _source_files(package) - names
        assert not missing, f"left out of the wheel: {sorted(missing)}"
    assert "podres_sim/scenario/files/demo.toml" in names
    assert {"podres_exporter/py.typed", "podres_sim/py.typed"} <= names
    assert f"{info}/licenses/LICENSE" in names
    assert "podres = podres_exporter.entry:main" in entry_points.splitlines()
    required = {
        str(Requirement(line.removeprefix("Requires-Dist: ")))
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    }
    assert required == {str(Requirement(r)) for r in PROJECT["dependencies"]}
    assert f"Version: {PROJECT['version']}" in metadata.splitlines()


def test_sdist_holds_the_license_readme_and_changelog(dist: Dist) -> None:
    """The sdist carries LICENSE, README.md, CHANGELOG.md and pyproject.toml at its top."""
    with tarfile.open(dist.sdist) as tar:
        top = {Path(n).relative_to(Path(n).parts[0]).as_posix() for n in tar.getnames()}
    assert {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml"} <= top
    assert "src/podres_sim/scenario/files/demo.toml" in top


def test_installed_wheel_runs_outside_the_checkout(installed: Installed) -> None:
    """`podres --version` and `podres top --help` work, from the venv's own packages only."""
    version = installed.run("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.split() == ["podres", PROJECT["version"]]
    top_help = installed.run("top", "--help")
    assert top_help.returncode == 0, top_help.stderr
    assert "--prometheus" in top_help.stdout
    # Every module imports with the declared dependencies alone, from the venv, not src/.
    program = (
        "import importlib, pkgutil, sys\n"
        f"for name in {PACKAGES!r}:\n"
        "    pkg = importlib.import_module(name)\n"
        "    assert sys.prefix in pkg.__file__, pkg.__file__\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, name + '.'):\n"
        "        if not m.name.endswith('__main__'):\n"
        "            importlib.import_module(m.name)\n"
    )
    walked = run_in_group(
        [str(installed.bin / "python"), "-I", "-c", program],
        timeout=60,
        cwd=installed.home,
        env=installed.env,
    )
    assert walked.returncode == 0, walked.stderr


@contextlib.contextmanager
def _demo(installed: Installed, port: int, log: Path) -> Iterator[str]:
    """The installed `podres demo` on the loopback, in a session of its own, killed whole."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                str(installed.bin / "podres"),
                "demo",
                f"--listen-address=127.0.0.1:{port}",
                "--churn-interval=0",
                "--log-format=json",
            ],
            cwd=installed.home,
            env=installed.env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is None and http_get(url + "/readyz")[0] == 200, timeout=30)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.prometheus
def test_installed_top_reads_a_real_prometheus(
    installed: Installed,
    prometheus: Callable[[str], Prometheus],
    tmp_path: Path,
) -> None:
    """The installed `podres top --prometheus` shows what the installed demo serves."""
    with _demo(installed, free_port(), tmp_path / "demo.log") as url:
        instance = url.removeprefix("http://")
        prom = prometheus(instance)
        wait_until(lambda: prom.query('up{job="podres"} == 1'), timeout=30)
        wait_until(lambda: prom.query("podres_node_devices"), timeout=30)
        top = installed.run("top", "--prometheus", prom.url, "-o", "json")
        assert top.returncode == 0, top.stderr
        (node,) = json.loads(top.stdout)["nodes"]
        served = scrape(url)
        # A static target has no node label: the node is the one the exporter names itself.
        (named,) = [dict(labels)["node"] for labels in select(served, "podres_node_info")]
        assert node["node"] == named
        assert_header_matches(node, served)
        assert node["containers"], "the demo's holders are shown"
        once = installed.run("top", "--prometheus", prom.url, "--once")
        assert once.returncode == 0, once.stderr
        assert once.stdout.startswith(named)
