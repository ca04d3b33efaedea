"""Each hint provider against hand-worked cases from the upstream providers (v1.28):
cpumanager policy_static.go, devicemanager topology_hints.go, memorymanager
policy_static.go, and the QoS rule of qos.go."""

from __future__ import annotations

from podres_exporter.core.topology import Container, DeviceInfo, QoS, qos
from podres_exporter.core.topology.books import Books
from podres_exporter.core.topology.cpus import cpu_hints, take_by_topology
from podres_exporter.core.topology.devices import device_hints
from podres_exporter.core.topology.memory import memory_hints
from podres_exporter.core.topology.merge import Hint
from tests.core.topology.support import GPU, GiB, node, pod

N01, N0, N1 = 0b11, 0b01, 0b10


def test_cpu_hints_free_everywhere() -> None:
    """2 CPUs on a 2x4 node: each single node preferred, both nodes not."""
    b = Books.of(node())
    assert cpu_hints(b.topo, b.free_cpus, set(), 2, align_by_socket=False) == [
        Hint(N0, True),
        Hint(N1, True),
        Hint(N01, False),
    ]


def test_cpu_hints_min_affinity_counts_all_cpus() -> None:
    """minAffinitySize counts every CPU, free or not: with node 0 half used, 4 CPUs
    still prefer one node, and only node 1 can hold them."""
    b = Books.of(node(used=[0, 1]))
    assert cpu_hints(b.topo, b.free_cpus, set(), 4, align_by_socket=False) == [
        Hint(N1, True),
        Hint(N01, False),
    ]


def test_cpu_hints_wider_than_a_node_prefer_two() -> None:
    """6 CPUs on 2x4: only both nodes, and that is preferred."""
    b = Books.of(node())
    assert cpu_hints(b.topo, b.free_cpus, set(), 6, align_by_socket=False) == [Hint(N01, True)]


def test_cpu_hints_reusable_pin_the_mask() -> None:
    """Reusable (init container) CPUs must lie in the mask."""
    b = Books.of(node(used=[0, 1, 2, 3]))
    hints = cpu_hints(b.topo, b.free_cpus, {0, 1}, 2, align_by_socket=False)
    assert hints == [Hint(N0, True), Hint(N01, False)]


def test_take_by_topology_whole_cores_first() -> None:
    """takeByTopology: whole free cores before lone threads; a whole NUMA node when the
    request is that big."""
    b = Books.of(node(cores=4, threads=2))
    free = set(b.free_cpus) - {0}  # core 0 half taken
    assert take_by_topology(b.topo, free, 2) == [2, 3]
    assert take_by_topology(b.topo, set(b.free_cpus), 8) == list(range(8))
    assert take_by_topology(b.topo, {1, 2, 3}, 1) == [1]
    assert take_by_topology(b.topo, {1}, 2) is None


def test_device_hints_fragmented_gpus() -> None:
    """Two GPUs per node, one taken on each: 2 GPUs only fit across both nodes, and that
    is not preferred (an empty node could hold them on one)."""
    gpus = {"g0": frozenset({0}), "g1": frozenset({0}), "g2": frozenset({1}), "g3": frozenset({1})}
    b = Books.of(node(gpus=gpus, used_gpus=["g0", "g2"]))
    assert device_hints(b, {GPU: 2}) == {GPU: [Hint(N01, False)]}


def test_device_hints_unhealthy_devices_count_for_min_affinity() -> None:
    """allDevices includes unhealthy devices: they set minAffinitySize but are not free."""
    gpus = {"g0": frozenset({0}), "g1": frozenset({0}), "g2": frozenset({1})}
    b = Books.of(node(gpus=gpus, used_gpus=["g1"]))
    assert device_hints(b, {GPU: 2}) == {GPU: [Hint(N01, False)]}


def test_device_hints_without_topology_and_short() -> None:
    """No NUMA on any device: no preference (nil). Too few free: an empty list."""
    b = Books.of(node(gpus={"g0": frozenset(), "g1": frozenset()}))
    assert device_hints(b, {GPU: 1}) == {GPU: None}
    b = Books.of(node(gpus={"g0": frozenset({0})}))
    assert device_hints(b, {GPU: 2}) == {GPU: []}


def test_device_hints_multi_numa_device() -> None:
    """A device on two NUMA nodes counts in every mask that touches one of them."""
    b = Books.of(node(gpus={"g0": frozenset({0, 1})}))
    assert device_hints(b, {GPU: 1}) == {GPU: [Hint(N0, True), Hint(N1, True), Hint(N01, False)]}


def test_memory_hints() -> None:
    """calculateHints: 1.5 GiB on 1 GiB nodes needs both (preferred); 512 MiB fits one."""
    b = Books.of(node(mem_per_numa=GiB))
    assert memory_hints(b, {"memory": 3 * GiB // 2}) == {"memory": [Hint(N01, True)]}
    assert memory_hints(b, {"memory": GiB // 2})["memory"][:2] == [Hint(N0, True), Hint(N1, True)]


def test_memory_hints_respect_groups() -> None:
    """A node already used alone cannot join a multi-NUMA group; a grouped node cannot
    serve a single-NUMA hint. No fitting mask: an empty map (no preference)."""
    b = Books.of(node(mem_per_numa=GiB))
    b.assignments[0] = 1
    assert memory_hints(b, {"memory": 3 * GiB // 2}) == {}
    b = Books.of(node(mem_per_numa=GiB))
    b.assignments.update({0: 1, 1: 1})
    b.cells.update({0: (0, 1), 1: (0, 1)})
    assert memory_hints(b, {"memory": GiB // 2}) == {"memory": [Hint(N01, False)]}


def test_memory_numa_without_type_counts_zero() -> None:
    """A NUMA node without that memory type has zero of it."""
    b = Books.of(node(mem_per_numa=GiB))
    assert memory_hints(b, {"hugepages-1Gi": GiB}) == {}


def test_qos_sums_over_containers() -> None:
    """GetPodQOS compares summed requests and limits: unequal per container but equal in
    sum is Guaranteed; a missing memory limit is Burstable; nothing set is BestEffort."""
    a = Container("a", {"cpu": 1000, "memory": 2}, {"cpu": 2000, "memory": 1})
    b = Container("b", {"cpu": 2000, "memory": 1}, {"cpu": 1000, "memory": 2})
    assert qos(pod(a, b)) == QoS.GUARANTEED
    assert qos(pod(Container("c", {"cpu": 1000}, {"cpu": 1000}))) == QoS.BURSTABLE
    assert qos(pod(Container("c", {GPU: 1}, {GPU: 1}))) == QoS.BEST_EFFORT
    assert qos(pod(Container("c", {}, {"cpu": 1000, "memory": 5}))) == QoS.GUARANTEED
    assert DeviceInfo("x").numa == frozenset()
