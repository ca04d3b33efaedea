"""The answer per node and for the fleet, as a table and as JSON (checked against the
schema docs/fit.md describes); the scheduler's check of requests against allocatable."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from podres_exporter.core.topology import Container, Pod
from podres_exporter.fit.answer import answer, pod_requests, scheduler_verdict
from podres_exporter.fit.output import render, to_json
from podres_exporter.fit.source import SchedulerFacts
from podres_exporter.fit.state import NodeFacts, node_facts
from podres_exporter.top.rows import Sample

GPU = "nvidia.com/gpu"
GI = 2**30
SCHEMA = json.loads((Path(__file__).parent / "fit.schema.json").read_text())
CONFIG = {
    "topology_manager_policy": "single-numa-node",
    "topology_manager_scope": "container",
    "cpu_manager_policy": "static",
    "memory_manager_policy": "None",
}


def gpu_node(name: str, free: tuple[int, int], policy: str = "single-numa-node") -> NodeFacts:
    """Two NUMA nodes of 16 free CPUs (8 whole cores) and 4 GPUs each, ``free`` GPUs free."""
    samples = [
        Sample("podres_kubelet_config_info", {**CONFIG, "topology_manager_policy": policy}, 1)
    ]
    samples.append(Sample("podres_node_cpu_threads_per_core", {}, 2))
    for numa, n_free in enumerate(free):
        n = str(numa)
        samples += [
            Sample("podres_node_cpus", {"numa_node": n, "pool": "shared_free"}, 16),
            Sample("podres_node_free_cores", {"numa_node": n}, 8),
            Sample("podres_node_registered_devices", {"resource": GPU, "numa_node": n}, 4),
            Sample("podres_node_allocatable_devices", {"resource": GPU, "numa_node": n}, 4),
            Sample(
                "podres_node_devices", {"resource": GPU, "numa_node": n, "state": "free"}, n_free
            ),
        ]
    return node_facts(name, samples)


def gpu_pod(gpus: int) -> Pod:
    amounts = {"cpu": 4000, "memory": GI, GPU: gpus}
    return Pod("job", (Container("main", requests=amounts, limits=amounts),))


def test_answer_per_node_where_why_and_how_many_more() -> None:
    """Under single-numa-node, 3 GPUs fit on the NUMA node with 3 free (once); 4 fit on
    neither, and the refusal names the resource, NUMA nodes and policy."""
    nodes = [gpu_node("a", (2, 3)), gpu_node("b", (2, 2))]
    fleet = answer(nodes, gpu_pod(3), None, limit=16)
    a, b = fleet.nodes
    assert a.fits and [p.affinity for p in a.decision.placements] == [(1,)] and a.more == 1
    assert not b.fits and b.decision.reason.value == "TopologyAffinityError"
    assert b.decision.shortage is not None and b.decision.shortage.resource == GPU
    assert fleet.more == 1 and [x.node for x in fleet.fitting] == ["a"]
    text = render(fleet, gpu_pod(3), "flags", "exporter x", 140)
    lines = text.splitlines()
    assert (
        lines[0]
        == "podres fit: flags (Guaranteed; cpu 4, memory 1Gi, nvidia.com/gpu 3) on exporter x"
    )
    assert lines[1].startswith("scheduler check: not made: kube-state-metrics is not")
    row_a = next(line for line in lines if line.startswith("a "))
    assert row_a.split()[:5] == ["a", "single-numa-node/container", "yes", "1", "1"]
    row_b = next(line for line in lines if line.startswith("b "))
    assert "TopologyAffinityError: nvidia.com/gpu short on NUMA" in row_b
    assert "under single-numa-node" in row_b
    assert "fits on 1 of 2 nodes; 1 more in all" in lines


def test_json_follows_the_documented_schema() -> None:
    """-o json validates against the schema of docs/fit.md, fitting or not, with a
    scheduler check or without."""
    nodes = [gpu_node("a", (2, 3)), gpu_node("b", (0, 0), policy="best-effort")]
    ksm = SchedulerFacts({"a": {"cpu": 64.0, "pods": 110.0}}, {"a": {"cpu": 62.0}}, {"a": 3})
    for pod in (gpu_pod(3), gpu_pod(1)):
        for scheduler in (None, ksm):
            doc = to_json(answer(nodes, pod, scheduler, limit=8), pod, "flags", "x", 8)
            jsonschema.validate(json.loads(json.dumps(doc)), SCHEMA)


def test_nodes_alike_are_answered_once() -> None:
    """Two nodes with the same counts share one decision (computed once)."""
    fleet = answer([gpu_node("a", (1, 1)), gpu_node("b", (1, 1))], gpu_pod(1), None, limit=8)
    a, b = fleet.nodes
    assert a.decision is b.decision and a.more == b.more == 2


def test_a_resource_no_device_plugin_serves_is_noted() -> None:
    """A pod asking for a resource the node registers no device of: admitted by the
    kubelet's managers, and a note says it is the scheduler's to refuse."""
    amounts = {"example.com/fpga": 1}
    pod = Pod("p", (Container("c", requests=amounts, limits=amounts),))
    fleet = answer([gpu_node("a", (1, 1)), gpu_node("b", (1, 1))], pod, None, limit=2)
    assert all(a.fits for a in fleet.nodes)
    assert (
        "a, b: no device plugin serves example.com/fpga: the kubelet leaves it to the scheduler"
        in render(fleet, pod, "flags", "x", 200).splitlines()
    )


def test_count_stops_at_the_limit_and_says_so() -> None:
    """A pod the kubelet never refuses is counted up to --limit, shown with a ``+``."""
    pod = Pod("p", (Container("c", requests={"cpu": 100}),))  # Burstable: nothing pinned
    fleet = answer([gpu_node("a", (4, 4))], pod, None, limit=5)
    assert fleet.nodes[0].more == 5 and fleet.capped
    assert "5+ more in all" in render(fleet, pod, "flags", "x", 120)


def test_scheduler_check_is_requests_against_allocatable() -> None:
    """Each requested resource and the pod count against allocatable less what bound pods
    request, in kube-state-metrics' names and units; a node it does not know is unchecked."""
    ksm = SchedulerFacts(
        allocatable={"a": {"cpu": 8.0, "memory": 16.0 * GI, "nvidia_com_gpu": 4.0, "pods": 3.0}},
        requested={"a": {"cpu": 5.7, "memory": 8.0 * GI, "nvidia_com_gpu": 1.0}},
        pods={"a": 2},
    )
    ok = scheduler_verdict("a", {"cpu": 300, "memory": GI, GPU: 1}, ksm)
    assert ok is not None and ok.fits and ok.count == 1  # the pod count allows one more
    short = scheduler_verdict("a", {"cpu": 2500, GPU: 4}, ksm)
    assert short is not None and short.short == ("cpu", "nvidia_com_gpu") and short.count == 0
    assert scheduler_verdict("z", {"cpu": 1}, ksm) is None


