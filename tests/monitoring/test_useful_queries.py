"""docs/metrics.md's "Useful queries", run by a real Prometheus scraping the demo: every
query is valid PromQL over names we serve, and "who holds GPU N, and its utilisation" is
answered by selectors on the GPU identity labels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.monitoring.prom import NodePrometheus

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _queries() -> list[str]:
    """The queries of the section's PromQL block (a query may span lines)."""
    text = DOCS.read_text().split("## Useful queries", 1)[1]
    block = re.search(r"```promql\n(.*?)```", text, re.S)
    assert block, "no promql block under Useful queries"
    out: list[str] = []
    for line in block.group(1).splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith(" ") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line.strip())
    return out


@pytest.mark.prometheus
def test_every_useful_query_runs_and_gpu_holders_are_found(
    demo_prometheus: NodePrometheus,
) -> None:
    """Each documented query runs; for a GPU one container holds, both GPU queries name it."""
    held = [
        r["metric"]
        for r in demo_prometheus.query('podres_gpu_utilization_ratio{gpu_instance="", pod!=""}')
    ]
    assert held, "the demo has a GPU held by one container"
    gpu = held[0]["gpu"]
    holder = {k: held[0][k] for k in ("namespace", "pod", "container")}
    for query in _queries():
        rows = demo_prometheus.query(query.replace('gpu="3"', f'gpu="{gpu}"'))
        if 'gpu="3"' in query:
            assert rows, query
            assert all({k: r["metric"][k] for k in holder} == holder for r in rows), rows
        if "podres_node_info" in query:
            assert rows and all(r["metric"]["node"] for r in rows), query
