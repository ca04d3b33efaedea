"""A real Prometheus server scrapes the exporter and reads back what it serves."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from podres_exporter.cli.export import Exporter
from podres_sim import SimKubelet
from tests.support import Prometheus, http_get, scrape, select, wait_until

pytestmark = pytest.mark.prometheus


def test_prometheus_scrapes_pod_labelled_series(
    make_sim: Callable[..., SimKubelet],
    make_exporter: Callable[..., Exporter],
    prometheus: Callable[[str], Prometheus],
) -> None:
    """Prometheus ingests the demo node: the target is up and its numbers equal /metrics."""
    sim = make_sim("demo")
    exp = make_exporter(sim, poll_interval_s=3600.0)
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    prom = prometheus(exp.url.removeprefix("http://"))
    wait_until(lambda: prom.query('up{job="podres"} == 1'), timeout=30)
    wait_until(lambda: prom.query("podres_node_cpus"), timeout=30)
    ours = scrape(exp.url)
    for row in prom.query("podres_node_cpus"):
        labels = row["metric"]
        key = frozenset((k, labels[k]) for k in ("numa_node", "pool"))
        assert float(row["value"][1]) == select(ours, "podres_node_cpus")[key]
    held = prom.query(
        "count by (namespace, pod, container) "
        '(podres_container_device_info{resource="nvidia.com/gpu"})'
    )
    assert held and all(r["metric"]["pod"] and r["metric"]["namespace"] for r in held)
    free_gpus = prom.query('sum(podres_node_devices{resource="nvidia.com/gpu", state="free"})')
    assert float(free_gpus[0]["value"][1]) == sum(
        select(ours, "podres_node_devices", resource="nvidia.com/gpu", state="free").values()
    )
    # Pod-labelled GPU and NIC series, and no double counting of shared GPUs.
    assert prom.query('podres_gpu_utilization_ratio{pod!=""}')
    assert prom.query('podres_net_receive_bytes_total{pod!=""}')
    copies = prom.query("count by (uuid) (podres_gpu_memory_used_bytes)")
    assert copies and all(float(r["value"][1]) == 1 for r in copies)
    assert prom.query("podres_gpu_shared == 1"), "the demo has a time-sliced GPU"
    assert not prom.query(
        'podres_gpu_memory_used_bytes{pod!=""} and on (uuid) (podres_gpu_shared == 1)'
    ), "a shared GPU carries no holder"
    per_pod = prom.query(
        'sum(podres_gpu_memory_used_bytes{pod!=""}) + sum(podres_gpu_memory_used_bytes{pod=""})'
    )
    every = prom.query("sum(podres_gpu_memory_used_bytes)")
    assert float(per_pod[0]["value"][1]) == float(every[0]["value"][1])
    # The scrape produced no sample Prometheus had to reject.
    bad = prom.query("scrape_samples_post_metric_relabeling - scrape_samples_scraped")
    assert float(bad[0]["value"][1]) == 0
