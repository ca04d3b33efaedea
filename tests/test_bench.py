"""bench/bench.py --quick runs to the end and prints every row of its table."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.support import run_in_group

ROOT = Path(__file__).resolve().parent.parent
# bench/exporter.py --quick takes about 70 s on a two-core machine with both cores busy
# (other builds, two CPU hogs): its limit is well beyond, the test's 30 s beyond that.
QUICK_EXPORTER_S = 180


# Each benchmark runs in a process group of its own that the test kills however it ends,
# and the test's own timeout is longer than the benchmark's, so that a slow machine fails
# with the benchmark's output rather than an interrupted test and orphaned servers.
@pytest.mark.slow  # runs the benchmark and its simulated kubelets as processes
@pytest.mark.timeout(330)
def test_quick_benchmark_prints_every_row() -> None:
    """bench/bench.py --quick prints a row for each scenario, each beside its floor."""
    done = run_in_group(
        [sys.executable, str(ROOT / "bench" / "bench.py"), "--quick", "--repeat", "2"],
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("scenario"))
    assert set(lines[head + 1]) == {"-"}
    rows = {line.split()[0]: line.split() for line in lines[head + 2 : head + 4]}
    assert set(rows) == {"small", "large"}
    assert rows["small"][1] == "20"
    assert rows["large"][1] == "500"
    for cells in rows.values():
        assert any(c.endswith("x") or c == "!" for c in cells)  # the ratio to floor 2
    assert any(line.startswith("floor 1:") for line in lines[head + 4 :])


@pytest.mark.slow  # runs the simulated kubelet, the exporter and a plain server as processes
@pytest.mark.timeout(QUICK_EXPORTER_S + 30)
def test_quick_exporter_benchmark_measures_each_figure() -> None:
    """bench/exporter.py --quick on the small node: every figure is printed beside its
    target, and what it counts holds (two kubelet calls a poll under scrapers, no series
    of a departed pod)."""
    done = run_in_group(
        [sys.executable, str(ROOT / "bench" / "exporter.py"), "--quick", "--scenario", "small"],
        timeout=QUICK_EXPORTER_S,
        cwd=ROOT / "bench",
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    heads = ("steady CPU on small", "/metrics latency", "/metrics while polling")
    for head in (*heads, "kubelet calls per poll", "memory"):
        assert head in out, out
    start, end = out.index("/metrics while polling"), out.index("kubelet calls per poll")
    polling, beside = out[start:end].splitlines(), out[:start] + out[end:]
    if shutil.which("wrk") is None:
        assert "skipped: wrk is not installed" in polling[2], out
    else:  # one connection and ten, each at Python's switch interval and at the daemon's
        rows = [
            line for line in polling if re.search(r"keep-alive +(1|10)( +[0-9.]+ ms){4}$", line)
        ]
        assert len(rows) == 2, out
    latency = [
        line for line in beside.splitlines() if " keep-alive " in line or " new conn " in line
    ]
    python_client = [line for line in latency if not line.lstrip().startswith("wrk ")]
    assert len(python_client) == 8, out  # 2 formats x 2 connection kinds x 1 and 10 scrapers
    if shutil.which("wrk") is None:
        assert "skipped: wrk is not installed" in out, out
    else:  # 2 formats x 2 connection kinds, each beside the plain server, with no error
        assert len(latency) - len(python_client) == 4, out
        assert re.search(r"requests a cell; errors 0;", out), out
    floors = [line for line in out.splitlines() if line.lstrip().startswith("floor: ")]
    assert len(floors) == (1 if shutil.which("wrk") is None else 2), out
    if shutil.which("nginx", path="/usr/sbin:/sbin:" + os.environ.get("PATH", "")) is None:
        assert all("nginx is not installed" in line for line in floors), out
    else:  # nginx's p50, p99 and CPU after the plain server's ratio, in every row
        assert all(re.search(r"x +[0-9.]+ ms +[0-9.]+ ms +[0-9]+ us$", row) for row in latency), out
        assert all(re.search(r"(every cell under|is over it too in [0-9]+$)", f) for f in floors)
    assert "calls per poll 2.00" in out, out
    moving = next(line for line in out.splitlines() if "counters moving" in line)
    idle = next(line for line in out.splitlines() if "idle devices" in line and "%" in line)
    assert not moving.endswith("counters moved 0)"), moving  # the ticker ran
    assert idle.endswith("counters moved 0)"), idle
    assert re.search(r"departed pods with series left: 0 of [1-9]", out), out


@pytest.mark.slow  # runs the simulated kubelet and three exporters' servers as processes
@pytest.mark.timeout(150)
def test_quick_http_libraries_benchmark_compares_each_cell() -> None:
    """bench/http_libraries.py --quick on the small node: every latency cell, the attack
    and each malformed head are measured for the owned layer, h11 and aiohttp, and the
    owned layer serves every scrape under attack and refuses every malformed head."""
    done = run_in_group(
        [sys.executable, str(ROOT / "bench" / "http_libraries.py"), "--quick"],
        timeout=120,
        cwd=ROOT / "bench",
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    latency = [line for line in lines if re.match(r" +python (text|openmetrics)", line)]
    assert len(latency) == 8, done.stdout  # 2 formats x 2 connection kinds x 1 and 10 scrapers
    assert all(len(re.findall(r"[0-9.]+ ms", row)) == 6 for row in latency), done.stdout
    attacked = {
        line.split()[0]: line for line in lines if re.match(r" +(podres|h11|aiohttp) ", line)
    }
    assert set(attacked) == {"podres", "h11", "aiohttp"}, done.stdout
    assert attacked["podres"].split("|")[1].split()[4] == "yes", attacked["podres"]
    start = next(i for i, line in enumerate(lines) if line.startswith("malformed heads"))
    heads = lines[start + 3 :]
    assert len(heads) == 9, done.stdout
    assert all(re.search(r" 4[0-9][0-9], closed +\S+, \S+ +\S+, \S+$", h) for h in heads), heads


@pytest.mark.slow  # backfills a Prometheus and runs podres fit as processes
@pytest.mark.prometheus
@pytest.mark.timeout(240)
def test_fit_benchmark_answers_every_node_of_the_fleet() -> None:
    """bench/fit.py on a small fleet: every node answered through a real Prometheus, each
    way to start the command timed beside the target, with its CPU and Prometheus'."""
    done = run_in_group(
        [sys.executable, str(ROOT / "bench" / "fit.py"), "--nodes", "20", "--runs", "1"],
        timeout=200,
        cwd=ROOT / "bench",
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    assert out.startswith("fleet: 20 nodes, "), out
    rows = re.findall(
        r"^(podres fit|-m podres_exporter\.fit) --prometheus over 20 nodes: median", out, re.M
    )
    assert rows == ["podres fit", "-m podres_exporter.fit"], out
    assert (
        len(re.findall(r"CPU a run \(median\): podres fit [0-9.]+ s, Prometheus [0-9.]+ s", out))
        == 2
    )


@pytest.mark.slow  # runs the simulated kubelet and two readers as processes
@pytest.mark.timeout(150)
def test_pods_api_memory_benchmark_measures_the_reader_and_the_merge() -> None:
    """bench/podsapi_memory.py on 200 pods: every pod synced, the resident growth, the
    Python memory the pods hold and the merged identity's, and their largest holders."""
    done = run_in_group(
        [sys.executable, str(ROOT / "bench" / "podsapi_memory.py"), "--pods", "200"],
        timeout=120,
        cwd=ROOT / "bench",
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    assert re.search(r"^Pods API reader, 200 pods synced in [0-9.]+ s: resident ", out, re.M), out
    assert re.search(r"Python objects held \(tracemalloc\): [0-9.]+ MiB, .* merged identity", out)
    assert re.search(r"the pods collector's families [0-9.]+ MiB, their text", out), out
    assert "podsapi_wire.py" in out, out
