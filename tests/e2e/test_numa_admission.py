"""The real kubelet has the last word on NUMA admission.

The session cluster's kubelet is restarted seeing two NUMA nodes (``tests/e2e/numa.py``:
CPU 0 on node 0 and reserved, CPU 1 on node 1 on these machines) under the Topology
Manager's ``single-numa-node`` policy, with ``podres plugin`` advertising two devices on
NUMA node 0 and ``podres export`` reading the kubelet. Pods of a few shapes are then
created one after the other, bound to the node; before each, ``podres fit --exporter``
predicts whether and where it fits (``tests/e2e/numa_fit.py``). The tests check the
kubelet's answer for each shape, the prediction against it (admitted, reason, NUMA nodes
of the Topology Manager's best hint), and the exporter's per-NUMA accounting against the
kubelet's own: its CPU manager checkpoint, its configuration, and its pod-resources
answers read with the project's client. Afterwards the cluster's kubelet runs again as
it was.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.core.cpulist import parse_cpulist
from podres_exporter.core.model import KubeletReading
from podres_exporter.sources.cputopology import read_topology
from podres_exporter.sources.kubelet import KubeletClient
from tests.e2e.cluster import Cluster, wait_for
from tests.e2e.numa import (
    DEVICE_NUMA,
    LAYOUT,
    NAMESPACE,
    NUMA_NODES_2,
    NUMA_OF_CPU,
    RESERVED_CPUS,
    RESOURCE,
    VF_ADDRESSES,
    Outcome,
    Shape,
    cpu_manager_state,
    create_namespace,
    delete_namespace,
    exclusive_cpus,
    exposition,
    numa_kubelet_config,
    outcome,
    pod_manifest,
    progress,
    start_exporter,
    start_plugin,
    two_numa_kubelet,
    write_numa_sysfs,
)
from tests.e2e.numa_fit import (
    Prediction,
    best_hints,
    config_exported,
    predict_with_fit,
)
from tests.faults.support import DaemonProcess, started
from tests.support import Samples, parse_samples, select

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPOLOGY_AFFINITY = "TopologyAffinityError"
SMALL = {"cpu": "10m", "memory": "16Mi"}  # a Burstable container's requests
# Guaranteed with every CPU of NUMA node 1 (one on these two-CPU machines) exclusive
NODE1_CPUS = {"cpu": str(len(LAYOUT.node1)), "memory": "64Mi"}

# In this order, each pod staying as the kubelet left it (running, or refused).
SHAPES = (
    Shape(
        "cpu-and-device",
        {"limits": {**NODE1_CPUS, RESOURCE: 1}},
        admitted=False,
        why="the free CPUs are on NUMA node 1, the devices on node 0: no node has both",
    ),
    Shape("device", {"requests": SMALL, "limits": {RESOURCE: 1}}, admitted=True, numa=DEVICE_NUMA),
    Shape("cpu", {"limits": NODE1_CPUS}, admitted=True, numa=1),
    Shape(
        "two-devices",
        {"requests": SMALL, "limits": {RESOURCE: 2}},
        admitted=False,
        why="one device is free: the device manager has no hint for two",
    ),
    Shape("burstable", {"requests": {"cpu": "100m", "memory": "16Mi"}}, admitted=True),
    Shape(
        "cpu-again",
        {"limits": NODE1_CPUS},
        admitted=False,
        why="node 1's CPUs are taken: the CPU manager has no hint",
    ),
)


@dataclass
class Step:
    """One pod: its shape, the prediction made before it was created, what became of it."""

    shape: Shape
    prediction: Prediction
    outcome: Outcome


@dataclass
class NumaRun:
    """The two-NUMA-node kubelet with its plugin and exporter, and the pods created there."""

    cluster: Cluster
    tree: Path
    config: dict[str, Any]
    exporter: DaemonProcess
    kubelet_log: str
    steps: list[Step] = field(default_factory=list)

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.shape.name == name)

    def fresh_exposition(self) -> str:
        """The exporter's /metrics from a reading of the kubelet taken from now on."""
        since = time.time()

        def taken_since() -> str | None:
            text = exposition(self.exporter)
            taken = select(parse_samples(text), "podres_kubelet_last_success_timestamp_seconds")
            return text if sum(taken.values()) > since else None

        text: str = wait_for("the exporter to read the kubelet again", taken_since, timeout=30)
        return text

    def fresh_samples(self) -> Samples:
        return parse_samples(self.fresh_exposition())

    def reading(self) -> KubeletReading:
        """The kubelet's List and GetAllocatableResources, through the project's client."""
        client = KubeletClient(str(self.cluster.pod_resources_socket))
        try:
            return client.read()
        finally:
            client.close()


