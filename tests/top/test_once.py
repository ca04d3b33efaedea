"""``--once``: what each source reads for one frame, over real HTTP and a real kubelet."""

from __future__ import annotations

import argparse
import gc
import http.server
import threading
from collections.abc import Callable, Iterator
from typing import ClassVar

import pytest

from podres_exporter.cli.export import Exporter
from podres_exporter.top import add_top_parser, run_top
from podres_exporter.top.fetch import (
    BUSY_ONLY,
    POLL_CHECK_S,
    WANTED,
    ExporterSource,
    parse_exposition,
)
from podres_exporter.top.fetch.parse import _labels, _split_labels
from podres_exporter.top.main import read_once
from podres_exporter.top.rows import Reading, add_busy, build
from podres_sim import SimKubelet
from tests.support import http_get, wait_until

MakeSim = Callable[..., SimKubelet]
MakeExporter = Callable[..., Exporter]

HEAD = b"""\
# HELP podres_kubelet_up Kubelet.
# TYPE podres_kubelet_up gauge
podres_kubelet_up 1
podres_cpu_assignment_info{cpu="2",pool="exclusive",namespace="ns",pod="p",container="c"} 1
podres_cpu_assignment_info{cpu="3",pool="exclusive",namespace="ns",pod="p",container="c"} 1
"""


def view(stamp: float, busy2: float, busy3: float, *, extra: bytes = b"") -> bytes:
    """An exporter's /metrics: CPUs 2 and 3 held by ns/p/c, CPU times read at ``stamp``."""
    return (
        HEAD
        + f'podres_source_last_success_timestamp_seconds{{source="cpu"}} {stamp}\n'.encode()
        + f'podres_cpu_busy_seconds_total{{cpu="2",namespace="ns",pod="p",container="c"}} '
        f"{busy2}\n".encode()
        + f'podres_cpu_busy_seconds_total{{cpu="3",namespace="ns",pod="p",container="c"}} '
        f"{busy3}\n".encode()
        + extra
    )


class _Views(http.server.BaseHTTPRequestHandler):
    """Serves ``bodies`` in turn, one GET each; the last one from then on."""

    bodies: ClassVar[list[bytes]] = []
    gets = 0

    def do_GET(self) -> None:
        cls = type(self)
        body = cls.bodies[min(cls.gets, len(cls.bodies) - 1)]
        cls.gets += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


Serve = Callable[[list[bytes]], tuple[str, type[_Views]]]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start an HTTP server serving the bodies given: its address and its handler class."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(bodies: list[bytes]) -> tuple[str, type[_Views]]:
        handler = type("Views", (_Views,), {"bodies": bodies, "gets": 0})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.server_address[1]}", handler

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_exporter_rows_come_from_the_first_scrape_busy_from_the_next_poll(serve: Serve) -> None:
    """Two polls 10 s apart: CPU 2 rose 5 s (50 %), CPU 3 rose 10 s (100 %): mean 75 %."""
    url, handler = serve(
        [view(100.0, 40.0, 50.0), view(100.0, 40.0, 50.0), view(110.0, 45.0, 60.0)]
    )
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    data = read_once(ExporterSource(url), 2.0, sleep=sleep, clock=lambda: now[0])
    (node,) = data.nodes
    (row,) = node.containers
    assert row.cpus == (2, 3)
    assert row.busy == pytest.approx(0.75)
    assert node.header.kubelet_up is True
    # The first scrape; a check finding the same view; one finding the next; its busy counters.
    assert handler.gets == 4
    assert 0 < now[0] <= 2 * POLL_CHECK_S


def test_add_busy_gives_what_build_gives_from_two_full_readings() -> None:
    """Rows of the first reading, busy from the busy counters of a later one: the same
    rows as building from the later reading when the kubelet state did not change."""
    first = Reading(tuple(parse_exposition(view(100.0, 40.0, 50.0).decode(), WANTED)), 1.0, "n")
    later_text = view(110.0, 45.0, 60.0).decode()
    later = Reading(tuple(parse_exposition(later_text, WANTED)), 11.0, "n")
    busy_only = Reading(tuple(parse_exposition(later_text, BUSY_ONLY)), 11.0, "n")
    assert {s.name for s in busy_only.samples} < {s.name for s in later.samples}
    assert add_busy(build(first), busy_only, first) == build(later, first)


def test_an_exporter_serving_busy_ratios_is_read_once(serve: Serve) -> None:
    """Busy shares the exporter computed itself: one GET, no wait for its next poll."""
    ratio = (
        b'podres_cpu_busy_ratio{cpu="2",namespace="ns",pod="p",container="c"} 0.25\n'
        b'podres_cpu_busy_ratio{cpu="3",namespace="ns",pod="p",container="c"} 0.75\n'
    )
    url, handler = serve([view(100.0, 40.0, 50.0, extra=ratio)])
    slept: list[float] = []
    data = read_once(ExporterSource(url), 2.0, sleep=slept.append)
    assert handler.gets == 1
    (row,) = data.nodes[0].containers
    assert row.busy == pytest.approx(0.5)
    assert slept == []


@pytest.mark.parametrize(
    "inner",
    [
        'a="x=1,y",b=""',
        'a="",b="x"',
        'a="{}",b=" , "',
        'a="x",',
        'a="x",a="y"',
        'a ="x"',
        '0a="x"',
        'a="x"b="y"',
        'ä="x"',
        'a="x",,b="y"',
    ],
)
def test_label_fast_path_agrees_with_the_general_one(inner: str) -> None:
    """Odd label sets without escapes: split at the quotes, or left to the regexes."""
    line = f"m{{{inner}}} 1"
    try:
        general: dict[str, str] | None = _labels(line, 1, line.rindex("}"), 1)
    except ValueError:
        general = None
    fast = _split_labels(inner)
    if fast is not None:
        assert fast == general
    parsed = None
    try:
        parsed = parse_exposition(line)[0].labels
    except ValueError:
        assert general is None
    else:
        assert parsed == general


@pytest.mark.parametrize("wanted", [None, WANTED])
@pytest.mark.parametrize("line", ['podres_pods{a="b" 1', 'podres_pods{a="b"} x', "podres_pods"])
def test_a_bad_wanted_line_is_named_by_its_number(wanted: frozenset[str] | None, line: str) -> None:
    text = "# HELP podres_pods Pods.\nother 1\npodres_pods 1\n" + line + "\n"
    with pytest.raises(ValueError, match="line 4"):
        parse_exposition(text, wanted)


def test_once_leaves_the_garbage_collector_as_it_found_it(
    make_sim: MakeSim, make_exporter: MakeExporter, capsys: pytest.CaptureFixture[str]
) -> None:
    """--once runs without the cyclic collector and turns it back on."""
    exp = make_exporter(make_sim("demo"))
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    parser = argparse.ArgumentParser(prog="podres")
    add_top_parser(parser.add_subparsers(dest="command", required=True))
    assert gc.isenabled()
    rc = run_top(
        parser.parse_args(["top", "--exporter", exp.url, "--once", "--interval", "1s"]), {}
    )
    assert rc == 0, capsys.readouterr().err
    assert gc.isenabled()
    assert "trainer" in capsys.readouterr().out
