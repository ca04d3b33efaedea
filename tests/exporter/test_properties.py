"""Properties of the whole read path, on generated pod-resources answers.

Hypothesis generates List and GetAllocatableResources answers (the generated protobuf
messages: any sizes within reason, duplicate pods, containers and devices, odd names,
CPUs outside the online set, devices in no allocatable list, NUMA ids anywhere, memory
blocks of any size). One real gRPC server on a unix socket serves them, its answer
swapped per example; the real KubeletClient reads them and the real NodeReader accounts
and renders them with every collector that needs no telemetry. Whatever the answer:
nothing crashes, the exposition parses (and promtool accepts it), no series is served
twice, no count is negative, and every CPU listed by one container is exclusive to it
while the others are counted as anomalies. For consistent answers (every held CPU and
device allocatable and held once, memory within what is allocatable), allocated + free
is what is allocatable, per NUMA node.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families

from podres_exporter import collectors
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.exporter.textformat import render_families
from podres_exporter.sources.kubelet import KubeletClient
from tests.exporter.kubelet_answers import (
    Kubelet,
    Node,
    Pod,
    answer_of,
    any_node,
    consistent_node,
    serving,
)

# The collectors that render the kubelet's answer alone (no hardware telemetry).
KUBELET_COLLECTORS = tuple(c for c in collectors.ALL if not c.needs)


# ----------------------------------------------------------------------------- the server


@dataclass
class Served:
    kubelet: Kubelet
    socket: str


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """One server for every example of the module, on a short socket path."""
    with serving("pp-") as (kubelet, socket):
        yield Served(kubelet, socket)


# ------------------------------------------------------------------------- generated data


# ------------------------------------------------------------------------------ the wire


# ------------------------------------------------------------------------------ reading


Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]


def exposition(served: Served, node: Node, *, openmetrics: bool = False) -> str:
    """The answer of ``node`` served, read by the real client, accounted and rendered."""
    served.kubelet.set(answer_of(node))
    client = KubeletClient(served.socket, timeout_s=10)
    topology = node.topology()
    reader = NodeReader(client, lambda: topology, enabled=KUBELET_COLLECTORS)
    try:
        seen = reader.observe()
        assert seen.kubelet_error is None, seen.kubelet_error
        view = reader.view(seen, generation=1)
        return render_families(reader.families(view, "0.0.0"), openmetrics).decode()
    finally:
        reader.close()


def samples(text: str) -> Samples:
    """{(name, labels): value}; no series twice (a scrape with one fails in Prometheus)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"served twice: {key}"
            out[key] = s.value
    return out


def by(out: Samples, name: str, *keys: str) -> defaultdict[tuple[str, ...], float]:
    """The values of ``name`` summed by the labels ``keys`` (0 for none)."""
    sums: defaultdict[tuple[str, ...], float] = defaultdict(float)
    for (n, labels), value in out.items():
        if n == name:
            d = dict(labels)
            sums[tuple(d[k] for k in keys)] += value
    return sums


def merged(node: Node) -> Node:
    """``node`` as the client reads it: a pod listed again (same namespace and name) is
    the first copy with the containers of the later ones that the first does not name."""
    at: dict[tuple[str, str], int] = {}
    pods: list[Pod] = []
    for p in node.pods:
        i = at.setdefault((p.namespace, p.name), len(pods))
        if i == len(pods):
            pods.append(p)
            continue
        names = {c.name for c in pods[i].containers}
        extra = tuple(c for c in p.containers if c.name not in names)
        pods[i] = replace(pods[i], containers=pods[i].containers + extra)
    return replace(node, pods=tuple(pods))


def holders_of_cpus(node: Node) -> dict[int, set[tuple[str, str, str]]]:
    """Each listed CPU and the holders listing it, each once (a pod's own CPUs: container
    "")."""
    listed: dict[int, set[tuple[str, str, str]]] = defaultdict(set)
    for p in node.pods:
        for c in p.containers:
            for cpu in c.cpus:
                listed[cpu].add((p.namespace, p.name, c.name))
        in_containers = {cpu for c in p.containers for cpu in c.cpus}
        for cpu in set(p.cpus) - in_containers:
            listed[cpu].add((p.namespace, p.name, ""))
    return listed


# ------------------------------------------------------------------------------ properties


