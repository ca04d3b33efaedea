"""The fleet's answers, computed once for nodes alike (one state key), equal the kubelet's
own decision and count (``admit``, ``count_fits``) on every node, under every policy."""

from __future__ import annotations

import random

import pytest

from podres_exporter.core.topology import Container, Pod, admit, count_fits
from podres_exporter.fit.answer import judge
from podres_exporter.fit.state import NodeFacts, node_facts
from podres_exporter.top.rows import Sample

GPU = "nvidia.com/gpu"
GI = 2**30
POLICIES = ("none", "best-effort", "restricted", "single-numa-node")


def random_node(rng: random.Random, name: str, policy: str, scope: str) -> NodeFacts:
    """Two NUMA nodes of 8 to 16 CPUs (2 threads a core), 4 GPUs and 16 GiB each, some held."""
    config = {
        "topology_manager_policy": policy,
        "topology_manager_scope": scope,
        "cpu_manager_policy": "static",
        "cpu_manager_options": rng.choice(("", "full-pcpus-only=true")),
        "memory_manager_policy": rng.choice(("None", "Static")),
    }
    samples = [
        Sample("podres_kubelet_config_info", config, 1),
        Sample("podres_node_cpu_threads_per_core", {}, 2),
    ]
    for numa in ("0", "1"):
        size = rng.choice((8, 12, 16))
        held = 2 * rng.randint(0, size // 2 - 1)
        free = size - held
        cpus = {"shared_free": free, "exclusive": held, "reserved": 0}
        samples += [
            Sample("podres_node_cpus", {"numa_node": numa, "pool": p}, n) for p, n in cpus.items()
        ]
        samples.append(
            Sample(
                "podres_node_free_cores",
                {"numa_node": numa},
                free // 2 - rng.randint(0, 1) * (free >= 2),
            )
        )
        gpus = {"resource": GPU, "numa_node": numa}
        samples += [
            Sample("podres_node_registered_devices", gpus, 4),
            Sample("podres_node_allocatable_devices", gpus, 4),
            Sample("podres_node_devices", {**gpus, "state": "free"}, rng.randint(0, 4)),
        ]
        mem = {"numa_node": numa, "memory_type": "memory"}
        samples += [
            Sample("podres_node_allocatable_memory_bytes", mem, 16 * GI),
            Sample("podres_node_memory_bytes", {**mem, "state": "free"}, rng.randint(0, 16) * GI),
        ]
    return node_facts(name, samples)


def shape(cpu: int, memory_gi: int, gpus: int, containers: int = 1) -> Pod:
    amounts = {"cpu": cpu * 1000, "memory": memory_gi * GI, GPU: gpus}
    made = tuple(Container(f"c{i}", requests=amounts, limits=amounts) for i in range(containers))
    return Pod("p", made)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("scope", ["container", "pod"])
def test_fleet_counts_equal_the_kubelets_count_on_each_node(policy: str, scope: str) -> None:
    """Over generated nodes and shapes, each node's decision and count equal admit and
    count_fits on that node alone."""
    rng = random.Random(f"{policy}/{scope}")
    nodes = [random_node(rng, f"n{i:02d}", policy, scope) for i in range(40)]
    for pod in (shape(2, 2, 1), shape(4, 8, 2), shape(1, 1, 0), shape(2, 2, 1, containers=2)):
        for j in judge(nodes, pod, limit=12):
            assert j.decision == admit(j.facts.state, pod), j.facts.node
            assert j.count == count_fits(j.facts.state, pod, 12), j.facts.node
