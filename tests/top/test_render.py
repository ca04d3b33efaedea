"""Frames of `podres top` as text: golden frames at fixed widths, no colour; local-mode rows.

Refresh with `pytest tests/top/test_render.py --update-goldens` and review the diff.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from podres_exporter.top.fetch import LocalSource
from podres_exporter.top.render import Screen, crop_middle, fmt_age, fmt_bytes, fmt_pair, render
from podres_exporter.top.rows import TopData, build
from podres_exporter.top.selection import Options, select
from podres_sim import SimKubelet, load_builtin
from tests.support import exporter_settings

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "top"
ANSI = re.compile(r"\x1b\[")
MakeSim = Callable[..., SimKubelet]


def local_data(sim: SimKubelet) -> TopData:
    """Two readings of the sim through the local source, 2 s apart on a fake clock."""
    host = sim.host  # type: ignore[attr-defined]
    now = [1_750_000_000.0]
    source = LocalSource(
        exporter_settings(sim),
        node_name=sim.scenario.node.name,
        gpu_backend=host.gpu_backend(),
        wall_clock=lambda: now[0],
    )
    try:
        first = source.read()
        now[0] += 2.0
        host.refresh(2.0)
        host.nvml.step(2.0)
        second = source.read()
    finally:
        source.close()
    return build(second, first, source="golden")


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / f"{name}.txt"
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden {path.name}: run with --update-goldens and review it"
    assert text == path.read_text()


@pytest.mark.parametrize("scenario", ["demo", "minimal"])
def test_golden_frames(scenario: str, make_sim: MakeSim, update_goldens: bool) -> None:
    """Both views of each scenario at 80 and 160 columns equal their reviewed frames."""
    data = local_data(make_sim(scenario, pods_api=False))  # owners: test_owner.py
    for view in ("containers", "devices"):
        for width in (80, 160):
            text = render(data, Options(view=view), width)
            assert not ANSI.search(text)
            assert max(len(line) for line in text.splitlines()) <= width
            check_golden(f"{scenario}-{view}-{width}", text, update_goldens)


def test_golden_wide_and_live_frames(make_sim: MakeSim, update_goldens: bool) -> None:
    """-o wide (device ids, pinned memory) and a live frame cut to the terminal's height."""
    data = local_data(make_sim("demo", pods_api=False))  # owners: test_owner.py
    wide = render(data, Options(wide=True), 240)
    check_golden("demo-containers-wide-240", wide, update_goldens)
    check_golden("demo-devices-wide-240", render(data, Options(view="devices", wide=True), 240),
                 update_goldens)  # fmt: skip
    screen = Screen(title="podres top  golden  every 2s", offset=3, prompt="pod filter: tri")
    live = render(data, Options(sort="busy", namespace="ml-"), 100, 24, screen=screen)
    assert len(live.splitlines()) <= 24
    check_golden("demo-live-100x24", live, update_goldens)


def test_demo_rows_hold_what_the_scenario_says(make_sim: MakeSim) -> None:
    """Local mode reads the sim's kubelet and telemetry: CPUs, busy shares, GPUs, MIG, free."""
    data = local_data(make_sim("demo"))
    (node,) = data.nodes
    assert node.header.node == "gpu-node-a1" and node.header.kubelet_up is True
    assert [(c.numa_node, c.shared_free) for c in node.header.cpus] == [("0", 2), ("1", 4)]
    rows = {(r.pod, r.container): r for r in node.containers}
    trainer = rows[("llm-pretrain-0", "trainer")]
    assert trainer.cpulist == "2-7" and trainer.aligned is True
    assert trainer.busy is not None and 0.55 <= trainer.busy <= 1.0, "sim: exclusive CPUs busy"
    assert trainer.device_counts() == (("nvidia.com/gpu", 2),) and trainer.gpu_util is not None
    shared = [r for r in node.containers if r.gpu_shared]
    assert {r.container for r in shared} == {"vllm", "notebook"}
    clickhouse = rows[("clickhouse-0", "clickhouse")]
    assert clickhouse.aligned is False and clickhouse.numa_nodes == ("0", "1")
    free = {
        d.device_id
        for d in node.devices
        if d.state == "free" and d.resource.endswith("mig-1g.10gb")
    }
    assert len(free) == 2


def test_frame_cut_to_height_scrolls_and_lists_keys(make_sim: MakeSim) -> None:
    """With a height the table is cut, says which rows it shows, and the help line is last."""
    data = local_data(make_sim("demo"))
    frame = render(data, Options(), 120, 20, screen=Screen(offset=5))
    lines = frame.splitlines()
    assert len(lines) <= 20
    assert lines[-1].startswith("q quit")
    assert re.search(r"rows 6-\d+ of \d+", frame)
    coloured = render(data, Options(), 120, 20, screen=Screen(), color=True)
    assert ANSI.search(coloured), "live frames may be coloured"


@pytest.mark.parametrize(
    ("keep", "message"),
    [
        ((), "no pods on this node: the kubelet lists none"),
        (("shared",), "no pods on this node hold exclusive CPUs, devices, DRA claims or pinned"),
    ],
)
def test_empty_node_says_so(keep: tuple[str, ...], message: str, make_sim: MakeSim) -> None:
    """A node without pods (or none holding anything) says so instead of an empty table."""
    sc = load_builtin("minimal")
    sc = dataclasses.replace(sc, pods=tuple(p for p in sc.pods if p.name in keep))
    data = local_data(make_sim(sc))
    frame = render(data, Options(), 100)
    assert message in frame
    assert "NAMESPACE" not in frame
    assert "widget 2/2" in frame, "the header is still shown"


def test_filters_that_match_nothing_say_so(make_sim: MakeSim) -> None:
    """Filters that leave no rows name themselves."""
    data = local_data(make_sim("minimal"))
    assert "no containers match the filters (namespace=nope)" in render(
        data, Options(namespace="nope"), 100
    )
    assert select(data, Options(view="devices", resource="widget"))[1]


@pytest.mark.parametrize(
    ("fn", "arg", "text"),
    [
        (fmt_bytes, 192 * 2**30, "192Gi"),
        (fmt_bytes, 12.1 * 2**30, "12.1Gi"),
        (fmt_bytes, 512 * 2**20, "512Mi"),
        (fmt_bytes, None, "-"),
        (fmt_age, 0.44, "0.4s"),
        (fmt_age, 185, "3m05s"),
        (fmt_age, 7800, "2h10m"),
    ],
)
def test_formats(fn: Callable[[float | None], str], arg: float | None, text: str) -> None:
    """Bytes in binary units, ages in s/m/h."""
    assert fn(arg) == text


def test_pair_and_middle_crop() -> None:
    """used/total share the total's unit; long names lose their middle, not their end."""
    assert fmt_pair(57.8 * 2**30, 79.6 * 2**30) == "57.8/79.6Gi"
    assert fmt_pair(None, 1.0) == "-"
    assert crop_middle("triton-resnet50-qsqjfzp9qh-98h7z", 12) == "triton…98h7z"
    assert crop_middle("short", 12) == "short"
