"""The fast paths of ``--once`` give what the general ones give: the parser, the table."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from podres_exporter.cli.export import Exporter
from podres_exporter.top.fetch import WANTED, parse_exposition, samples_from_families
from podres_exporter.top.render import _plain_table, _table, container_cells, device_cells
from podres_exporter.top.rows import Sample
from podres_sim import SimKubelet
from tests.support import http_get, wait_until
from tests.top.support import hostile_data

MakeSim = Callable[..., SimKubelet]
MakeExporter = Callable[..., Exporter]

TRICKY = """\
# HELP podres_pods Pods.
# TYPE podres_pods gauge
podres_pods 3
podres_containers{} 4
podres_node_device_info{device_id="a\\\\b\\"c\\nd",resource="x/y",state="free",} 1.0
podres_cpu_busy_seconds_total{cpu="2" , pod="p{}"} 12.5 1700000000000
podres_gpu_memory_used_bytes{uuid="GPU-1"} NaN
podres_gpu_memory_total_bytes{uuid="GPU-1"} +Inf
other_metric{a="b"} 7
"""


def as_tuples(samples: object) -> list[tuple[str, tuple[tuple[str, str], ...], str]]:
    assert isinstance(samples, list | tuple)
    out = []
    for s in samples:
        assert isinstance(s, Sample)
        out.append((s.name, tuple(sorted(s.labels.items())), repr(s.value)))
    return sorted(out)


def test_parser_reads_an_exporter_as_prometheus_client_does(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """Every sample of a demo exporter's /metrics, labels and values alike."""
    exp = make_exporter(make_sim("demo"))
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    text = http_get(exp.url + "/metrics")[2].decode()
    ours = parse_exposition(text)
    theirs = samples_from_families(text_string_to_metric_families(text))
    assert len(ours) > 100 and as_tuples(ours) == as_tuples(theirs)
    wanted = parse_exposition(text, WANTED)
    assert as_tuples(wanted) == as_tuples([s for s in theirs if s.name in WANTED])


def test_parser_handles_escapes_spacing_timestamps_and_special_values() -> None:
    ours = parse_exposition(TRICKY)
    theirs = samples_from_families(text_string_to_metric_families(TRICKY))
    assert as_tuples(ours) == as_tuples(theirs)
    assert ours[2].labels["device_id"] == 'a\\b"c\nd'
    assert [s.name for s in parse_exposition(TRICKY, WANTED)] == [
        s.name for s in ours if s.name != "other_metric"
    ]


@pytest.mark.parametrize("line", ['podres_pods{a="b" 1', "podres_pods", 'podres_pods{a="b"} x'])
def test_parser_names_the_bad_line(line: str) -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_exposition("podres_pods 1\n" + line + "\n")


def rich_lines(cols: object, cells: list[list[str]], width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None, _environ={})
    console.print(_table(cols, cells, width))  # type: ignore[arg-type]
    assert isinstance(console.file, io.StringIO)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]


@pytest.mark.parametrize("width", [40, 80, 119, 120, 160, 240])
@pytest.mark.parametrize("wide", [False, True])
def test_plain_table_draws_what_rich_draws(width: int, wide: bool) -> None:
    """Hostile, wide and long names at each width: the same lines, or rich does it."""
    data = hostile_data()
    containers = [r for n in data.nodes for r in n.containers]
    devices = [r for n in data.nodes for r in n.devices]
    drawn = 0
    for cols, cells in (
        container_cells(containers, wide=wide, multi_node=True, width=width),
        device_cells(devices, wide=wide, multi_node=True, width=width),
    ):
        plain = _plain_table(cols, cells, width)
        if plain:
            drawn += 1
            assert [line.rstrip() for line in plain] == rich_lines(cols, cells, width)
    assert drawn or width < 120  # narrower, the wide columns may not fit: rich lays out
