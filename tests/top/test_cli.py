"""`podres top` as a user runs it: its sources, outputs, flags, errors and exit codes.

Runs that read the local kubelet go through a subprocess (they configure logging, a
process-wide setting); the others call ``run_top`` in-process, the same code path.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from podres_exporter.cli.export import Exporter
from podres_exporter.top import add_top_parser, run_top
from podres_sim import Scenario, SimKubelet, load_builtin
from tests.support import Samples, http_get, scrape, select, wait_until
from tests.top.support import assert_header_matches

MakeSim = Callable[..., SimKubelet]
MakeExporter = Callable[..., Exporter]
TOP = [sys.executable, "-m", "podres_exporter.top"]
ANSI = re.compile(r"\x1b\[")


# Root without a capability: file permissions hold for it as for any user, and it still
# reaches the interpreter and the checkout wherever they are (another user, such as
# nobody, cannot enter a checkout under a 0700 directory).
NO_CAPABILITIES = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all"]


def top(
    *args: str, env: dict[str, str] | None = None, no_capabilities: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run `podres top` off a terminal with a clean PODRES_* environment; with
    ``no_capabilities``, without any capability (as root: file permissions apply)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
    base.pop("COLUMNS", None)
    prefix = NO_CAPABILITIES if no_capabilities else []
    return subprocess.run(
        [*prefix, *TOP, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**base, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def run(
    capsys: pytest.CaptureFixture[str], *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`podres top ARGS` in-process, with only ``env`` as its environment."""
    parser = argparse.ArgumentParser(prog="podres")
    add_top_parser(parser.add_subparsers(dest="command", required=True))
    capsys.readouterr()
    rc = run_top(parser.parse_args(["top", *args]), env or {})
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, rc, out, err)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def started(
    make_sim: MakeSim, make_exporter: MakeExporter, scenario: str | Scenario = "demo"
) -> Exporter:
    exp = make_exporter(make_sim(scenario))
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    return exp


def holders_in(samples: Samples) -> set[tuple[str, str, str]]:
    """Containers the exporter says hold exclusive CPUs, devices, DRA claims or pinned memory."""
    out = set()
    for name in (
        "podres_container_exclusive_cpus",
        "podres_container_device_info",
        "podres_container_dynamic_resource_info",
        "podres_container_memory_bytes",
    ):
        for labels in select(samples, name):
            d = dict(labels)
            out.add((d["namespace"], d["pod"], d["container"]))
    return out


