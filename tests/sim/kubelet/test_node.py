"""The simulated node's admission allocator: the kubelet's invariants."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podres_sim import (
    ClaimDeviceSpec,
    ClaimSpec,
    ContainerSpec,
    DeviceSpec,
    Node,
    NodeSpec,
    PodSpec,
    Scenario,
    load_builtin,
)

GPU = "example.com/gpu"


def check_invariants(node: Node) -> None:
    """Assert everything a kubelet guarantees about its allocations."""
    spec = node.spec
    allocatable = set(spec.allocatable_cpus)
    held_cpus: list[int] = []
    held_devices: list[tuple[str, str]] = []
    held_memory = 0
    for pod in node.pods:
        if not pod.admitted:
            assert all(c.empty for c in pod.containers), f"rejected pod {pod.name} holds resources"
            assert not (pod.cpu_ids or pod.memory), f"rejected pod {pod.name} holds resources"
        if not pod.active:  # rejected, or finished: its (stale) resources were given back
            continue
        in_containers: set[int] = set()
        for c in pod.containers:
            held_cpus.extend(c.cpu_ids)
            in_containers.update(c.cpu_ids)
            held_devices.extend((d.resource, d.device_id) for d in c.devices)
            held_memory += sum(m.size for m in c.memory)
        # pod-level resources contain the containers' own: only the rest is held besides
        assert not pod.cpu_ids or in_containers <= set(pod.cpu_ids)
        held_cpus.extend(set(pod.cpu_ids) - in_containers)
        if pod.memory:
            held_memory = held_memory - sum(m.size for c in pod.containers for m in c.memory)
            held_memory += sum(m.size for m in pod.memory)
            for d in c.devices:
                assert d.numa == next(
                    x.numa for x in spec.devices if (x.resource, x.id) == (d.resource, d.device_id)
                )
    assert len(held_cpus) == len(set(held_cpus)), "a CPU was given twice"
    assert set(held_cpus) <= allocatable, "an exclusive CPU is not allocatable"
    assert not set(held_cpus) & set(spec.reserved_cpus), "a reserved CPU was handed out"
    assert node.free_cpus() | set(held_cpus) == allocatable
    assert not node.free_cpus() & set(held_cpus)
    assert len(held_devices) == len(set(held_devices)), "a device was given twice"
    for resource in spec.resources:
        free = node.free_devices(resource)
        held = {i for r, i in held_devices if r == resource}
        assert not free & held
        assert all(node.device_healthy(resource, i) for i in free)
    capacity = sum(sum(v) for v in spec.memory.values())
    free_memory = sum(sum(v) for v in node.free_memory().values())
    if spec.memory_policy == "static":
        assert free_memory + held_memory == capacity
    else:
        assert held_memory == 0


def two_numa_node(**kw: object) -> NodeSpec:
    """Two NUMA nodes of 4 CPUs (0-3, 4-7), CPUs 0 and 4 reserved, 2 GPUs per node."""
    devices = [DeviceSpec(GPU, f"gpu-{i}", (i // 2,)) for i in range(4)]
    args: dict[str, object] = {
        "reserved_cpus": (0, 4),
        "devices": devices,
        "memory_policy": "static",
        "memory": {"memory": "8Gi", "hugepages-1Gi": "2Gi"},
    }
    args.update(kw)
    return NodeSpec.uniform(2, 4, **args)  # type: ignore[arg-type]


def guaranteed(name: str, cpu: int | str = 1, gpus: int = 0, memory: str = "1Gi") -> PodSpec:
    """A Guaranteed one-container pod."""
    devices = {GPU: gpus} if gpus else {}
    return PodSpec.of(
        "default", name, ContainerSpec.of("main", cpu=cpu, memory=memory, devices=devices)
    )


def test_demo_node_keeps_every_invariant() -> None:
    """The demo node's admitted pods never share a CPU or device and never get reserved CPUs."""
    node = Node.from_scenario(load_builtin("demo"))
    check_invariants(node)
    assert any(c.cpu_ids for p in node.pods for c in p.containers)


def test_exclusive_cpus_come_from_one_numa_node_when_they_fit() -> None:
    """A container's CPUs, devices and memory come from one NUMA node when one holds them all."""
    node = Node(two_numa_node())
    pod = node.admit(guaranteed("a", cpu=2, gpus=1))
    (c,) = pod.containers
    assert c.cpu_ids == (1, 2)
    assert {d.numa for d in c.devices} == {(0,)}
    assert {m.numa for m in c.memory} == {(0,)}
    check_invariants(node)