def _create(run: NumaRun, shape: Shape) -> Step:
    manifest = run.tree.parent / f"numa-pod-{shape.name}.yaml"
    manifest.write_text(json.dumps(pod_manifest(shape, run.cluster.node_name)))  # JSON is YAML
    run.fresh_samples()  # the exporter has seen the pods before this one
    prediction = predict_with_fit(run.exporter.url, manifest)
    run.cluster.kubectl("apply", "-f", str(manifest))
    result = wait_for(
        f"pod {shape.name} to run or be refused",
        lambda: outcome(run.cluster, shape.name),
        timeout=60,
        interval=0.5,
    )
    progress(
        f"NUMA pod {shape.name}: {'admitted' if result.admitted else 'refused'}"
        f"{'' if result.admitted else f' ({result.reason}: {result.message})'}; predicted by "
        + f"podres fit: {'fits' if prediction.fits else 'does not fit'}"
        + (f" on NUMA {prediction.numa}" if prediction.fits else f" ({prediction.reason})")
    )
    return Step(shape, prediction, result)


@pytest.fixture(scope="module")
def numa(cluster: Cluster) -> Iterator[NumaRun]:
    """The pods of :data:`SHAPES` created on the two-NUMA-node kubelet, each after its
    prediction; everything removed and the cluster's kubelet back afterwards."""
    tree = write_numa_sysfs(cluster.work / "numa" / "sysfs")
    with contextlib.ExitStack() as stack:
        offset = stack.enter_context(two_numa_kubelet(cluster, tree))
        daemons = stack.enter_context(contextlib.contextmanager(started)(cluster.logs))
        plugin = start_plugin(daemons, cluster, tree, tree.parent)
        exporter = start_exporter(daemons, cluster, tree)
        stack.callback(stop_daemons, plugin, exporter)
        stack.callback(delete_namespace, cluster)
        create_namespace(cluster)
        run = NumaRun(cluster, tree, numa_kubelet_config(cluster), exporter, "")
        wait_for(
            f"the kubelet to hold the plugin's {RESOURCE} devices",
            lambda: len(free_devices(run.reading())) == 2,
            timeout=60,
        )
        wait_for(
            "the exporter to serve the kubelet's policies (podres_kubelet_config_info)",
            lambda: config_exported(run.fresh_samples()),
            timeout=30,
        )
        for shape in SHAPES:
            run.steps.append(_create(run, shape))
        with (cluster.logs / "kubelet.log").open("rb") as fh:
            fh.seek(offset)
            run.kubelet_log = fh.read().decode(errors="replace")
        yield run


def stop_daemons(*daemons: DaemonProcess) -> None:
    """SIGTERM first: the plugin removes its sockets as it stops."""
    for daemon in daemons:
        with contextlib.suppress(AssertionError):
            daemon.terminate()


def free_devices(reading: KubeletReading) -> dict[str, tuple[int, ...]]:
    """Allocatable ids of :data:`RESOURCE` -> their NUMA nodes, as the kubelet reports."""
    assert reading.allocatable is not None
    return {
        d.device_id: tuple(d.numa or ())
        for d in reading.allocatable.devices
        if d.resource == RESOURCE
    }


