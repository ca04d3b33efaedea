"""Busy shares in ``--once``: measured over procfs locally, the next poll of an exporter."""

from __future__ import annotations

import argparse
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podres_exporter.cli.export import Exporter
from podres_exporter.top import add_top_parser, run_top
from podres_exporter.top.fetch import BUSY_ONLY, POLL_CHECK_S, ExporterSource, LocalSource
from podres_exporter.top.rows import BUSY_RATIO, build
from podres_sim import SimKubelet
from tests.support import exporter_settings, http_get, wait_until

MakeSim = Callable[..., SimKubelet]
MakeExporter = Callable[..., Exporter]
CPUS = 64


def write_stat(procfs: Path, busy_ticks: int, total_ticks: int) -> None:
    """A /proc/stat whose every CPU has ``busy_ticks`` of user time in ``total_ticks``."""
    idle = total_ticks - busy_ticks
    lines = [f"cpu  0 0 0 {idle * CPUS} 0 0 0 0 0 0"]
    lines += [f"cpu{c} {busy_ticks} 0 0 {idle} 0 0 0 0 0 0" for c in range(CPUS)]
    (procfs / "stat").write_text("\n".join(lines) + "\n")


def test_local_busy_share_is_measured_over_procfs_in_one_reading(
    make_sim: MakeSim, tmp_path: Path
) -> None:
    """The rise of busy ticks over the rise of all ticks between the two procfs reads."""
    sim = make_sim("demo")
    procfs = tmp_path / "proc"
    procfs.mkdir()
    write_stat(procfs, busy_ticks=100, total_ticks=1000)
    settings = exporter_settings(sim, path_procfs=str(procfs))
    source = LocalSource(settings, node_name="n", gpu_backend=sim.host.gpu_backend())  # type: ignore[attr-defined]
    slept: list[float] = []

    def sleep(s: float) -> None:  # 30 of the next 40 ticks busy: 75 %
        slept.append(s)
        write_stat(procfs, busy_ticks=130, total_ticks=1040)

    try:
        reading = source.read_with_busy(0.5, sleep=sleep)
    finally:
        source.close()
    assert len(slept) == 1 and 0 <= slept[0] <= 0.5
    ratios = {s.labels["cpu"]: s.value for s in reading.samples if s.name == BUSY_RATIO}
    assert {"2", "3", "4", "5", "6", "7"} <= set(ratios)
    assert all(v == pytest.approx(0.75) for v in ratios.values())
    (node,) = build(reading).nodes
    trainer = next(r for r in node.containers if r.container == "trainer")
    assert trainer.busy == pytest.approx(0.75)


@pytest.fixture
def ticking(make_sim: MakeSim) -> Iterator[SimKubelet]:
    """The demo node whose exclusive CPUs keep running (its /proc/stat advances)."""
    sim = make_sim("demo")
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.2):
            sim.host.refresh(0.2)  # type: ignore[attr-defined]

    t = threading.Thread(target=tick, daemon=True)
    t.start()
    yield sim
    stop.set()
    t.join()


def cpu_stamp(url: str) -> bytes:
    body = http_get(url + "/metrics")[2]
    return next(
        line
        for line in body.splitlines()
        if line.startswith(b"podres_source_last_success_timestamp_seconds")
        and b'source="cpu"' in line
    )


@pytest.mark.slow
def test_exporter_polling_less_often_than_top_still_gives_busy_shares(
    ticking: SimKubelet, make_exporter: MakeExporter, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exporter polling every 3 s (top's interval: 2 s): --once waits for its next poll."""
    exp = make_exporter(ticking, poll_interval_s=3.0)
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    polled = cpu_stamp(exp.url)
    wait_until(lambda: cpu_stamp(exp.url) != polled, timeout=10)  # just polled: 3 s to go
    parser = argparse.ArgumentParser(prog="podres")
    add_top_parser(parser.add_subparsers(dest="command", required=True))
    capsys.readouterr()
    rc = run_top(parser.parse_args(["top", "--exporter", exp.url, "--once", "-o", "json"]), {})
    out, err = capsys.readouterr()
    assert rc == 0, err
    (node,) = json.loads(out)["nodes"]
    held = [c for c in node["containers"] if c["cpu_ids"]]
    assert held and all(c["busy_ratio"] is not None for c in held)
    assert any(c["busy_ratio"] > 0 for c in held)


STATIC = b"""\
podres_kubelet_up 1
podres_source_last_success_timestamp_seconds{source="cpu"} 100.0
podres_cpu_busy_seconds_total{cpu="2",namespace="ns",pod="p",container="c"} 5.0
podres_cpu_assignment_info{cpu="2",pool="exclusive",namespace="ns",pod="p",container="c"} 1
"""


class _Static(http.server.BaseHTTPRequestHandler):
    gets = 0

    def do_GET(self) -> None:
        type(self).gets += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(STATIC)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_exporter_that_never_polls_again_is_waited_for_a_bounded_time() -> None:
    """No new view within the wait: one more read, busy unknown (``-``), no busy share made up."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Static)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    try:
        source = ExporterSource(f"127.0.0.1:{server.server_address[1]}")
        first = source.read(BUSY_ONLY)
        second = source.read_after_poll(first, 3.0, sleep=sleep, clock=lambda: now[0])
    finally:
        server.shutdown()
        server.server_close()
    assert 3.0 <= now[0] < 3.0 + POLL_CHECK_S * 2
    assert _Static.gets == 2 + round(3.0 / POLL_CHECK_S)  # first, each check, the last read
    (node,) = build(second, first).nodes
    (row,) = node.containers
    assert row.cpus == (2,) and row.busy is None