def check_any(out: Samples, node: Node) -> None:
    """What holds for every answer."""
    failed = by(out, "podres_collector_success", "collector")
    assert all(v == 1 for v in failed.values()), f"a collector failed: {dict(failed)}"
    for (name, labels), value in out.items():
        if name.startswith(("podres_node_", "podres_container_", "podres_data_anomalies")):
            assert value >= 0, (name, dict(labels), value)
    anomalies = {k[0]: v for k, v in by(out, "podres_data_anomalies", "kind").items()}
    read = merged(node)
    assert anomalies["duplicate_pod"] == len(node.pods) - len(read.pods)
    listed = holders_of_cpus(read)
    several = {cpu for cpu, hs in listed.items() if len(hs) > 1}
    assert anomalies["cpu_listed_by_several_containers"] == len(several)
    assignments: dict[int, dict[str, str]] = {}
    for (name, labels), _ in out.items():
        if name == "podres_cpu_assignment_info":
            d = dict(labels)
            cpu = int(d["cpu"])
            assert cpu not in assignments, f"CPU {cpu} assigned twice"
            assignments[cpu] = d
    for cpu, hs in listed.items():
        if len(hs) == 1:
            row = assignments[cpu]
            assert row["pool"] == "exclusive"
            assert {(row["namespace"], row["pod"], row["container"])} == hs
        elif cpu in assignments:  # a CPU of the node, or allocatable: shared
            row = assignments[cpu]
            assert row["pool"] != "exclusive" and not row["pod"] and not row["container"]
    exclusive = [cpu for cpu, row in assignments.items() if row["pool"] == "exclusive"]
    assert sorted(exclusive) == sorted(cpu for cpu, hs in listed.items() if len(hs) == 1)


def check_consistent(out: Samples, node: Node) -> None:
    """What holds when every held thing is allocatable and held once."""
    anomalies = by(out, "podres_data_anomalies", "kind")
    assert not any(anomalies.values()), dict(anomalies)
    cpus = by(out, "podres_node_cpus", "numa_node", "pool")
    allocatable_cpus = by(out, "podres_node_allocatable_cpus", "numa_node")
    online = Counter(str(n) for n in node.online.values())
    for numa in {k[0] for k in cpus} | set(online):
        exclusive, free = cpus[(numa, "exclusive")], cpus[(numa, "shared_free")]
        if node.allocatable_cpus:
            assert exclusive + free == allocatable_cpus[(numa,)], numa
        # the sum over pool is the online CPUs
        assert sum(v for (n, _), v in cpus.items() if n == numa) == online[numa], numa
    devices = by(out, "podres_node_devices", "resource", "numa_node", "state")
    allocatable = by(out, "podres_node_allocatable_devices", "resource", "numa_node")
    for resource, numa in {(r, n) for r, n, _ in devices}:
        held, free = devices[(resource, numa, "allocated")], devices[(resource, numa, "free")]
        assert held + free == allocatable[(resource, numa)], (resource, numa)
        assert devices[(resource, numa, "allocated_unhealthy")] == 0
    memory = by(out, "podres_node_memory_bytes", "numa_node", "memory_type", "state")
    allocatable_memory = by(out, "podres_node_allocatable_memory_bytes", "numa_node", "memory_type")
    for numa, mtype in {(n, t) for n, t, _ in memory}:
        held, free = memory[(numa, mtype, "allocated")], memory[(numa, mtype, "free")]
        assert held + free == allocatable_memory[(numa, mtype)], (numa, mtype)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(node=any_node())
def test_any_answer_is_read_accounted_and_rendered(served: Served, node: Node) -> None:
    """Any answer: read without error, a valid exposition with no series twice, no
    negative count, and each listed CPU exclusive to its one holder or an anomaly."""
    text = exposition(served, node)
    check_any(samples(text), node)
    list(parse_openmetrics(exposition(served, node, openmetrics=True)))


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(node=consistent_node())
def test_consistent_answer_adds_up(served: Served, node: Node) -> None:
    """A consistent answer: per NUMA node, allocated + free = allocatable for CPUs,
    devices and memory, exclusive + free + reserved = online CPUs, and no anomaly."""
    out = samples(exposition(served, node))
    check_any(out, node)
    check_consistent(out, node)


@pytest.mark.prometheus
def test_promtool_accepts_generated_expositions(served: Served) -> None:
    """`promtool check metrics` finds no error in the expositions of generated answers."""
    promtool = shutil.which("promtool")
    assert promtool, "install the Debian package prometheus (promtool)"
    texts: list[str] = []

    @settings(max_examples=40, deadline=None, database=None)
    @given(node=st.one_of(any_node(), consistent_node()))
    def collect(node: Node) -> None:
        texts.append(exposition(served, node))

    collect()
    for text in texts:
        proc = subprocess.run(
            [promtool, "check", "metrics"], input=text.encode(), capture_output=True, check=False
        )
        # Lint findings (naming advice) are printed too; only an error fails the check.
        assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode() + text