# --------------------------------------------------------------------------- tests


def test_the_made_up_tree_reads_as_two_numa_nodes(tmp_path: Path) -> None:
    """The exporter's own sysfs reader finds the layout's two NUMA nodes in the tree, and
    the plugin's NIC functions on node 0 (what the kubelet is shown, read as it reads it)."""
    tree = write_numa_sysfs(tmp_path / "sysfs")
    topology = read_topology(tree)
    assert dict(topology.cpu_to_numa) == dict(NUMA_OF_CPU)
    node0 = tree / "devices" / "system" / "node" / "node0"
    assert (node0 / "distance").read_text().split() == ["10", "20"]
    assert (node0 / f"cpu{min(LAYOUT.node0)}" / "topology" / "core_id").exists()
    for address in VF_ADDRESSES:
        assert (
            tree / "bus" / "pci" / "devices" / address / "numa_node"
        ).read_text().strip() == str(DEVICE_NUMA)


def test_the_kubelet_sees_two_numa_nodes(numa: NumaRun) -> None:
    """The kubelet reads the made-up tree: two NUMA nodes, the plugin's devices on node 0."""
    assert NUMA_NODES_2.search(numa.kubelet_log)
    allocatable = numa.reading().allocatable
    assert allocatable is not None
    assert set(allocatable.cpu_ids) == set(NUMA_OF_CPU) - RESERVED_CPUS
    numas = {d.numa for d in allocatable.devices if d.resource == RESOURCE}
    assert numas == {(DEVICE_NUMA,)}


def test_the_kubelets_best_hints_read_as_numa_nodes() -> None:
    """The Topology Manager's best hint, as kubelet v1.28 logs it at --v=2, reads as the
    NUMA nodes of its bit mask (None: no affinity), the last one per container."""
    log = "\n".join(
        f'I1128 02:41:12.918322   15988 scope_container.go:50] "Best TopologyHint" '
        f'bestHint={{"NUMANodeAffinity":{mask},"Preferred":{preferred}}} '
        f'pod="{NAMESPACE}/{pod}" containerName="main"'
        for mask, preferred, pod in (
            ("null", "false", "a"),
            ("1", "true", "b"),
            ("2", "true", "c"),
            ("2", "false", "d"),
            ("3", "false", "d"),
        )
    )
    assert best_hints(log) == {
        (f"{NAMESPACE}/a", "main"): None,
        (f"{NAMESPACE}/b", "main"): (0,),
        (f"{NAMESPACE}/c", "main"): (1,),
        (f"{NAMESPACE}/d", "main"): (0, 1),
    }


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_the_kubelet_admits_or_refuses_each_shape(numa: NumaRun, shape: Shape) -> None:
    """Each shape is admitted (Running) or refused with TopologyAffinityError, as the
    kubelet's Topology Manager decides under single-numa-node."""
    got = numa.step(shape.name).outcome
    if shape.admitted:
        assert got.admitted, (shape.name, got)
    else:
        assert got.phase == "Failed", (shape.name, got)
        assert got.reason == TOPOLOGY_AFFINITY, (shape.name, shape.why, got)


def test_podres_fit_predicts_the_kubelets_answer(numa: NumaRun) -> None:
    """For every shape, the prediction made before the pod came equals the kubelet's
    admission: fits <=> admitted, the same reason when refused (TopologyAffinityError),
    and the NUMA nodes the kubelet's Topology Manager chose (its logged best hint)."""
    hints = best_hints(numa.kubelet_log)
    got = {
        s.shape.name: (s.prediction.fits, s.prediction.reason, s.prediction.numa)
        for s in numa.steps
    }
    kubelet = {
        s.shape.name: (
            s.outcome.admitted,
            s.outcome.reason,
            hints[(f"{NAMESPACE}/{s.shape.name}", "main")] if s.outcome.admitted else None,
        )
        for s in numa.steps
    }
    wrong = {name for name in got if got[name] != kubelet[name]}
    assert not wrong, {
        name: {"podres fit": got[name], "kubelet": kubelet[name], "why": why(numa.step(name))}
        for name in sorted(wrong)
    }


