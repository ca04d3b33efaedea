"""`podres fit` as a user runs it: the pod from a file or stdin, flag and input errors
(exit 2, one line naming what to fix), source errors (exit 2), and the exit status of the
answer (0 fits somewhere, 1 nowhere)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from podres_exporter.cli import main
from podres_exporter.cli.export import Exporter
from podres_sim import SimKubelet
from tests.support import free_port, http_get, http_server, run_in_group, wait_until

MakeSim = Callable[..., SimKubelet]
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "trainer"},
    "spec": {
        "template": {
            "spec": {
                "containers": [
                    {"name": "main", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}
                ]
            }
        }
    },
}


def fit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`podres fit ARGS` in-process; its status, stdout and stderr."""
    capsys.readouterr()
    try:
        rc = main(["fit", *args], env={})
    except SystemExit as stop:  # argparse's own errors
        rc = int(stop.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_error(err: str, *needles: str) -> None:
    """stderr is one ``podres fit: error:`` line holding every needle, no traceback."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("podres fit: error: "), err
    for needle in needles:
        assert needle in lines[0], err


@pytest.fixture
def exporter_url(make_sim: MakeSim, make_exporter: Callable[..., Exporter]) -> str:
    exporter = make_exporter(make_sim("demo"), node_name="node-a")
    wait_until(lambda: http_get(exporter.url + "/readyz")[0] == 200)
    return exporter.url


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--cpu", "lots"], ["--cpu 'lots': expected a quantity"]),
        (["-f", "/nonexistent/pod.yaml"], ["-f /nonexistent/pod.yaml: No such file"]),
        (["-f", "x.yaml", "--cpu", "1"], ["-f and --cpu both name the pod"]),
        (["--name", "x", "--cpu", "1"], ["--name picks a workload of a manifest"]),
        (["--node", "a", "--cpu", "1"], ["--node picks nodes of Prometheus"]),
        (["--selector", 'a="b"', "--cpu", "1"], ["--selector picks nodes of Prometheus"]),
        (
            ["--prometheus", "http://p:9090", "--selector", "cluster=a", "--cpu", "1"],
            ["--selector 'cluster=a': expected label matchers"],
        ),
        (["--exporter", "a:1", "--prometheus", "b:2", "--cpu", "1"], ["two sources"]),
        (["--exporter", "a:1", "--kubelet-socket", "/s", "--cpu", "1"], ["--kubelet-socket"]),
        (["--timeout", "3s", "--cpu", "1"], ["--timeout is for --exporter or --prometheus"]),
        (["--exporter", "ftp://a", "--cpu", "1"], ["--exporter 'ftp://a': expected http(s)"]),
        ([], ["no pod to fit"]),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], args: list[str], needles: list[str]
) -> None:
    """A bad flag or combination: exit 2 and one line naming it, before any source is read."""
    rc, out, err = fit(capsys, *args)
    assert rc == 2 and not out
    assert_one_error(err, *needles)


def test_bad_manifest_file_names_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A manifest with a bad quantity: exit 2, the file and the key path named."""
    bad = json.loads(json.dumps(DEPLOYMENT))
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1GB"
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(bad))
    rc, _, err = fit(capsys, "-f", str(path))
    assert rc == 2
    key = "spec.template.spec.containers[0].resources.limits.memory"
    assert_one_error(err, f"-f {path}: {key}: expected a quantity", "'1GB'")


def test_argparse_errors_exit_2_with_the_closest_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown flag or a bad --limit: exit 2, fit's usage, the closest flag."""
    rc, _, err = fit(capsys, "--cpus", "1")
    assert rc == 2 and "did you mean --cpu?" in err and "podres fit" in err
    rc, _, err = fit(capsys, "--limit", "0", "--cpu", "1")
    assert rc == 2 and "--limit: expected 1 to 10000, got 0" in err


def test_unreachable_or_unusable_sources_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listening, or an HTTP 500: exit 2 (1 is kept for "fits nowhere"), one line."""
    port = free_port()
    rc, _, err = fit(capsys, "--exporter", f"127.0.0.1:{port}", "--cpu", "1")
    assert rc == 2
    assert_one_error(err, f"cannot reach the exporter at http://127.0.0.1:{port}/metrics")

    class Broken(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(500, "boom")

        def log_message(self, *args: Any) -> None:
            pass

    with http_server(Broken) as broken:
        rc, _, err = fit(capsys, "--exporter", f"127.0.0.1:{broken}", "--cpu", "1")
        assert rc == 2
        assert_one_error(err, "answered HTTP 500")
        rc, _, err = fit(capsys, "--prometheus", f"127.0.0.1:{broken}", "--cpu", "1")
        assert rc == 2
        assert_one_error(err, "Prometheus at", "answered HTTP 500")


def test_manifest_from_stdin_as_a_process(tmp_path: Path, exporter_url: str) -> None:
    """-f - reads the manifest from stdin; the answer's pod is the Deployment's; no process
    is left behind."""
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(DEPLOYMENT))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
    argv = [sys.executable, "-m", "podres_exporter", "fit", "-f", "-", "--exporter", exporter_url]
    with path.open("rb") as stdin:
        proc = run_in_group([*argv, "-o", "json"], timeout=60, env=env, stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["pod"]["origin"] == "Deployment/trainer"
    assert doc["pod"]["requests"] == {"cpu": 2000, "memory": 2**30}
    with open(os.devnull, "rb") as empty:
        proc = run_in_group(argv, timeout=60, env=env, stdin=empty)
    assert proc.returncode == 2
    assert_one_error(proc.stderr, "stdin (-f -): no pod or workload")


def test_output_to_a_closed_reader_is_quiet(exporter_url: str) -> None:
    """A reader that left (`| head -0`): exit 0, nothing on stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
    argv = [
        sys.executable,
        "-m",
        "podres_exporter",
        "fit",
        "--exporter",
        exporter_url,
        "--cpu",
        "1",
    ]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.close()
            err = proc.stderr.read()
            assert proc.wait(60) == 0, err
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert b"Traceback" not in err
