"""The simulated kubelet admits through the kubelet's NUMA admission rules: over many
generated nodes and pods, under each Topology Manager policy and scope, what it admits
or refuses is what ``admit`` predicts on the node state the exporter reads over the
pod-resources socket (``NodeReader`` + ``from_reading``; the CPU topology is the
scenario's, as sysfs would give it), and the state it leaves is the one ``apply``
predicts."""

from __future__ import annotations

import random
from pathlib import Path
from typing import get_args

from podres_exporter.core.model import NodeTopology
from podres_exporter.core.topology import admit, apply, from_reading
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.sources.kubelet import KubeletClient
from podres_sim.kubelet.server import SimKubelet
from podres_sim.kubelet.topology import pod_shape, policies
from podres_sim.scenario import ContainerSpec, DeviceSpec, NodeSpec, PodSpec, Scenario, load_builtin
from podres_sim.scenario.kinds import TopologyPolicyName, TopologyScope

GPU = "example.com/gpu"
NODES = 32  # generated nodes; each admits a few generated pods after its background


def _container(rng: random.Random, name: str, kind: str = "app") -> ContainerSpec:
    cpu = rng.choice([0.5, 1, 1, 2, 3, 4])
    gpus = rng.choice([0, 0, 1, 2, 3])
    hp = {"hugepages-2Mi": "64Mi"} if rng.random() < 0.2 else None
    return ContainerSpec.of(
        name,
        cpu=cpu,
        memory=f"{rng.choice([256, 512, 1024, 1536])}Mi",
        hugepages=hp,
        devices={GPU: gpus} if gpus else None,
        kind=kind,  # type: ignore[arg-type]
    )


def _pod(rng: random.Random, name: str, *, init: bool) -> PodSpec:
    containers = [_container(rng, f"c{i}") for i in range(rng.choice([1, 1, 2, 3]))]
    if init and rng.random() < 0.3:
        containers.append(_container(rng, "init", "init"))
    qos = rng.choice([None, None, None, "Burstable"])
    return PodSpec.of("gen", name, *containers, qos=qos)  # type: ignore[arg-type]


def _node(rng: random.Random, policy: str, scope: str) -> NodeSpec:
    numa = rng.choice([1, 2, 2, 3])
    gpus = []
    for i in range(rng.choice([0, 2, 4, 6])):
        where = rng.choice([(i % numa,), (i % numa,), None, tuple(range(min(2, numa)))])
        gpus.append(DeviceSpec(GPU, f"gpu-{i}", where))
    return NodeSpec.uniform(
        numa,
        rng.choice([2, 4, 6]),
        reserved_cpus=[0],
        memory_policy=rng.choice(["static", "none"]),
        memory={"memory": "2Gi", "hugepages-2Mi": "256Mi"},
        devices=gpus,
        topology_policy=policy,  # type: ignore[arg-type]
        topology_scope=scope,  # type: ignore[arg-type]
    )


def _check_node(tmp: Path, seed: int, policy: str, scope: str) -> int:
    rng = random.Random(seed)
    spec = _node(rng, policy, scope)
    background = tuple(_pod(rng, f"bg{i}", init=False) for i in range(rng.choice([0, 2, 4])))
    sim = SimKubelet(Scenario(node=spec, pods=background, seed=seed), str(tmp / f"{seed}.sock"))
    sim.start()
    topo = NodeTopology(
        frozenset(spec.cpus),
        {c: n for n, cpus in enumerate(spec.numa_cpus) for c in cpus},
    )
    reader = NodeReader(KubeletClient(str(sim.socket_path)), lambda: topo, enabled=())
    refused = 0
    try:
        for k in range(6):
            obs = reader.observe()
            assert obs.reading is not None and obs.topology is not None
            state = from_reading(obs.reading, obs.topology, policies(spec))
            candidate = _pod(rng, f"cand{k}", init=True)
            shape = pod_shape(candidate)
            predicted = admit(state, shape)
            got = sim.admit(candidate)
            where = f"seed {seed} {policy}/{scope} pod {k}: {predicted} vs {got}"
            assert predicted.admitted == (got.phase == "Running"), where
            assert predicted.reason.value == (got.reason or ""), where
            refused += not predicted.admitted
            if not any(c.kind == "init" for c in candidate.containers):
                after = reader.observe().reading
                assert after is not None
                want = apply(state, shape, predicted)
                seen = from_reading(after, obs.topology, policies(spec))
                assert seen.free_cpus == want.free_cpus, where
                assert {r: set(v) for r, v in seen.free_devices.items() if v} == {
                    r: set(v) for r, v in want.free_devices.items() if v
                }, where
                for t, per in want.memory.items():
                    assert {n: m.free for n, m in seen.memory[t].items()} == {
                        n: m.free for n, m in per.items()
                    }, where
    finally:
        reader.release()
        sim.stop()
    return refused


def test_sim_admission_equals_prediction_for_every_policy_and_scope(tmp_path: Path) -> None:
    """predicted ⇔ admitted, with the same reason, and the state after as predicted,
    over generated nodes and pods under every policy and both scopes."""
    refused = 0
    combos = [(p, s) for p in get_args(TopologyPolicyName) for s in get_args(TopologyScope)]
    for seed in range(NODES):
        policy, scope = combos[seed % len(combos)]
        refused += _check_node(tmp_path, seed, policy, scope)
    assert refused > 0  # the generated shapes do reach the refusals


def test_numa_scenario_refuses_fragmented_jobs_over_the_socket(tmp_path: Path) -> None:
    """The built-in "numa" scenario: the 2-GPU job and the 10-CPU job are refused with
    TopologyAffinityError; List shows them with empty resources, and the exporter's
    state predicts both refusals."""
    sc = load_builtin("numa")
    sim = SimKubelet(sc, str(tmp_path / "k.sock"))
    sim.start()
    try:
        refused = {p.name: p for p in sim.node.pods if p.phase == "Failed"}
        assert set(refused) == {"two-gpu-job", "wide-cpu-job"}
        assert {p.reason for p in refused.values()} == {"TopologyAffinityError"}
        reading = KubeletClient(str(sim.socket_path)).read()
        listed = {p.name: p for p in reading.pods}
        for name in refused:
            assert all(not (c.cpu_ids or c.devices or c.memory) for c in listed[name].containers)
        spec = sc.node
        topo = NodeTopology(
            frozenset(spec.cpus), {c: n for n, cs in enumerate(spec.numa_cpus) for c in cs}
        )
        state = from_reading(reading, topo, policies(spec))
        for p in sc.pods:
            if p.name in refused:
                d = admit(state, pod_shape(p))
                assert d.shortage is not None
                assert d.reason.value == "TopologyAffinityError"
    finally:
        sim.stop()