def why(step: Step) -> Any:
    """What ``podres fit`` said of the step's pod: its message, shortage and policies."""
    node = json.loads(step.prediction.answer)["nodes"][0]
    return {key: node.get(key) for key in ("message", "shortage", "policies")}


def test_admitted_pods_are_where_the_kubelet_put_them(numa: NumaRun) -> None:
    """The exclusive CPU and the device of the admitted pods are on the NUMA node of the
    shape, as the kubelet's CPU manager checkpoint and pod-resources answer say."""
    state = exclusive_cpus(cpu_manager_state(numa.cluster))
    cpu = numa.step("cpu").outcome.uid
    assert {NUMA_OF_CPU[c] for c in state[(cpu, "main")]} == {numa.step("cpu").shape.numa}
    reading = numa.reading()
    held = {
        (p.name, c.name): {d.numa for d in c.devices if d.resource == RESOURCE}
        for p in reading.pods
        if p.namespace == NAMESPACE
        for c in p.containers
    }
    assert held[("device", "main")] == {(DEVICE_NUMA,)}
    assert not held[("burstable", "main")]
    assert not any(uid == numa.step("burstable").outcome.uid for uid, _ in state)


def test_exporter_cpus_per_numa_node_equal_the_cpu_manager_state(numa: NumaRun) -> None:
    """Exclusive, shared-free and reserved CPUs per NUMA node on /metrics equal the CPU
    manager's checkpoint (its entries and default set) and the kubelet's reserved CPUs."""
    samples = numa.fresh_samples()
    raw = cpu_manager_state(numa.cluster)
    entries = exclusive_cpus(raw)
    holders = {s.outcome.uid: s.shape.name for s in numa.steps}
    default = set(parse_cpulist(raw["defaultCpuSet"]))
    for node in sorted(set(NUMA_OF_CPU.values())):
        here = {c for c, n in NUMA_OF_CPU.items() if n == node}
        exclusive = {c for cpus in entries.values() for c in cpus} & here
        pools = {
            pool: sum(select(samples, "podres_node_cpus", pool=pool, numa_node=str(node)).values())
            for pool in ("exclusive", "shared_free", "reserved")
        }
        assert pools == {
            "exclusive": len(exclusive),
            "shared_free": len((default - RESERVED_CPUS) & here),
            "reserved": len(RESERVED_CPUS & here),
        }, node
    for (uid, container), cpus in entries.items():
        labels = {"namespace": NAMESPACE, "pod": holders[uid], "container": container}
        for node in {NUMA_OF_CPU[c] for c in cpus}:
            shown = select(
                samples, "podres_container_exclusive_cpus", numa_node=str(node), **labels
            )
            assert sum(shown.values()) == len({c for c in cpus if NUMA_OF_CPU[c] == node})
    shown_total = sum(select(samples, "podres_container_exclusive_cpus").values())
    assert shown_total == sum(len(c) for c in entries.values()) == len(LAYOUT.node1)


