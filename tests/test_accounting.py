"""The pure accounting: CPU pools, devices and memory per NUMA node."""

from __future__ import annotations

from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from podres_exporter.core.accounting import (
    LIVENESS_ANOMALY,
    Holder,
    PodCount,
    PodMemory,
    account,
    contested,
    pod_state,
)
from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    ClaimDevice,
    ContainerAlloc,
    DeviceRef,
    DynamicResource,
    KubeletReading,
    MemoryBlock,
    NodeTopology,
    PodAlloc,
    PodLiveness,
    Support,
)

GPU = "nvidia.com/gpu"
GiB = 2**30


def topo(nodes: int = 2, per_node: int = 8, offline: frozenset[int] = frozenset()) -> NodeTopology:
    mapping = {c: c // per_node for c in range(nodes * per_node)}
    online = frozenset(mapping) - offline
    return NodeTopology(online_cpus=online, cpu_to_numa=MappingProxyType(mapping))


def reading(
    pods: tuple[PodAlloc, ...] = (),
    allocatable: Allocatable | None = None,
    api: ApiVersion = ApiVersion.V1,
) -> KubeletReading:
    support = Support.SERVED if allocatable is not None else Support.DISABLED
    return KubeletReading(api, pods, allocatable, support, taken_at=0.0)


def pod(name: str, *containers: ContainerAlloc, ns: str = "default") -> PodAlloc:
    return PodAlloc(namespace=ns, name=name, containers=containers)


def test_static_policy_pools_per_numa_node() -> None:
    """Reserved = online - allocatable; shared_free = allocatable - exclusive, per node."""
    alloc = Allocatable(cpu_ids=frozenset(range(16)) - {0, 8})
    r = reading(
        (
            pod("a", ContainerAlloc("main", cpu_ids=frozenset({1, 2, 3}))),
            pod("b", ContainerAlloc("main", cpu_ids=frozenset({9}))),
            pod("shared", ContainerAlloc("main")),
        ),
        alloc,
    )
    acc = account(r, topo())
    assert acc.cpu_basis == "allocatable"
    assert acc.node_cpus[("0", "allocatable")] == 7
    assert acc.node_cpus[("0", "exclusive")] == 3
    assert acc.node_cpus[("0", "shared_free")] == 4
    assert acc.node_cpus[("0", "reserved")] == 1
    assert acc.node_cpus[("1", "exclusive")] == 1
    assert acc.node_cpus[("1", "shared_free")] == 6
    held = {(h.holder.pod, h.numa): h.value for h in acc.container_cpus}
    assert held == {("a", "0"): 3, ("b", "1"): 1}
    by_cpu = {a.cpu: a for a in acc.cpu_assignments}
    assert by_cpu[0].pool == "reserved" and by_cpu[0].holder is None
    assert by_cpu[2].pool == "exclusive"
    assert by_cpu[2].holder == Holder("default", "a", "main")
    assert by_cpu[4].pool == "shared_free"


def test_policy_none_uses_online_cpus_as_the_shared_pool() -> None:
    """An empty allocatable CPU list (policy none) makes the online CPUs the pool, none reserved."""
    acc = account(reading((pod("a", ContainerAlloc("c")),), Allocatable()), topo())
    assert acc.cpu_basis == "online"
    assert acc.node_cpus[("0", "shared_free")] == 8
    assert acc.node_cpus[("1", "allocatable")] == 8
    assert acc.node_cpus[("0", "reserved")] == 0


def test_v1alpha1_reports_no_cpu_pools() -> None:
    """A v1alpha1 kubelet carries no CPU data: no pool rows rather than false zeros."""
    acc = account(reading(api=ApiVersion.V1ALPHA1), topo())
    assert acc.cpu_basis == "unknown"
    assert not acc.node_cpus
    assert not acc.cpu_assignments


def test_cpu_listed_by_two_containers_is_shared_and_flagged() -> None:
    """Old kubelets list the shared cpuset per shared container: not exclusive, an anomaly."""
    shared = frozenset({4, 5, 6, 7})
    r = reading(
        (
            pod("a", ContainerAlloc("c", cpu_ids=shared)),
            pod("b", ContainerAlloc("c", cpu_ids=shared)),
        ),
        Allocatable(cpu_ids=frozenset(range(16))),
    )
    acc = account(r, topo())
    assert acc.node_cpus[("0", "exclusive")] == 0
    assert acc.anomalies["cpu_listed_by_several_containers"] == 4
    assert not acc.container_cpus


def test_cpu_outside_online_set_is_flagged_and_kept() -> None:
    """An exclusive CPU the node does not know is kept, labelled numa 'none' and counted."""
    r = reading(
        (pod("a", ContainerAlloc("c", cpu_ids=frozenset({1, 99}))),),
        Allocatable(frozenset(range(16))),
    )
    acc = account(r, topo())
    assert acc.anomalies["cpu_not_online"] == 1
    assert {(h.numa, h.value) for h in acc.container_cpus} == {("0", 1), ("none", 1)}


def test_devices_allocated_unallocated_and_unhealthy_in_use() -> None:
    """Held-but-not-allocatable devices count as allocated_unhealthy; free ones as unallocated."""
    alloc = Allocatable(
        cpu_ids=frozenset(range(16)),
        devices=(
            DeviceRef(GPU, "g0", (0,)),
            DeviceRef(GPU, "g1", (0,)),
            DeviceRef(GPU, "g2", (1,)),
        ),
    )
    r = reading(
        (
            pod("a", ContainerAlloc("c", devices=(DeviceRef(GPU, "g0", (0,)),))),
            pod("b", ContainerAlloc("c", devices=(DeviceRef(GPU, "g3", (1,)),))),
        ),
        alloc,
    )
    acc = account(r, topo())
    nd = acc.node_devices
    assert nd[(GPU, "0", "allocatable")] == 2
    assert nd[(GPU, "0", "allocated")] == 1
    assert nd[(GPU, "0", "unallocated")] == 1
    assert nd[(GPU, "0", "allocated_unhealthy")] == 0
    assert nd[(GPU, "1", "allocated")] == 1
    assert nd[(GPU, "1", "allocated_unhealthy")] == 1
    assert nd[(GPU, "1", "unallocated")] == 1
    assert [(d.holder.pod, d.device_id) for d in acc.container_devices] == [
        ("a", "g0"),
        ("b", "g3"),
    ]


def test_numa_zero_is_not_no_topology() -> None:
    """A device on NUMA node 0 and one without topology land under different labels."""
    alloc = Allocatable(devices=(DeviceRef("x/y", "d0", (0,)), DeviceRef("x/y", "d1", None)))
    acc = account(reading((), alloc), topo())
    assert acc.node_devices[("x/y", "0", "allocatable")] == 1
    assert acc.node_devices[("x/y", "none", "allocatable")] == 1


def test_device_on_two_numa_nodes_is_counted_once() -> None:
    """A device spanning nodes 0 and 1 is one device under numa_node '0,1'."""
    alloc = Allocatable(devices=(DeviceRef("x/y", "d0", (0, 1)),))
    acc = account(reading((), alloc), topo())
    assert acc.node_devices[("x/y", "0,1", "allocatable")] == 1
    assert sum(v for (r, _, s), v in acc.node_devices.items() if s == "allocatable") == 1


def test_device_held_by_two_containers_is_counted_once_and_flagged() -> None:
    """A duplicate device id across containers counts once and is reported as an anomaly."""
    d = DeviceRef(GPU, "g0", (0,))
    r = reading(
        (pod("a", ContainerAlloc("c", devices=(d,))), pod("b", ContainerAlloc("c", devices=(d,)))),
        Allocatable(devices=(d,)),
    )
    acc = account(r, topo())
    assert acc.node_devices[(GPU, "0", "allocated")] == 1
    assert acc.anomalies["device_held_by_several_containers"] == 1
    assert len(acc.container_devices) == 2


def test_a_pod_listed_twice_holds_its_cpus_and_devices_once() -> None:
    """The same pod listed twice is one holder: its CPU is exclusive, its device one row,
    and neither is an anomaly (two rows of one holder would be one series twice)."""
    d = DeviceRef(GPU, "g0", (0,))
    twice = pod("a", ContainerAlloc("c", cpu_ids=frozenset({3}), devices=(d,)))
    acc = account(reading((twice, twice), Allocatable(cpu_ids=frozenset(range(16)))), topo())
    assert [(h.holder.pod, h.value) for h in acc.container_cpus] == [("a", 1)]
    assert [(r.holder.pod, r.device_id) for r in acc.container_devices] == [("a", "g0")]
    assert acc.anomalies["cpu_listed_by_several_containers"] == 0
    assert acc.anomalies["device_held_by_several_containers"] == 0
    assert acc.node_cpus[("0", "exclusive")] == 1


def test_without_allocatable_only_allocated_devices_are_reported() -> None:
    """No GetAllocatableResources: unknown states are absent, not zero."""
    r = reading((pod("a", ContainerAlloc("c", devices=(DeviceRef(GPU, "g0", None),))),), None)
    acc = account(r, topo())
    assert acc.node_devices == {(GPU, "none", "allocated"): 1}


def test_memory_free_per_numa_node_and_type() -> None:
    """Free = allocatable - pinned, per node and type; blocks over two nodes split evenly."""
    alloc = Allocatable(
        memory=(
            MemoryBlock("memory", 64 * GiB, (0,)),
            MemoryBlock("memory", 64 * GiB, (1,)),
            MemoryBlock("hugepages-1Gi", 8 * GiB, (0,)),
        )
    )
    r = reading(
        (
            pod(
                "a",
                ContainerAlloc(
                    "c",
                    memory=(
                        MemoryBlock("memory", 4 * GiB, (0,)),
                        MemoryBlock("hugepages-1Gi", 2 * GiB, (0,)),
                    ),
                ),
            ),
            pod("b", ContainerAlloc("c", memory=(MemoryBlock("memory", 10 * GiB, (0, 1)),))),
        ),
        alloc,
    )
    acc = account(r, topo())
    nm = acc.node_memory
    assert nm[("0", "memory", "free")] == 64 * GiB - 4 * GiB - 5 * GiB
    assert nm[("1", "memory", "free")] == 64 * GiB - 5 * GiB
    assert nm[("0", "hugepages-1Gi", "free")] == 6 * GiB
    assert nm[("0,1", "memory", "allocated")] == 10 * GiB
    assert nm[("1", "memory", "allocated")] == 0
    assert acc.anomalies["memory_overcommitted"] == 0


def test_dynamic_resources_become_claim_rows() -> None:
    """Every device of every DRA claim is one row with its holder."""
    claim = DynamicResource("ml", "gpu-claim", (ClaimDevice("gpu.example.com", "node-a", "gpu-0"),))
    acc = account(
        reading((pod("a", ContainerAlloc("c", dynamic_resources=(claim,)), ns="ml"),)), topo()
    )
    assert [(c.holder.pod, c.claim_name, c.driver, c.device) for c in acc.claims] == [
        ("a", "gpu-claim", "gpu.example.com", "gpu-0")
    ]


def test_empty_names_are_kept_and_counted() -> None:
    """Pods or containers with empty names still count and raise the empty_name anomaly."""
    acc = account(reading((PodAlloc("", "", (ContainerAlloc(""),)),)), topo())
    assert acc.pods == 1
    assert acc.anomalies["empty_name"] == 3


def test_pod_level_cpus_are_held_by_the_pod() -> None:
    """Pod-level exclusive CPUs are held with an empty container name."""
    p = PodAlloc("ns", "p", (ContainerAlloc("c"),), cpu_ids=frozenset({3}))
    acc = account(reading((p,), Allocatable(frozenset(range(16)))), topo())
    assert [(h.holder.container, h.value) for h in acc.container_cpus] == [("", 1)]


# ------------------------------------------------------------------ pod-level resources


def _pod_scoped() -> PodAlloc:
    """A pod-scoped pod: pod-level CPUs 2-5 (node 0) and 8 (node 1); ``excl`` lists 2-3,
    ``shared`` runs in the pod's own pool and lists nothing."""
    return PodAlloc(
        "ns",
        "p",
        (ContainerAlloc("excl", cpu_ids=frozenset({2, 3})), ContainerAlloc("shared")),
        cpu_ids=frozenset({2, 3, 4, 5, 8}),
    )


def test_pod_level_cpus_listed_by_a_container_are_the_containers_once() -> None:
    """CPUs at both levels are the container's, with no anomaly; the rest are the pod's own."""
    acc = account(reading((_pod_scoped(),), Allocatable(frozenset(range(16)))), topo())
    held = {(h.holder.container, h.numa): h.value for h in acc.container_cpus}
    assert held == {("excl", "0"): 2, ("", "0"): 2, ("", "1"): 1}
    assert acc.anomalies["cpu_listed_by_several_containers"] == 0
    assert acc.node_cpus[("0", "exclusive")] == 4
    assert acc.node_cpus[("1", "exclusive")] == 1
    assert acc.node_cpus[("0", "shared_free")] == 4  # 0, 1, 6, 7: every pod-level CPU left out
    assert acc.node_cpus[("1", "shared_free")] == 7
    owners = {a.cpu: a.holder for a in acc.cpu_assignments if a.pool == "exclusive"}
    assert owners[2] == Holder("ns", "p", "excl")
    assert owners[4] == Holder("ns", "p", "")


def test_pod_shared_pool_cpus_per_numa_node() -> None:
    """The pod's private shared pool: pod-level CPUs no container lists, per NUMA node."""
    acc = account(reading((_pod_scoped(),), Allocatable(frozenset(range(16)))), topo())
    assert acc.pod_shared_cpus == (PodCount("ns", "p", "0", 2), PodCount("ns", "p", "1", 1))


def test_a_pod_whose_containers_take_all_its_cpus_has_an_empty_pool() -> None:
    """Every pod-level CPU claimed by containers: a zero row, and no pod holder."""
    p = PodAlloc("ns", "p", (ContainerAlloc("c", cpu_ids=frozenset({1, 2})),), frozenset({1, 2}))
    acc = account(reading((p,), Allocatable(frozenset(range(16)))), topo())
    assert acc.pod_shared_cpus == (PodCount("ns", "p", "0", 0),)
    assert [h.holder.container for h in acc.container_cpus] == ["c"]


def test_pod_level_cpu_of_another_pod_is_still_an_anomaly() -> None:
    """A pod-level CPU another pod lists is listed by two holders: shared, an anomaly."""
    other = pod("q", ContainerAlloc("c", cpu_ids=frozenset({4})))
    acc = account(reading((_pod_scoped(), other), Allocatable(frozenset(range(16)))), topo())
    assert acc.anomalies["cpu_listed_by_several_containers"] == 1
    assert next(a for a in acc.cpu_assignments if a.cpu == 4).pool == "shared_free"


def test_no_pod_level_fields_no_pod_rows() -> None:
    """A kubelet without pod-level fields: no pool rows, accounting as before."""
    p = pod(
        "a", ContainerAlloc("c", cpu_ids=frozenset({1}), memory=(MemoryBlock("memory", GiB, (0,)),))
    )
    acc = account(reading((p,), Allocatable(frozenset(range(16)))), topo())
    assert acc.pod_shared_cpus == ()
    assert acc.pod_shared_memory == ()
    assert LIVENESS_ANOMALY not in acc.anomalies


def test_pod_level_memory_counts_once_and_the_rest_is_the_pods() -> None:
    """Pod-level memory contains the containers' blocks: allocated once, the rest the pod's."""
    p = PodAlloc(
        "ns",
        "p",
        (ContainerAlloc("excl", memory=(MemoryBlock("memory", 2 * GiB, (0,)),)),),
        memory=(MemoryBlock("memory", 3 * GiB, (0,)), MemoryBlock("hugepages-1Gi", GiB, (1,))),
    )
    alloc = Allocatable(
        frozenset(range(16)),
        memory=(MemoryBlock("memory", 8 * GiB, (0,)), MemoryBlock("hugepages-1Gi", 4 * GiB, (1,))),
    )
    acc = account(reading((p,), alloc), topo())
    assert acc.node_memory[("0", "memory", "allocated")] == 3 * GiB
    assert acc.node_memory[("0", "memory", "free")] == 5 * GiB
    assert acc.node_memory[("1", "hugepages-1Gi", "allocated")] == GiB
    held = {(m.holder.container, m.memory_type): m.size_bytes for m in acc.container_memory}
    assert held == {("excl", "memory"): 2 * GiB, ("", "memory"): GiB, ("", "hugepages-1Gi"): GiB}
    assert acc.pod_shared_memory == (
        PodMemory("ns", "p", "hugepages-1Gi", "1", GiB),
        PodMemory("ns", "p", "memory", "0", GiB),
    )


# ------------------------------------------------------------------ finished pods


def _live(running: dict[str, str], finished: dict[str, str]) -> PodLiveness:
    """Liveness facts: pods (by name, in ``default``) with their UIDs, running or not."""
    uids = {("default", n): frozenset({u}) for n, u in {**running, **finished}.items()}
    return PodLiveness(pod_uids=uids, live_uids=frozenset(running.values()))


def test_pod_state_rule() -> None:
    """Running: a UID with a cgroup; finished: UIDs none with a cgroup; else undecided."""
    live = _live({"a": "u1"}, {"b": "u2"})
    assert pod_state(live, "default", "a") == "running"
    assert pod_state(live, "default", "b") == "finished"
    assert pod_state(live, "default", "c") == "undecided"  # no log directory
    assert pod_state(PodLiveness(None, frozenset({"u1"})), "default", "a") == "undecided"
    assert pod_state(PodLiveness(live.pod_uids, None), "default", "a") == "undecided"


def _contested() -> KubeletReading:
    """``old`` finished but is still listed with gpu-0 and CPU 3, now ``new``'s."""
    d = DeviceRef(GPU, "gpu-0", (0,))
    old = pod("old", ContainerAlloc("c", cpu_ids=frozenset({3}), devices=(d,)))
    new = pod("new", ContainerAlloc("c", cpu_ids=frozenset({3}), devices=(d,)))
    return reading((old, new), Allocatable(frozenset(range(16)), devices=(d,)))


def test_a_finished_holder_of_a_contested_device_is_not_counted() -> None:
    """The running pod holds the device and the CPU; no anomaly of several holders."""
    acc = account(_contested(), topo(), _live({"new": "u2"}, {"old": "u1"}))
    assert [(r.holder.pod, r.device_id) for r in acc.container_devices] == [("new", "gpu-0")]
    assert acc.anomalies["device_held_by_several_containers"] == 0
    assert acc.anomalies["cpu_listed_by_several_containers"] == 0
    assert [h.holder.pod for h in acc.container_cpus] == ["new"]
    assert acc.anomalies[LIVENESS_ANOMALY] == 0


def test_undecided_holders_keep_todays_accounting_and_count_an_anomaly() -> None:
    """No evidence for one pod: both holders stay, and the device and CPU count as undecided."""
    acc = account(_contested(), topo(), _live({"new": "u2"}, {}))
    assert len(acc.container_devices) == 2
    assert acc.anomalies["device_held_by_several_containers"] == 1
    assert acc.anomalies["cpu_listed_by_several_containers"] == 1
    assert acc.anomalies[LIVENESS_ANOMALY] == 2


def test_without_liveness_facts_accounting_is_as_before() -> None:
    """None: both holders counted, the anomalies as before, no liveness anomaly reported."""
    acc = account(_contested(), topo())
    assert len(acc.container_devices) == 2
    assert acc.anomalies["device_held_by_several_containers"] == 1
    assert LIVENESS_ANOMALY not in acc.anomalies


def test_finished_pod_alone_keeps_its_device() -> None:
    """Liveness settles only contested items: a finished pod alone still shows its device."""
    d = DeviceRef(GPU, "gpu-0", (0,))
    r = reading((pod("old", ContainerAlloc("c", devices=(d,))),), Allocatable(devices=(d,)))
    acc = account(r, topo(), _live({}, {"old": "u1"}))
    assert [r.holder.pod for r in acc.container_devices] == ["old"]


# ------------------------------------------------------------------ DRA


def test_dra_devices_per_driver_and_pool() -> None:
    """Distinct devices per pool; same share id: one share; several shares: shared."""

    def claim(name: str, device: str, share: str | None) -> DynamicResource:
        return DynamicResource("ns", name, (ClaimDevice("drv", "pool-a", device, share_id=share),))

    r = reading(
        (
            pod("a", ContainerAlloc("c", dynamic_resources=(claim("c1", "d0", "s1"),))),
            pod("b", ContainerAlloc("c", dynamic_resources=(claim("c2", "d0", "s1"),))),
            pod("c", ContainerAlloc("c", dynamic_resources=(claim("c3", "d1", "s1"),))),
            pod("d", ContainerAlloc("c", dynamic_resources=(claim("c4", "d1", "s2"),))),
            pod("e", ContainerAlloc("c", dynamic_resources=(claim("c5", "d2", None),))),
        )
    )
    acc = account(r, topo())
    assert dict(acc.dra_devices) == {
        ("drv", "pool-a", "allocated"): 3,
        ("drv", "pool-a", "shared"): 1,
    }


# ------------------------------------------------------------------ properties

cpus16 = st.frozensets(st.integers(0, 15), max_size=16)


@st.composite
def node_readings(draw: st.DrawFn) -> KubeletReading:
    allocatable = draw(cpus16)
    free = sorted(allocatable)
    pods = []
    for i in range(draw(st.integers(0, 6))):
        take = draw(st.integers(0, len(free)))
        mine, free = frozenset(free[:take]), free[take:]
        pods.append(pod(f"p{i}", ContainerAlloc("c", cpu_ids=mine)))
    return reading(tuple(pods), Allocatable(cpu_ids=allocatable))


@settings(max_examples=200, deadline=None)
@given(node_readings())
def test_every_online_cpu_is_in_exactly_one_pool(r: KubeletReading) -> None:
    """exclusive + shared_free + reserved = online, and shared_free = allocatable - exclusive."""
    t = topo()
    acc = account(r, t)
    for node in ("0", "1"):
        c = acc.node_cpus
        assert c[(node, "exclusive")] + c[(node, "shared_free")] + c[(node, "reserved")] == 8
        assert c[(node, "shared_free")] == c[(node, "allocatable")] - c[(node, "exclusive")]
    pools = [a.pool for a in acc.cpu_assignments]
    assert len(pools) == len(t.online_cpus)
    assert sum(h.value for h in acc.container_cpus) == pools.count("exclusive")


@st.composite
def device_readings(draw: st.DrawFn) -> KubeletReading:
    ids = [f"d{i}" for i in range(8)]
    allocatable = draw(st.sets(st.sampled_from(ids)))
    held = draw(st.lists(st.sampled_from(ids), max_size=10))
    numa = {d: draw(st.sampled_from([None, (0,), (1,), (0, 1)])) for d in ids}
    pods = tuple(
        pod(f"p{i}", ContainerAlloc("c", devices=(DeviceRef(GPU, d, numa[d]),)))
        for i, d in enumerate(held)
    )
    alloc = Allocatable(devices=tuple(DeviceRef(GPU, d, numa[d]) for d in sorted(allocatable)))
    return reading(pods, alloc)


@settings(max_examples=200, deadline=None)
@given(device_readings())
def test_device_states_balance(r: KubeletReading) -> None:
    """allocatable = (allocated - allocated_unhealthy) + unallocated, summed over NUMA labels."""
    acc = account(r, topo())
    total = {s: 0 for s in ("allocatable", "allocated", "unallocated", "allocated_unhealthy")}
    for (_, _, state), n in acc.node_devices.items():
        total[state] += n
    assert (
        total["allocatable"]
        == total["allocated"] - total["allocated_unhealthy"] + total["unallocated"]
    )
    held_ids = {d.device_id for p in r.pods for c in p.containers for d in c.devices}
    assert total["allocated"] == len(held_ids)


def test_device_states_per_id() -> None:
    """Each device id gets one state: free, allocated, or allocated_unhealthy."""
    alloc = Allocatable(devices=(DeviceRef(GPU, "g0", (0,)), DeviceRef(GPU, "g1", (0,))))
    r = reading(
        (
            pod("a", ContainerAlloc("c", devices=(DeviceRef(GPU, "g0", (0,)),))),
            pod("b", ContainerAlloc("c", devices=(DeviceRef(GPU, "g9", (1,)),))),
        ),
        alloc,
    )
    states = {(s.device_id, s.numa, s.state) for s in account(r, topo()).device_states}
    assert states == {
        ("g0", "0", "allocated"),
        ("g1", "0", "free"),
        ("g9", "1", "allocated_unhealthy"),
    }


@st.composite
def pod_scoped_readings(draw: st.DrawFn) -> KubeletReading:
    """Pods whose pod-level sets hold their containers' CPUs and some of their own."""
    free = sorted(draw(cpus16))
    allocatable = frozenset(free)
    pods = []
    for i in range(draw(st.integers(0, 4))):
        take = draw(st.integers(0, len(free)))
        budget, free = free[:take], free[take:]
        split = draw(st.integers(0, len(budget)))
        container = ContainerAlloc("c", cpu_ids=frozenset(budget[:split]))
        pods.append(
            PodAlloc("default", f"p{i}", (container, ContainerAlloc("s")), frozenset(budget))
        )
    return reading(tuple(pods), Allocatable(cpu_ids=allocatable))


@settings(max_examples=200, deadline=None)
@given(pod_scoped_readings())
def test_pod_level_cpus_count_once_and_leave_the_shared_pool(r: KubeletReading) -> None:
    """Each pod-level CPU is exclusive once (container or pod), never shared_free; no anomaly."""
    acc = account(r, topo())
    budget = frozenset().union(*(p.cpu_ids for p in r.pods))
    exclusive = {a.cpu for a in acc.cpu_assignments if a.pool == "exclusive"}
    assert exclusive == budget
    assert acc.anomalies["cpu_listed_by_several_containers"] == 0
    assert sum(h.value for h in acc.container_cpus) == len(budget)
    pool = sum(c.value for c in acc.pod_shared_cpus)
    assert pool == sum(len(p.cpu_ids - p.containers[0].cpu_ids) for p in r.pods)


def test_contested_is_a_device_or_cpu_listed_by_several_pods() -> None:
    """Liveness is asked only when several pods list one device or CPU; one pod listing
    a CPU at its own level and in a container is not contested."""
    gpu0 = DeviceRef(GPU, "GPU-0", (0,))
    a = pod("a", ContainerAlloc("c", cpu_ids=frozenset({1}), devices=(gpu0,)))
    b = pod("b", ContainerAlloc("c", cpu_ids=frozenset({2})))
    assert not contested(reading((a, b)))
    own = PodAlloc(
        "default", "own", (ContainerAlloc("c", cpu_ids=frozenset({3})),), cpu_ids=frozenset({3, 4})
    )
    assert not contested(reading((a, own)))
    two_containers = pod(
        "t", ContainerAlloc("x", devices=(gpu0,)), ContainerAlloc("y", devices=(gpu0,))
    )
    assert not contested(reading((two_containers,)))
    stale = pod("stale", ContainerAlloc("c", devices=(gpu0,)))
    assert contested(reading((a, stale)))
    cpu = pod("cpu", ContainerAlloc("c", cpu_ids=frozenset({1})))
    assert contested(reading((a, cpu)))
    pod_level = PodAlloc("default", "p", (), cpu_ids=frozenset({4}))
    assert contested(reading((own, pod_level)))
