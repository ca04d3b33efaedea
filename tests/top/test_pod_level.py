"""Pod-level CPU sets in ``podres top``: a pod's own row shows its private shared pool."""

from __future__ import annotations

from podres_exporter.top.render import container_cells, render
from podres_exporter.top.rows import ContainerRow, Sample, build
from podres_exporter.top.selection import Options
from tests.top.samples import NODE, TRAINER, cpu, reading, s

POD = {"namespace": "db", "pod": "pg-0", "container": ""}
PG = {"namespace": "db", "pod": "pg-0", "container": "postgres"}


def _rows(*extra: Sample) -> dict[tuple[str, str], ContainerRow]:
    data = build(reading(*NODE, *extra))
    return {(r.pod, r.container): r for r in data.nodes[0].containers}


def test_pod_row_shows_its_shared_pool() -> None:
    """The pod's own CPUs make a "(pod pool)" row; its container keeps its own CPU."""
    rows = _rows(
        cpu(8, "1", "exclusive", PG),
        cpu(9, "1", "exclusive", POD),
        cpu(10, "1", "exclusive", POD),
        s("podres_pod_shared_pool_cpus", 2, namespace="db", pod="pg-0", numa_node="1"),
    )
    pod = rows[("pg-0", "")]
    assert pod.cpulist == "9-10" and pod.shared_pool == 2
    assert rows[("pg-0", "postgres")].shared_pool is None
    _, cells = container_cells([pod], wide=False, multi_node=False, width=160)
    assert cells[0][2:4] == ["(pod pool)", "9-10"]


def test_an_empty_pool_still_shows_the_pod_row() -> None:
    """A pod whose containers hold all its pod-level CPUs: a pod row with pool 0, no CPUs."""
    rows = _rows(
        cpu(8, "1", "exclusive", PG),
        s("podres_pod_shared_pool_cpus", 0, namespace="db", pod="pg-0", numa_node="1"),
    )
    assert rows[("pg-0", "")].shared_pool == 0
    _, cells = container_cells([rows[("pg-0", "")]], wide=False, multi_node=False, width=160)
    assert cells[0][2:4] == ["(pod pool)", "-"]


def test_pods_without_pod_level_sets_render_as_before() -> None:
    """No pool series: no pod rows, and the frame is the same as without the metric known."""
    before = render(build(reading(*NODE)), Options(), 120)
    assert "(pod" not in before
    rows = _rows()
    assert all(r.shared_pool is None for r in rows.values())
    assert ("train-0", TRAINER["container"]) in rows
