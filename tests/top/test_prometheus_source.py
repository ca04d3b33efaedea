"""`podres top --prometheus`: a real Prometheus that scraped two exporters, one view of both."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import pytest

from podres_exporter.cli.export import Exporter
from podres_exporter.top import add_top_parser, run_top
from podres_sim import SimKubelet
from tests.support import Prometheus, http_get, scrape, select, wait_until
from tests.top.support import assert_header_matches

pytestmark = pytest.mark.prometheus


def top_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="podres")
    add_top_parser(parser.add_subparsers(dest="command", required=True))
    capsys.readouterr()
    rc = run_top(parser.parse_args(["top", *args]), {})
    out, err = capsys.readouterr()
    return rc, out, err


def test_prometheus_shows_every_node_with_the_numbers_each_exporter_serves(
    make_sim: Callable[..., SimKubelet],
    make_exporter: Callable[..., Exporter],
    prometheus: Callable[[list[str]], Prometheus],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two nodes by instance; free CPUs, free devices, holders equal /metrics; busy from rate()."""
    exporters = [make_exporter(make_sim("demo")), make_exporter(make_sim("minimal"))]
    wait_until(lambda: all(http_get(e.url + "/readyz")[0] == 200 for e in exporters))
    instances = [e.url.removeprefix("http://") for e in exporters]
    prom = prometheus(instances)
    # Every busy counter of both nodes scraped twice: rate() has a value for each.
    busy = sum(len(select(scrape(e.url), "podres_cpu_busy_seconds_total")) for e in exporters)
    wait_until(
        lambda: len(prom.query("rate(podres_cpu_busy_seconds_total[2m])")) == busy, timeout=30
    )

    rc, out, err = top_json(capsys, "--prometheus", prom.url, "-o", "json")
    assert rc == 0, err
    doc = json.loads(out)
    nodes = {n["node"]: n for n in doc["nodes"]}
    assert set(nodes) == set(instances)
    for exp, instance in zip(exporters, instances, strict=True):
        ours, node = scrape(exp.url), nodes[instance]
        assert_header_matches(node, ours)
        held = {
            (dict(k)["pod"], dict(k)["container"])
            for k in select(ours, "podres_container_exclusive_cpus")
        }
        with_cpus = {(c["pod"], c["container"]) for c in node["containers"] if c["cpu_ids"]}
        assert with_cpus == held
        assert all(c["busy_ratio"] is not None for c in node["containers"] if c["cpu_ids"])
    demo = nodes[instances[0]]
    shared = [c for c in demo["containers"] if c["gpu_shared"]]
    assert shared and all(c["gpu_memory_used_bytes"] for c in shared)
    # DRA devices through Prometheus too; the containers not listed are counted.
    reranker = next(c for c in demo["containers"] if c["pod"] == "dra-reranker")
    assert sorted(d["device_id"] for d in reranker["devices"] if d["dra"]) == [
        "gpu-node-a1/eth2",
        "gpu-node-a1/gpu-0",
        "gpu-node-a1/gpu-1",
    ]
    listed = {(c["namespace"], c["pod"], c["container"]) for c in demo["containers"]}
    assert demo["containers_unplaced"] == demo["containers_total"] - len(
        {h for h in listed if h[2]}
    )
    assert demo["containers_unplaced"] > 0

    rc, out, _ = top_json(capsys, "--prometheus", prom.url, "--once", "--pod", "pinned")
    lines = out.splitlines()
    assert rc == 0 and lines[0].startswith(min(instances)), "a header per node, in order"
    assert sum(line.startswith(tuple(instances)) for line in lines) == 3, "2 headers, 1 row"
    table = lines[next(i for i, x in enumerate(lines) if x.startswith("NODE ")) :]
    table = [x for x in table if not x.startswith(("+ ", "  "))]  # not the unplaced note
    assert len(table) == 2 and table[1].startswith(instances[1]) and "pinned" in table[1]

    rc, out, _ = top_json(capsys, "--prometheus", prom.url, "--node", instances[1], "-o", "json")
    assert rc == 0
    assert [n["node"] for n in json.loads(out)["nodes"]] == [instances[1]]
    rc, _, err = top_json(capsys, "--prometheus", prom.url, "--node", "nosuch", "--once")
    assert rc == 2 and "--node 'nosuch'" in err and instances[0] in err