def test_scheduler_refusal_makes_a_node_unfit_and_bounds_the_count() -> None:
    """A node the kubelet admits on but the scheduler's check refuses does not fit."""
    ksm = SchedulerFacts({"a": {"cpu": 64.0, "pods": 110.0}}, {"a": {"cpu": 62.0}}, {"a": 3})
    a = answer([gpu_node("a", (4, 4))], gpu_pod(1), ksm, limit=8).nodes[0]
    assert a.decision.admitted and not a.fits and a.more == 0
    room = {"cpu": 64.0, "pods": 110.0, "memory": 64.0 * GI, "nvidia_com_gpu": 8.0}
    ksm = SchedulerFacts({"a": room}, {"a": {"cpu": 56.0}}, {"a": 3})
    a = answer([gpu_node("a", (4, 4))], gpu_pod(1), ksm, limit=8).nodes[0]
    assert a.fits and a.more == 2  # 8 cores left for pods of 4


def test_pod_request_is_the_larger_of_the_app_sum_and_the_largest_init() -> None:
    """Init containers run one at a time before the app containers."""
    pod = Pod(
        "p",
        (Container("a", requests={"cpu": 1000}), Container("b", requests={"cpu": 500})),
        (Container("i", requests={"cpu": 2000, "memory": GI}),),
    )
    assert pod_requests(pod) == {"cpu": 2000, "memory": GI}
