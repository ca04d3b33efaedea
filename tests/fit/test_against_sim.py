"""`podres fit` against the simulated kubelet, through the metrics: over generated nodes
(NUMA node counts, SMT, reserved CPUs, devices with and without topology, unhealthy
devices, memory and hugepages under the memory manager's Static and None policies, the
CPU manager's static and none policies, pods already admitted) under every Topology
Manager policy and scope, a pod that `podres fit --exporter URL` predicts the kubelet
admits is the one the simulated kubelet admits, with the same reason and NUMA placement,
and the "how many more" count is how many of the shape it then admits in a row.

The exporter serves ``/metrics`` over real HTTP; `podres fit` reads it, as it reads any
exporter, and knows the node by its metric counts only. The test polls the exporter
itself after each admission (its own interval is long), so each shape is asked on the
state the previous one left.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, get_args

import pytest

from podres_exporter.cli import main
from podres_exporter.cli.export import Exporter
from podres_exporter.core.topology import Pod
from podres_sim import SimKubelet
from podres_sim.kubelet.pods import PodState
from podres_sim.kubelet.topology import pod_shape
from podres_sim.scenario import ContainerSpec, DeviceSpec, NodeSpec, PodSpec, Scenario
from podres_sim.scenario.kinds import TopologyPolicyName, TopologyScope

GPU = "example.com/gpu"
NODES = 64  # generated nodes, each asked a few generated shapes
FAST = 16  # the first ones, two per policy and scope, in the fast tier; the rest slow
SHAPES = 6
COMBOS = [(p, s) for p in get_args(TopologyPolicyName) for s in get_args(TopologyScope)]
MakeSim = Callable[..., SimKubelet]


def _container(rng: random.Random, name: str, kind: str = "app") -> ContainerSpec:
    gpus = rng.choice([0, 0, 1, 2, 3])
    hp = {"hugepages-2Mi": rng.choice(["64Mi", "128Mi"])} if rng.random() < 0.25 else None
    return ContainerSpec.of(
        name,
        cpu=rng.choice([0.5, 1, 1, 2, 3, 4, 6]),
        memory=f"{rng.choice([256, 512, 1024, 1536, 3072])}Mi",
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


def _node(rng: random.Random, policy: str, scope: str) -> tuple[NodeSpec, list[str]]:
    """A generated node, and the devices that go unhealthy once the exporter has read
    them healthy (as devices do at run time).

    Devices unhealthy from the start are only ones without topology: the NUMA node of a
    device unhealthy since the exporter started is in nothing the kubelet tells (its
    pod-resources API lists only the healthy devices' topology, its checkpoint none), so
    ``podres_node_registered_devices`` has no ``numa_node`` for it and fit counts it as
    a device without topology, while the kubelet counts its NUMA node (docs/fit.md,
    limits). And some CPU stays allocatable: with every CPU reserved the kubelet's
    allocatable CPU list is empty, as under the CPU manager's ``none`` policy, and the
    exporter counts the CPUs as the shared pool (a node no scheduler sends a pod that
    asks for CPU)."""
    numa = rng.choice([1, 2, 2, 3, 4])
    threads = rng.choice([1, 2])
    per_numa = rng.choice([2, 4, 6])
    gpus = []
    later: list[str] = []
    for i in range(rng.choice([0, 2, 4, 6])):
        where = rng.choice([(i % numa,), (i % numa,), None, tuple(range(min(2, numa)))])
        sick = rng.random() < 0.2
        if sick and where is not None:
            later.append(f"gpu-{i}")
        gpus.append(DeviceSpec(GPU, f"gpu-{i}", where, healthy=not (sick and where is None)))
    reserved = rng.choice([(), (0,), (0, 1)])
    spec = NodeSpec.uniform(
        numa,
        per_numa,
        reserved_cpus=reserved if len(reserved) < numa * per_numa else (0,),
        cpu_policy=rng.choice(["static", "static", "none"]),
        memory_policy=rng.choice(["static", "none"]),
        memory={"memory": rng.choice(["2Gi", "4Gi"]), "hugepages-2Mi": "256Mi"},
        devices=gpus,
        topology_policy=policy,  # type: ignore[arg-type]
        topology_scope=scope,  # type: ignore[arg-type]
    )
    return dataclasses.replace(spec, threads_per_core=threads), later


def _resources(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: (f"{n}m" if r == "cpu" else str(n)) for r, n in amounts.items()}


def _manifest(pod: Pod, path: Path) -> Path:
    """The pod as a user has it: a Pod manifest (JSON is YAML) with each container's
    requests and limits."""

    def container(c: Any) -> dict[str, Any]:
        return {
            "name": c.name,
            "image": "x",
            "resources": {"requests": _resources(c.requests), "limits": _resources(c.limits)},
        }

    spec: dict[str, Any] = {"containers": [container(c) for c in pod.containers]}
    if pod.init_containers:
        spec["initContainers"] = [container(c) for c in pod.init_containers]
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cand"}, "spec": spec}
    path.write_text(json.dumps(doc))
    return path


class Node:
    """A simulated node, its exporter, and `podres fit` asked over HTTP."""

    def __init__(self, sim: SimKubelet, exporter: Exporter, capsys: Any, tmp: Path) -> None:
        self.sim, self.exporter, self.capsys, self.tmp = sim, exporter, capsys, tmp

    def poll(self) -> None:
        """The exporter reads the kubelet now (what its next interval would do)."""
        self.exporter.poller.poll_once()

    def fit(self, pod: Pod) -> dict[str, Any]:
        """`podres fit --exporter URL -f pod.json -o json`'s answer for this node."""
        path = _manifest(pod, self.tmp / "pod.json")
        self.capsys.readouterr()
        rc = main(["fit", "--exporter", self.exporter.url, "-f", str(path), "-o", "json"], env={})
        out, err = self.capsys.readouterr()
        assert rc in (0, 1), err
        doc: dict[str, Any] = json.loads(out)
        [node] = doc["nodes"]
        assert node["fits"] == node["admitted"]  # no scheduler check from one exporter
        return node


def _check_placement(spec: NodeSpec, got: PodState, predicted: Mapping[str, Any]) -> None:
    """Where the kubelet's choice is determined (a preferred hint under a policy other
    than none), what each listed container holds is on the NUMA nodes predicted: its
    exclusive CPUs and pinned memory within them, each device with a topology on one of
    them (devicemanager ``generateDeviceTopologyHints`` counts a device for a mask its
    NUMA nodes meet)."""
    numa_of = {c: n for n, cpus in enumerate(spec.numa_cpus) for c in cpus}
    held = {c.name: c for c in got.containers}
    for p in predicted["placements"]:
        if p["init"] or p["numa_nodes"] is None or not p["preferred"]:
            continue
        want = set(p["numa_nodes"])
        for name in [p["container"]] if p["container"] else list(held):
            c = held[name]
            said = f"{name}: {c} not on {want}"
            assert {numa_of[cpu] for cpu in c.cpu_ids} <= want, said
            assert {n for g in c.memory for n in g.numa} <= want, said
            assert all(want & set(d.numa) for d in c.devices if d.numa), said


def _run_node(node: Node, rng: random.Random, spec: NodeSpec, where: str) -> None:
    """Ask SHAPES generated shapes, each on the state the previous one left."""
    for k in range(SHAPES):
        candidate = _pod(rng, f"cand{k}", init=True)
        shape = pod_shape(candidate)
        predicted = node.fit(shape)
        got = node.sim.admit(candidate)
        said = f"{where} pod {k} {shape}: predicted {predicted} vs {got}"
        assert predicted["admitted"] == (got.phase == "Running"), said
        assert predicted["reason"] == (got.reason or ""), said
        if got.phase == "Running":
            _check_placement(spec, got, predicted)
        node.poll()


def _count_in_a_row(node: Node, rng: random.Random, where: str) -> None:
    """``more`` is how many of the shape the kubelet then admits one after the other."""
    gpus = rng.choice([0, 0, 1])
    small = ContainerSpec.of(
        "c",
        cpu=rng.choice([0.5, 1, 2]),
        memory=rng.choice(["128Mi", "256Mi"]),
        devices={GPU: gpus} if gpus else None,
    )
    candidate = PodSpec.of("gen", "more", small)
    predicted = node.fit(pod_shape(candidate))
    if predicted["more_capped"]:
        return
    admitted = 0
    while admitted <= predicted["more"]:
        got = node.sim.admit(candidate, name=f"more-{admitted}")
        if got.phase != "Running":
            break
        admitted += 1
    assert admitted == predicted["more"], f"{where}: {predicted} vs {admitted} in a row"
    node.poll()


@pytest.mark.parametrize(
    "seed", [pytest.param(s, marks=[pytest.mark.slow] if s >= FAST else []) for s in range(NODES)]
)
def test_fit_predicts_the_simulated_kubelets_admission(
    seed: int,
    make_sim: MakeSim,
    make_exporter: Callable[..., Exporter],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """predicted ⇔ admitted, with the kubelet's reason and NUMA placement, and the
    "how many more" count equal to the pods admitted in a row, through the metrics."""
    policy, scope = COMBOS[seed % len(COMBOS)]
    rng = random.Random(seed)
    spec, later = _node(rng, policy, scope)
    background = tuple(_pod(rng, f"bg{i}", init=False) for i in range(rng.choice([0, 2, 4])))
    sim = make_sim(Scenario(node=spec, pods=background, seed=seed))
    exporter = make_exporter(sim, poll_interval_s=3600.0)
    assert exporter.store.wait_for(lambda view: True, 10) is not None  # its first poll
    node = Node(sim, exporter, capsys, tmp_path)
    for device in later:
        sim.set_device_health(GPU, device, False)
    node.poll()
    where = f"seed {seed} {policy}/{scope}"
    _run_node(node, rng, spec, where)
    _count_in_a_row(node, rng, where)


def test_memory_pinned_across_numa_nodes_is_a_group_through_the_metrics(
    make_sim: MakeSim,
    make_exporter: Callable[..., Exporter],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Memory pinned across NUMA nodes 0 and 1 makes them one group: a small pod can no
    longer pin memory on node 0 alone, and under restricted the kubelet refuses it; fit
    reads the group from the allocated memory's joint ``0,1`` series and predicts it."""
    spec = NodeSpec.uniform(
        2, 4, memory_policy="static", memory={"memory": "2Gi"},
        topology_policy="restricted", topology_scope="container",
    )  # fmt: skip
    wide = PodSpec.of("gen", "wide", ContainerSpec.of("c", cpu=6, memory="3Gi"))
    sim = make_sim(Scenario(node=spec, pods=(wide,)))
    exporter = make_exporter(sim, poll_interval_s=3600.0)
    assert exporter.store.wait_for(lambda view: True, 10) is not None
    node = Node(sim, exporter, capsys, tmp_path)
    assert [g.numa for g in sim.node.pods[0].containers[0].memory] == [(0, 1)]
    small = PodSpec.of("gen", "small", ContainerSpec.of("c", cpu=1, memory="512Mi"))
    predicted = node.fit(pod_shape(small))
    got = sim.admit(small)
    assert (got.phase, got.reason) == ("Failed", "TopologyAffinityError")
    assert (predicted["admitted"], predicted["reason"]) == (False, "TopologyAffinityError")
    assert predicted["more"] == 0


def test_memory_alone_and_in_a_group_on_one_numa_node(
    make_sim: MakeSim,
    make_exporter: Callable[..., Exporter],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """A pod whose memory fits no single NUMA node, and may not join nodes used alone,
    is pinned across every node by the merged default hint: node 0 then holds memory
    alone and in the group, and the group's block was taken from node 0 first. fit takes
    the group, and the free memory as the kubelet took it (not the exported even split),
    and predicts that the next pod's memory fits nowhere, as the kubelet finds."""
    spec = NodeSpec.uniform(
        2, 4, cpu_policy="none", memory_policy="static", memory={"memory": "2Gi"},
        topology_policy="restricted", topology_scope="container",
    )  # fmt: skip
    sim = make_sim(Scenario(node=spec))
    exporter = make_exporter(sim, poll_interval_s=3600.0)
    assert exporter.store.wait_for(lambda view: True, 10) is not None
    node = Node(sim, exporter, capsys, tmp_path)
    for name, memory, where in (("a", "1536Mi", (0,)), ("b", "1Gi", (1,)), ("c", "1280Mi", (0, 1))):
        got = sim.admit(PodSpec.of("gen", name, ContainerSpec.of("c", cpu=1, memory=memory)))
        assert [g.numa for g in got.containers[0].memory] == [where]
    node.poll()
    last = PodSpec.of("gen", "d", ContainerSpec.of("c", cpu=1, memory="320Mi"))
    predicted = node.fit(pod_shape(last))
    got = sim.admit(last)
    assert (got.phase, got.reason) == ("Failed", "UnexpectedAdmissionError")
    assert (predicted["admitted"], predicted["reason"]) == (False, "UnexpectedAdmissionError")