def test_devices_pull_the_container_to_their_numa_node() -> None:
    """When node 0's GPUs are gone, a GPU container's CPUs follow the GPUs to node 1."""
    node = Node(two_numa_node())
    node.admit(guaranteed("a", cpu=1, gpus=2))
    pod = node.admit(guaranteed("b", cpu=2, gpus=1))
    (c,) = pod.containers
    assert set(c.cpu_ids) <= {5, 6, 7}
    assert [d.numa for d in c.devices] == [(1,)]
    check_invariants(node)


def test_spill_over_numa_nodes_when_none_fits() -> None:
    """A request larger than any one NUMA node's free CPUs spans nodes, still without sharing."""
    node = Node(two_numa_node())
    pod = node.admit(guaranteed("big", cpu=5))
    (c,) = pod.containers
    assert len(c.cpu_ids) == 5
    assert {cpu // 4 for cpu in c.cpu_ids} == {0, 1}
    check_invariants(node)


def test_shared_pool_containers_get_no_cpu_ids() -> None:
    """Burstable pods and fractional CPUs of Guaranteed pods stay in the shared pool."""
    node = Node(two_numa_node())
    burstable = node.admit(PodSpec.of("default", "b", ContainerSpec.of("main", cpu=2)))
    fractional = node.admit(guaranteed("f", cpu="1500m"))
    assert burstable.qos == "Burstable"
    assert burstable.containers[0].cpu_ids == ()
    assert fractional.qos == "Guaranteed"
    assert fractional.containers[0].cpu_ids == ()
    assert fractional.containers[0].memory, "a Guaranteed pod's memory is still pinned"
    check_invariants(node)


def test_cpu_policy_none_hands_out_no_cpus() -> None:
    """Under CPU policy none nothing is exclusive and nothing is allocatable."""
    node = Node(two_numa_node(cpu_policy="none"))
    pod = node.admit(guaranteed("a", cpu=2, gpus=1))
    assert pod.containers[0].cpu_ids == ()
    assert pod.containers[0].devices
    assert node.spec.allocatable_cpus == ()
    assert node.snapshot().allocatable_cpus == ()


def test_rejected_pod_is_listed_with_empty_resources_and_gives_back_what_it_took() -> None:
    """A pod that cannot be admitted is Failed, keeps its containers, and holds nothing."""
    node = Node(two_numa_node())
    free_before = node.free_cpus(), node.free_devices(GPU), node.free_memory()
    spec = PodSpec.of(
        "default",
        "greedy",
        ContainerSpec.of("first", cpu=2, memory="1Gi", devices={GPU: 1}),
        ContainerSpec.of("second", cpu=1, memory="1Gi", devices={GPU: 9}),
    )
    pod = node.admit(spec)
    assert pod.phase == "Failed"
    assert pod.reason == "UnexpectedAdmissionError"
    assert "Requested: 9, Available: 3" in pod.message
    assert [c.name for c in pod.containers] == ["first", "second"]
    assert all(c.empty for c in pod.containers)
    assert (node.free_cpus(), node.free_devices(GPU), node.free_memory()) == free_before
    assert node.pod("default", "greedy") == pod
    check_invariants(node)


def test_not_enough_cpus_rejects() -> None:
    """Asking more exclusive CPUs than the node has free rejects the pod."""
    node = Node(two_numa_node())
    pod = node.admit(guaranteed("huge", cpu=7))
    assert not pod.admitted
    assert "not enough cpus" in pod.message


def test_remove_frees_everything() -> None:
    """Deleting a pod returns its CPUs, devices and memory to the free pools."""
    node = Node(two_numa_node())
    before = node.free_cpus(), node.free_devices(GPU), node.free_memory()
    node.admit(guaranteed("a", cpu=3, gpus=2))
    assert node.free_cpus() != before[0]
    removed = node.remove("default", "a")
    assert removed is not None
    assert (node.free_cpus(), node.free_devices(GPU), node.free_memory()) == before
    assert node.remove("default", "a") is None


def test_unhealthy_devices_are_not_handed_out_but_stay_with_their_holder() -> None:
    """An unhealthy device leaves the free pool and allocatable; its holder keeps it."""
    node = Node(two_numa_node())
    node.set_device_health(GPU, "gpu-0", False)
    pod = node.admit(guaranteed("a", gpus=1))
    assert [d.device_id for d in pod.containers[0].devices] == ["gpu-1"]
    node.set_device_health(GPU, "gpu-1", False)
    assert node.pod("default", "a") == pod
    healthy = {d.id for d in node.snapshot().healthy_devices}
    assert healthy == {"gpu-2", "gpu-3"}
    node.remove("default", "a")
    assert "gpu-1" not in node.free_devices(GPU)
    node.set_device_health(GPU, "gpu-1", True)
    assert "gpu-1" in node.free_devices(GPU)
    check_invariants(node)
    with pytest.raises(KeyError):
        node.set_device_health(GPU, "nope", True)


def test_device_spanning_numa_nodes_serves_either_node() -> None:
    """A device attached to NUMA nodes 0 and 1 keeps both in its grant."""
    spec = NodeSpec.uniform(2, 2, devices=[DeviceSpec("example.com/nic", "nic-0", (0, 1))])
    node = Node(spec)
    pod = node.admit(PodSpec.of("d", "p", ContainerSpec.of("c", devices={"example.com/nic": 1})))
    assert pod.containers[0].devices[0].numa == (0, 1)


def test_memory_manager_pins_guaranteed_memory_per_numa_node() -> None:
    """Static memory manager: Guaranteed containers get memory and hugepages blocks on one node."""
    node = Node(two_numa_node())
    spec = PodSpec.of(
        "default",
        "m",
        ContainerSpec.of("c", cpu=1, memory="3Gi", hugepages={"hugepages-1Gi": "1Gi"}),
    )
    pod = node.admit(spec)
    blocks = {(m.memory_type, m.size, m.numa) for m in pod.containers[0].memory}
    assert blocks == {("memory", 3 * 2**30, (0,)), ("hugepages-1Gi", 2**30, (0,))}
    burstable = node.admit(PodSpec.of("default", "b", ContainerSpec.of("c", cpu=1)))
    assert burstable.containers[0].memory == ()
    check_invariants(node)


def test_memory_larger_than_a_numa_node_spans_a_group() -> None:
    """Pinned memory that no single NUMA node holds is given as one block over a node group."""
    node = Node(two_numa_node())
    pod = node.admit(guaranteed("m", cpu=1, memory="12Gi"))
    assert [(m.size, m.numa) for m in pod.containers[0].memory] == [(12 * 2**30, (0, 1))]
    check_invariants(node)
    too_big = node.admit(guaranteed("n", cpu=1, memory="6Gi"))
    assert not too_big.admitted
    check_invariants(node)


def test_no_memory_pinning_without_the_static_memory_manager() -> None:
    """Memory policy none: no container gets memory blocks, and nothing is allocatable."""
    node = Node(two_numa_node(memory_policy="none"))
    pod = node.admit(guaranteed("a", cpu=1, memory="100Gi"))
    assert pod.admitted
    assert pod.containers[0].memory == ()
    assert node.snapshot().allocatable_memory == ()


def test_sidecars_come_first_and_init_containers_are_not_listed() -> None:
    """Restartable sidecars lead the container list; ordinary init containers never appear."""
    spec = PodSpec.of(
        "default",
        "p",
        ContainerSpec.of("init", kind="init"),
        ContainerSpec.of("app-1"),
        ContainerSpec.of("sidecar", kind="sidecar"),
        ContainerSpec.of("app-2"),
    )
    pod = Node(two_numa_node()).admit(spec)
    assert [c.name for c in pod.containers] == ["sidecar", "app-1", "app-2"]


def test_dra_claims_are_carried_through() -> None:
    """DRA claims reach the container with the pod's name and namespace filled in."""
    dev = ClaimDeviceSpec("gpu.example.com", "pool-a", "gpu-0", ("k8s.gpu.example.com/gpu=gpu-0",))
    spec = PodSpec.of(
        "ns",
        "p",
        ContainerSpec.of(
            "c", claims=[ClaimSpec("{pod}-claim", (dev,)), ClaimSpec("other", (), "x")]
        ),
    )
    pod = Node(two_numa_node()).admit(spec)
    claims = pod.containers[0].claims
    assert [(c.name, c.namespace) for c in claims] == [("p-claim", "ns"), ("other", "x")]
    assert claims[0].devices == (dev,)


def test_pod_names_follow_their_controller() -> None:
    """Deployment, generated, StatefulSet and static pods are named like Kubernetes names them."""
    node = Node(two_numa_node(name="node-x"))
    dep = node.admit(PodSpec.of("d", "web", replicas=2, naming="deployment"))
    gen = node.admit(PodSpec.of("d", "agent", naming="generated"))
    sts = [node.admit(PodSpec.of("d", "db", replicas=2, naming="statefulset")) for _ in range(2)]
    static = node.admit(PodSpec.of("d", "proxy", naming="static"))
    assert dep.name.startswith("web-") and len(dep.name.split("-")) == 3
    assert len(dep.name.split("-")[1]) == 10 and len(dep.name.split("-")[2]) == 5
    assert len(gen.name) == len("agent-") + 5
    assert [p.name for p in sts] == ["db-0", "db-1"]
    assert static.name == "proxy-node-x"
    with pytest.raises(ValueError, match="already exists"):
        node.admit(PodSpec.of("d", "proxy", naming="static"))


def test_same_seed_same_node() -> None:
    """Two nodes built from one scenario are identical: names and allocations are seeded."""
    scenario = load_builtin("demo")
    a, b = Node.from_scenario(scenario), Node.from_scenario(scenario)
    assert a.pods == b.pods
    ra, rb = random.Random(5), random.Random(5)
    for _ in range(20):
        assert a.step(ra) == b.step(rb)


def test_churn_replaces_a_pod_and_keeps_invariants() -> None:
    """Churn deletes a churnable pod and admits a new replica; the pod count stays."""
    node = Node.from_scenario(load_builtin("demo"))
    count = len(node.pods)
    rng = random.Random(1)
    for _ in range(300):
        event = node.step(rng)
        assert event is not None
        assert event.removed.spec.churn
        assert event.added.spec is event.removed.spec
        assert event.added.name != event.removed.name
        assert node.pod(event.removed.namespace, event.removed.name) is None
        assert len(node.pods) == count
    check_invariants(node)


def test_churn_brings_statefulset_pods_back_under_their_name() -> None:
    """A churned StatefulSet pod comes back with the same name."""
    spec = PodSpec.of(
        "d", "db", ContainerSpec.of("c"), replicas=2, naming="statefulset", churn=True
    )
    node = Node.from_scenario(Scenario(node=two_numa_node(), pods=(spec,)))
    event = node.step(random.Random(0))
    assert event is not None
    assert event.added.name == event.removed.name


def test_nothing_to_churn() -> None:
    """step returns None when no pod is churnable."""
    node = Node.from_scenario(load_builtin("minimal"))
    assert node.step(random.Random(0)) is None


_request = st.tuples(
    st.sampled_from(["1", "2", "3", "500m", "0"]),
    st.integers(0, 3),
    st.sampled_from(["Guaranteed", "Burstable"]),
    st.sampled_from(["1Gi", "3Gi", "5Gi"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(st.one_of(_request, st.integers(0, 20)), min_size=1, max_size=30),
    numa_nodes=st.integers(1, 3),
    cpus=st.integers(2, 6),
)
def test_random_admissions_and_removals_keep_invariants(
    ops: list[tuple[str, int, str, str] | int], numa_nodes: int, cpus: int
) -> None:
    """Any sequence of admissions and deletions keeps the invariants and frees everything."""
    devices = [DeviceSpec(GPU, f"g{i}", (i % numa_nodes,), healthy=i != 1) for i in range(5)]
    devices.append(DeviceSpec(GPU, "floating", None))
    spec = NodeSpec.uniform(
        numa_nodes,
        cpus,
        reserved_cpus=(0,),
        devices=devices,
        memory_policy="static",
        memory={"memory": "6Gi"},
    )
    node = Node(spec)
    initial = node.free_cpus(), node.free_devices(GPU), node.free_memory()
    for i, op in enumerate(ops):
        if isinstance(op, int):
            pods = node.pods
            if pods:
                victim = pods[op % len(pods)]
                node.remove(victim.namespace, victim.name)
        else:
            cpu, gpus, qos, memory = op
            container = ContainerSpec.of(
                "c", cpu=cpu, memory=memory, devices={GPU: gpus} if gpus else {}
            )
            node.admit(PodSpec.of("ns", f"p{i}", container, qos=qos))  # type: ignore[arg-type]
        check_invariants(node)
    for pod in node.pods:
        node.remove(pod.namespace, pod.name)
    assert (node.free_cpus(), node.free_devices(GPU), node.free_memory()) == initial


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_demo_churn_keeps_invariants_for_any_seed(seed: int) -> None:
    """Whatever the churn RNG picks, the demo node's invariants hold after each step."""
    node = Node.from_scenario(load_builtin("demo"))
    rng = random.Random(seed)
    for _ in range(30):
        node.step(rng)
    check_invariants(node)
    names = Counter((p.namespace, p.name) for p in node.pods)
    assert max(names.values()) == 1


def test_pod_level_and_finished_pods_keep_every_invariant() -> None:
    """Pod-level budgets and finished pods (resources given back) keep the invariants."""
    node = Node(two_numa_node())
    scoped = PodSpec.of(
        "ns",
        "scoped",
        ContainerSpec.of("excl", cpu=1, memory="1Gi"),
        ContainerSpec.of("pool"),
        cpu=3,
        memory="2Gi",
    )
    pod = node.admit(scoped)
    assert len(pod.cpu_ids) == 3 and set(pod.containers[0].cpu_ids) < set(pod.cpu_ids)
    assert sum(m.size for m in pod.memory) == 2 * 2**30
    check_invariants(node)
    job = node.admit(PodSpec.of("ns", "job", ContainerSpec.of("c", cpu=1, memory="1Gi")))
    node.finish("ns", "job")
    check_invariants(node)
    again = node.admit(PodSpec.of("ns", "next", ContainerSpec.of("c", cpu=1, memory="1Gi")))
    assert again.containers[0].cpu_ids == job.containers[0].cpu_ids  # handed on
    check_invariants(node)