def test_exporter_devices_and_cpus_equal_the_pod_resources_answers(numa: NumaRun) -> None:
    """Every device on /metrics (node and container series, with NUMA node and state) and
    every exclusive CPU holder are what List and GetAllocatableResources answer."""
    samples = numa.fresh_samples()
    reading = numa.reading()
    assert reading.allocatable is not None
    allocatable = {
        (d.resource, d.device_id, numa_label(d.numa)) for d in reading.allocatable.devices
    }
    held: set[tuple[str, str, str, str, str, str]] = set()
    cpus: set[tuple[str, str, str, str]] = set()
    for pod in reading.pods:
        for ctr in pod.containers:
            held |= {
                (pod.namespace, pod.name, ctr.name, d.resource, d.device_id, numa_label(d.numa))
                for d in ctr.devices
            }
            cpus |= {(pod.namespace, pod.name, ctr.name, str(c)) for c in ctr.cpu_ids}
    shown_held = {
        (
            lbl["namespace"],
            lbl["pod"],
            lbl["container"],
            lbl["resource"],
            lbl["device_id"],
            lbl.get("numa_node", ""),
        )
        for lbl in map(dict, select(samples, "podres_container_device_info"))
    }
    assert shown_held == held
    taken = {(r, i) for _, _, _, r, i, _ in held}
    shown_node = {
        (lbl["resource"], lbl["device_id"], lbl.get("numa_node", "")): lbl["state"]
        for lbl in map(dict, select(samples, "podres_node_device_info"))
    }
    assert set(shown_node) == allocatable
    assert {k: v for k, v in shown_node.items() if k[0] == RESOURCE} == {
        k: ("allocated" if (k[0], k[1]) in taken else "free")
        for k in allocatable
        if k[0] == RESOURCE
    }
    shown_cpus = {
        (lbl["namespace"], lbl["pod"], lbl["container"], lbl["cpu"])
        for lbl in map(dict, select(samples, "podres_cpu_assignment_info", pool="exclusive"))
    }
    assert shown_cpus == cpus


def numa_label(nodes: tuple[int, ...] | None) -> str:
    """The ``numa_node`` label of a device on ``nodes`` (empty: no topology)."""
    return ",".join(str(n) for n in sorted(nodes or ()))


def test_exporter_admission_facts_equal_the_kubelets_own(numa: NumaRun) -> None:
    """The facts ``podres fit`` admits with, as the exporter serves them, are the kubelet's:
    the policies of its configuration file, its registered devices per NUMA node (all
    healthy here: what GetAllocatableResources lists), the free whole cores per NUMA node
    of its CPU manager checkpoint, and the distances of the tree it reads."""
    samples = numa.fresh_samples()
    (info,) = map(dict, select(samples, "podres_kubelet_config_info"))
    assert (
        info["topology_manager_policy"],
        info["topology_manager_scope"],
        info["cpu_manager_policy"],
        info["memory_manager_policy"],
    ) == tuple(
        numa.config[key]
        for key in (
            "topologyManagerPolicy",
            "topologyManagerScope",
            "cpuManagerPolicy",
            "memoryManagerPolicy",
        )
    )
    allocatable = numa.reading().allocatable
    assert allocatable is not None
    per_numa: dict[tuple[str, str], int] = {}
    for d in allocatable.devices:
        key = (d.resource, numa_label(d.numa))
        per_numa[key] = per_numa.get(key, 0) + 1
    registered = {
        (lbl["resource"], lbl.get("numa_node", "")): value
        for lbl, value in (
            (dict(k), v) for k, v in select(samples, "podres_node_registered_devices").items()
        )
    }
    assert registered == per_numa
    free = set(parse_cpulist(cpu_manager_state(numa.cluster)["defaultCpuSet"])) - RESERVED_CPUS
    for node in sorted(set(NUMA_OF_CPU.values())):
        cores = {core_of(numa.tree, c) for c in NUMA_OF_CPU if NUMA_OF_CPU[c] == node}
        whole = {
            core
            for core in cores
            if all(c in free for c in NUMA_OF_CPU if core_of(numa.tree, c) == core)
        }
        shown = select(samples, "podres_node_free_cores", numa_node=str(node))
        assert sum(shown.values()) == len(whole), node
        for to in sorted(set(NUMA_OF_CPU.values())):
            distance = select(
                samples, "podres_node_numa_distance", numa_node=str(node), to_numa_node=str(to)
            )
            assert sum(distance.values()) == (10 if node == to else 20), (node, to)


def core_of(tree: Path, cpu: int) -> tuple[str, str]:
    """The (socket, core) of ``cpu`` in the sysfs tree."""
    topology = tree / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
    return (
        (topology / "physical_package_id").read_text().strip(),
        (topology / "core_id").read_text().strip(),
    )
