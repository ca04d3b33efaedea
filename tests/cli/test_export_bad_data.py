"""Bad data from the kubelet is kept, served, counted, and never breaks the exposition."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from podres_exporter._generated.podresources.v1 import api_pb2 as v1
from podres_exporter.cli.export import Exporter
from podres_sim import SimKubelet, write_sysfs
from tests.support import http_get, parse_samples, sample, scrape, select, wait_until

MakeSim = Callable[..., SimKubelet]
MakeExporter = Callable[..., Exporter]
WIDGET = "example.com/widget"
ODD = 'we"ird\\name\nwith ünïcode ✓'


def _ready(exp: Exporter) -> bool:
    return http_get(exp.url + "/readyz")[0] == 200


def _container(name: str, cpus: list[int], devices: list[str]) -> v1.ContainerResources:
    return v1.ContainerResources(
        name=name,
        cpu_ids=cpus,
        devices=[v1.ContainerDevices(resource_name=WIDGET, device_ids=[d]) for d in devices],
    )


@pytest.mark.prometheus
def test_duplicates_unknown_cpus_and_odd_names(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """Duplicate ids, a CPU the node lacks and odd names: served, counted, valid exposition."""
    sim = make_sim("minimal")
    held = next(d.device_id for p in sim.node.pods for c in p.containers for d in c.devices)
    held_cpu = next(cpu for p in sim.node.pods for c in p.containers for cpu in c.cpu_ids)
    free_cpu = min(sim.node.free_cpus())
    sim.inject_raw_pods(
        v1.PodResources(
            namespace="default",
            name="intruder",
            containers=[_container("c", [held_cpu, 99], [held, held])],
        ),
        v1.PodResources(namespace="", name="", containers=[_container(ODD, [free_cpu], [])]),
    )
    exp = make_exporter(sim)
    wait_until(lambda: _ready(exp))
    body = http_get(exp.url + "/metrics")[2]
    s = parse_samples(body.decode())
    anomalies = {dict(k)["kind"]: v for k, v in select(s, "podres_data_anomalies").items()}
    assert anomalies["device_held_by_several_containers"] == 1
    assert anomalies["cpu_listed_by_several_containers"] == 1
    assert anomalies["cpu_not_online"] == 1
    assert anomalies["empty_name"] == 2
    assert sample(s, "podres_node_devices", resource=WIDGET, numa_node="0", state="allocated") == 1
    holders = select(s, "podres_container_device_info", device_id=held)
    assert {dict(k)["pod"] for k in holders} == {"pinned", "intruder"}
    assert select(s, "podres_container_exclusive_cpus", pod="intruder", numa_node="none")
    assert sample(s, "podres_pods") == 4
    # The odd name survives escaping and parsing byte for byte.
    odd = sample(
        s, "podres_container_exclusive_cpus", namespace="", pod="", container=ODD, numa_node="0"
    )
    assert odd == 1
    proc = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, check=False
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_cpu_offline_in_sysfs(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """An exclusive CPU that sysfs says is offline is kept and counted as cpu_not_online."""
    sim = make_sim("minimal")
    held_cpu = max(cpu for p in sim.node.pods for c in p.containers for cpu in c.cpu_ids)
    write_sysfs(sim.scenario.node, sim.sysfs_root, offline_cpus=[held_cpu])  # type: ignore[attr-defined]
    exp = make_exporter(sim)
    wait_until(lambda: _ready(exp))
    s = scrape(exp.url)
    assert sample(s, "podres_data_anomalies", kind="cpu_not_online") == 1
    assert sum(select(s, "podres_container_exclusive_cpus", pod="pinned").values()) == 2


def test_rejected_pods_are_counted_without_resources(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """Pods rejected at admission appear in the pod count and in no allocation series."""
    sim = make_sim("demo")
    rejected = [p.name for p in sim.node.pods if not p.admitted]
    assert rejected, "the demo has a pod rejected at admission"
    exp = make_exporter(sim)
    wait_until(lambda: _ready(exp))
    s = scrape(exp.url)
    assert sample(s, "podres_pods") == len(sim.node.pods)
    for (name, labels), _ in s.items():
        if name.startswith("podres_container_"):
            assert dict(labels).get("pod") not in rejected


def test_device_unhealthy_while_in_use(make_sim: MakeSim, make_exporter: MakeExporter) -> None:
    """A held device turning unhealthy is allocated_unhealthy; healthy again, it is not."""
    sim = make_sim("minimal")
    held = next(d.device_id for p in sim.node.pods for c in p.containers for d in c.devices)
    exp = make_exporter(sim)
    wait_until(lambda: _ready(exp))

    def state(name: str) -> float | None:
        return sample(
            scrape(exp.url), "podres_node_devices", resource=WIDGET, numa_node="0", state=name
        )

    assert state("allocated_unhealthy") == 0
    sim.set_device_health(WIDGET, held, False)
    wait_until(lambda: state("allocated_unhealthy") == 1)
    allocatable = sample(
        scrape(exp.url), "podres_node_allocatable_devices", resource=WIDGET, numa_node="0"
    )
    assert allocatable == 1 and state("free") == 1 and state("allocated") == 0
    sim.set_device_health(WIDGET, held, True)
    wait_until(lambda: state("allocated_unhealthy") == 0)


def test_rate_limited_kubelet_backs_off_and_recovers(
    make_sim: MakeSim, make_exporter: MakeExporter
) -> None:
    """Polling past the kubelet's rate limit: RESOURCE_EXHAUSTED counted, the exporter lives on."""
    sim = make_sim("minimal", rate_limit=True)
    exp = make_exporter(sim, poll_interval_s=0.001, backoff_initial_s=0.05, backoff_max_s=0.3)
    wait_until(
        lambda: (
            sum(
                select(
                    scrape(exp.url), "podres_kubelet_requests_total", code="RESOURCE_EXHAUSTED"
                ).values()
            )
            > 0
        )
    )
    wait_until(lambda: sample(scrape(exp.url), "podres_kubelet_up") == 1)
    assert http_get(exp.url + "/healthz")[0] == 200
    assert sim.rate_limited_count < sim.total_requests