def test_top_shows_the_numbers_metrics_shows(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """--exporter -o json: free shared CPUs, free GPUs, holders and CPU lists equal /metrics."""
    exp = started(make_sim, make_exporter)
    proc = top("--exporter", exp.url, "--once", "-o", "json", "--interval", "0.3")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    ours = scrape(exp.url)
    (node,) = doc["nodes"]
    assert node["node"] == exp.url.removeprefix("http://")
    assert_header_matches(node, ours)
    gpus = next(d for d in node["device_counts"] if d["resource"] == "nvidia.com/mig-1g.10gb")
    assert gpus["unallocated"] == 2
    assert {(c["namespace"], c["pod"], c["container"]) for c in node["containers"]} == (
        holders_in(ours)
    )
    for c in node["containers"]:
        cpus = select(ours, "podres_cpu_assignment_info", pod=c["pod"], container=c["container"])
        assert c["cpu_ids"] == sorted(int(dict(k)["cpu"]) for k in cpus)
        # The two readings came from two polls of the exporter: a busy share is known.
        assert (c["busy_ratio"] is not None) == bool(c["cpu_ids"])
    free_ids = {d["device_id"] for d in node["devices"] if d["state"] == "free"}
    assert free_ids == {
        dict(k)["device_id"] for k in select(ours, "podres_node_device_info", state="free")
    }


def test_exporter_table_filters_sort_and_views(
    make_sim: MakeSim, make_exporter: MakeExporter, capsys: pytest.CaptureFixture[str]
) -> None:
    """Off a terminal one plain table: the URL forms, --sort, the filters, --view, -o wide."""
    exp = started(make_sim, make_exporter)
    hostport = exp.url.removeprefix("http://")
    plain = top("--exporter", hostport, "--sort", "cpus", "--interval", "0.2")
    assert plain.returncode == 0, plain.stderr
    assert not ANSI.search(plain.stdout)
    lines = plain.stdout.splitlines()
    assert lines[0].startswith(f"{hostport}   kubelet up")
    assert any(line.startswith(" shared CPUs free  numa0 2/22  numa1 4/22") for line in lines)
    table = lines[next(i for i, x in enumerate(lines) if x.startswith("NAMESPACE")) + 1 :]
    assert "llm-pretrain" in table[0], "the most exclusive CPUs first"
    filtered = run(
        capsys, "--exporter", exp.url + "/metrics", "--once", "--namespace", "ml-",
        "--resource", "gpu", "--interval", "0.2",
    )  # fmt: skip
    rows = filtered.stdout.split("NAMESPACE", 1)[1].splitlines()[1:]
    rows = [r for r in rows if r and not r.startswith(("*", "+ ", "  "))]  # not the notes
    assert rows and all(r.startswith("ml-") for r in rows)
    assert not any("upf" in r or "clickhouse" in r for r in rows)
    devices = run(
        capsys,
        "--exporter",
        exp.url,
        "--once",
        "--view",
        "devices",
        "--resource",
        "mig",
        "--interval",
        "0.2",
    )
    dev_rows = devices.stdout.split("RESOURCE", 1)[1].splitlines()[1:]
    assert len(dev_rows) == 7 and sum(" free" in r for r in dev_rows) == 2
    wide = run(
        capsys,
        "--exporter",
        exp.url,
        "--once",
        "-o",
        "wide",
        "--pod",
        "llm-pretrain-0",
        "--interval",
        "0.2",
    )
    assert "GPU-f38b2ffc-80a4-4f5a-91c9-bc701e7ea419" in wide.stdout
    assert "PINNED MEMORY" in wide.stdout and "hugepages-1Gi 8Gi" in wide.stdout


def test_local_mode_reads_the_kubelet_socket_and_host(make_sim: MakeSim) -> None:
    """The default source: the kubelet socket and sysfs/procfs, rendered in-process."""
    sim = make_sim("demo")
    host = sim.host  # type: ignore[attr-defined]
    proc = top(
        "--kubelet-socket", str(sim.socket_path),
        "--path.sysfs", str(host.sysfs),
        "--path.procfs", str(host.procfs),
        "--once", "-o", "json", "--interval", "0.3",
        env={"NODE_NAME": "gpu-node-a1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (node,) = json.loads(proc.stdout)["nodes"]
    assert node["node"] == "gpu-node-a1" and node["kubelet_up"] is True
    assert [c["shared_free"] for c in node["cpus"]] == [2, 4]
    rows = {(c["pod"], c["container"]): c for c in node["containers"]}
    trainer = rows[("llm-pretrain-0", "trainer")]
    assert trainer["cpus"] == "2-7" and trainer["busy_ratio"] is not None
    assert [d["resource"] for d in trainer["devices"]] == ["nvidia.com/gpu"] * 2
    assert rows[("clickhouse-0", "clickhouse")]["numa_aligned"] is False


def test_the_podres_program_ends_a_one_shot_frame_whole(make_sim: MakeSim) -> None:
    """``podres top --once`` as the program ends its process itself once the frame is
    written (no teardown): the frame still arrives whole, flushed, with exit status 0."""
    sim = make_sim("demo")
    host = sim.host  # type: ignore[attr-defined]
    args = [
        "top", "--once", "-o", "json", "--interval", "0.3",
        "--kubelet-socket", str(sim.socket_path),
        "--path.sysfs", str(host.sysfs), "--path.procfs", str(host.procfs),
    ]  # fmt: skip
    program = "import sys; from podres_exporter.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", program, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    (node,) = json.loads(proc.stdout)["nodes"]
    shown = {(c["pod"], c["container"]) for c in node["containers"]}
    assert ("llm-pretrain-0", "trainer") in shown and proc.stdout.endswith("}\n")


def test_missing_socket_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No kubelet socket: the message names --kubelet-socket; exit 2."""
    missing = tmp_path / "kubelet.sock"
    proc = top("--kubelet-socket", str(missing), "--once")
    assert proc.returncode == 2
    assert "--kubelet-socket" in proc.stderr and str(missing) in proc.stderr
    env_proc = run(capsys, "--once", env={"PODRES_KUBELET_SOCKET": str(missing)})
    assert env_proc.returncode == 2 and str(missing) in env_proc.stderr


def test_the_exporters_own_variables_are_not_read(
    make_sim: MakeSim, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PODRES_CONFIG and the exporter's other variables are the exporter's settings, not
    top's: a bad settings file or timeout there changes nothing for `podres top`."""
    sim = make_sim("minimal")
    bad = tmp_path / "bad.toml"
    bad.write_text("this is not toml = = =\n")
    proc = run(
        capsys,
        "--once",
        "--kubelet-socket",
        str(sim.socket_path),
        env={"PODRES_CONFIG": str(bad), "PODRES_KUBELET_TIMEOUT": "nonsense"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "config" not in proc.stderr and "PODRES_KUBELET_TIMEOUT" not in proc.stderr


def test_permission_denied_names_the_flag(make_sim: MakeSim) -> None:
    """A socket we may not use: permission denied, naming --kubelet-socket; exit 2."""
    sim = make_sim("minimal")
    os.chmod(sim.socket_path, 0)
    as_root = os.geteuid() == 0  # root would pass the mode: it runs without capabilities
    if as_root and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv (util-linux) to drop the capabilities")
    proc = top("--kubelet-socket", str(sim.socket_path), "--once", no_capabilities=as_root)
    if as_root and proc.stderr.startswith("setpriv:"):
        pytest.skip(f"running as root, and the capabilities cannot be dropped: {proc.stderr}")
    assert proc.returncode == 2, proc.stderr
    assert "permission denied" in proc.stderr and "--kubelet-socket" in proc.stderr


def test_nothing_listening_on_the_socket(tmp_path: Path) -> None:
    """A socket file with no kubelet behind it (left by a kubelet that stopped): exit 2, one
    line naming it and --kubelet-socket, not gRPC's connection text."""
    path = tmp_path / "kubelet.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        proc = top("--kubelet-socket", str(path), "--once")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "refuses connections" in lines[0], proc.stderr
    assert "--kubelet-socket" in lines[0] and str(path) in lines[0]


@pytest.mark.parametrize("flag", ["--exporter", "--prometheus"])
def test_unreachable_url_is_named(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An exporter or Prometheus that does not answer: the URL is named; exit 2."""
    url = f"http://127.0.0.1:{free_port()}"
    proc = run(capsys, flag, url, "--once")
    assert proc.returncode == 2
    assert url in proc.stderr and flag in proc.stderr


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--node", "a"], {}, "--node"),
        (["--exporter", "x:1", "--prometheus", "y:2"], {}, "--exporter and --prometheus"),
        (["--exporter", "x:1", "--kubelet-socket", "/s"], {}, "--kubelet-socket"),
        (["--interval", "soon"], {}, "--interval"),
        ([], {"PODRES_TOP_INTERVAL": "-1s"}, "PODRES_TOP_INTERVAL"),
        (["--exporter", "ftp://x"], {}, "--exporter"),
    ],
)
def test_usage_errors_exit_2(
    args: list[str], env: dict[str, str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Flags that do not go together, or bad values, exit 2 naming them."""
    proc = run(capsys, *args, "--once", env=env)
    assert proc.returncode == 2
    assert needle in proc.stderr


def test_empty_node_says_so(
    make_sim: MakeSim, make_exporter: MakeExporter, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node without pods prints its header and says so instead of an empty table."""
    sc = dataclasses.replace(load_builtin("minimal"), pods=())
    exp = started(make_sim, make_exporter, sc)
    proc = run(capsys, "--exporter", exp.url, "--once", "--interval", "0.2")
    assert proc.returncode == 0, proc.stderr
    assert "no pods on this node: the kubelet lists none" in proc.stdout
    assert "example.com/widget 2/2" in proc.stdout and "NAMESPACE" not in proc.stdout


def test_environment_names_the_source(
    make_sim: MakeSim, make_exporter: MakeExporter, capsys: pytest.CaptureFixture[str]
) -> None:
    """PODRES_TOP_EXPORTER picks the exporter like --exporter does; a flag wins."""
    exp = started(make_sim, make_exporter, "minimal")
    env = {"PODRES_TOP_EXPORTER": exp.url, "PODRES_TOP_INTERVAL": "0.2s"}
    proc = run(capsys, "--once", "-o", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["source"] == f"exporter {exp.url}/metrics"
    other = f"http://127.0.0.1:{free_port()}"
    overridden = run(capsys, "--once", "--exporter", other, env=env)
    assert overridden.returncode == 2 and other in overridden.stderr
