"""One node's metric samples -> the state the kubelet admits against: counts kept per NUMA
node, policies read from the kubelet's configuration, defaults said when it is missing."""

from __future__ import annotations

from collections import Counter

from podres_exporter.core.topology import (
    Container,
    CpuPolicy,
    MemoryPolicy,
    Pod,
    Reason,
    Scope,
    TopologyPolicy,
    admit,
)
from podres_exporter.fit.state import node_facts, policies_from
from podres_exporter.top.rows import Sample

GI = 2**30
CONFIG = {
    "topology_manager_policy": "single-numa-node",
    "topology_manager_scope": "pod",
    "topology_manager_options": "prefer-closest-numa-nodes=true,max-allowable-numa-nodes=16",
    "cpu_manager_policy": "static",
    "cpu_manager_options": "full-pcpus-only=true",
    "memory_manager_policy": "Static",
    "reserved_cpus": "0-1",
}


def s(name: str, value: float, **labels: str) -> Sample:
    return Sample(name, labels, value)


def cpu_samples(numa: str, free: int, reserved: int, exclusive: int, cores: int) -> list[Sample]:
    return [
        s("podres_node_cpus", free, numa_node=numa, pool="shared_free"),
        s("podres_node_cpus", reserved, numa_node=numa, pool="reserved"),
        s("podres_node_cpus", exclusive, numa_node=numa, pool="exclusive"),
        s("podres_node_free_cores", cores, numa_node=numa),
    ]


def test_cpus_keep_each_numa_nodes_free_cpus_whole_cores_and_reserved() -> None:
    """Made-up CPU ids hold, per NUMA node, the exported free CPUs, free whole cores and
    reserved CPUs."""
    samples = [
        s("podres_node_cpu_threads_per_core", 2),
        *cpu_samples("0", free=6, reserved=2, exclusive=4, cores=2),
        *cpu_samples("1", free=12, reserved=0, exclusive=0, cores=6),
    ]
    st = node_facts("n", samples).state
    assert st.nodes() == (0, 1)
    by_numa = Counter(c.numa for c in st.cpus)
    assert by_numa == {0: 12, 1: 12}
    numa_of = {c.id: c.numa for c in st.cpus}
    assert Counter(numa_of[i] for i in st.free_cpus) == {0: 6, 1: 12}
    assert Counter(numa_of[i] for i in st.reserved_cpus) == {0: 2}
    cores: dict[int, list[int]] = {}
    for c in st.cpus:
        cores.setdefault(c.core, []).append(c.id)
    whole = [ids for ids in cores.values() if all(i in st.free_cpus for i in ids)]
    assert Counter(numa_of[ids[0]] for ids in whole) == {0: 2, 1: 6}
    assert all(len(ids) == 2 for ids in cores.values())


def test_free_cpus_beside_reserved_ones_are_not_physical_under_full_pcpus_only() -> None:
    """Reserved CPUs 0 and 1 on two cores of an SMT node (each beside a free sibling),
    one core held whole, one core free: under full-pcpus-only only the whole free core
    is physical, so 4 CPUs are refused (SMTAlignmentError) and 2 admitted."""
    config = {**CONFIG, "memory_manager_policy": "None"}  # CONFIG has full-pcpus-only
    samples = [
        s("podres_kubelet_config_info", 1, **config),
        s("podres_node_cpu_threads_per_core", 2),
        *cpu_samples("0", free=4, reserved=2, exclusive=2, cores=1),
    ]
    st = node_facts("n", samples).state
    assert st.policies.full_pcpus_only
    asks = [{"cpu": n * 1000, "memory": GI} for n in (4, 2)]
    four, two = (Pod("p", (Container("c", a, a),)) for a in asks)
    assert admit(st, four).reason is Reason.SMT_ALIGNMENT
    assert admit(st, two).admitted


def test_devices_keep_registered_healthy_and_free_per_numa_node() -> None:
    """Every registered device is there with its NUMA nodes (none, one or several), the
    unhealthy ones marked, the free ones listed."""
    gpu = "nvidia.com/gpu"
    samples = [
        s("podres_node_registered_devices", 4, resource=gpu, numa_node="0"),
        s("podres_node_registered_devices", 4, resource=gpu, numa_node="1"),
        s("podres_node_allocatable_devices", 4, resource=gpu, numa_node="0"),
        s("podres_node_allocatable_devices", 3, resource=gpu, numa_node="1"),
        s("podres_node_devices", 2, resource=gpu, numa_node="0", state="free"),
        s("podres_node_devices", 2, resource=gpu, numa_node="0", state="allocated"),
        s("podres_node_devices", 3, resource=gpu, numa_node="1", state="free"),
        s("podres_node_registered_devices", 2, resource="example.com/nic", numa_node="none"),
        s("podres_node_devices", 2, resource="example.com/nic", numa_node="none", state="free"),
        s("podres_node_registered_devices", 1, resource="example.com/fpga", numa_node="0,1"),
        s("podres_node_devices", 1, resource="example.com/fpga", numa_node="0,1", state="free"),
    ]
    st = node_facts("n", samples).state
    gpus = st.devices[gpu]
    assert Counter(tuple(d.numa) for d in gpus) == {(0,): 4, (1,): 4}
    assert [d.numa for d in gpus if not d.healthy] == [frozenset({1})]
    free = {d.id: d for d in gpus if d.id in st.free_devices[gpu]}
    assert Counter(tuple(d.numa) for d in free.values()) == {(0,): 2, (1,): 3}
    assert all(d.healthy for d in free.values())
    assert [d.numa for d in st.devices["example.com/nic"]] == [frozenset()] * 2
    assert [d.numa for d in st.devices["example.com/fpga"]] == [frozenset({0, 1})]


def test_devices_without_the_registered_family_are_every_id_reported() -> None:
    """An exporter without podres_node_registered_devices: the devices are every id in
    any state, the held unhealthy ones included."""
    samples = [
        s("podres_node_devices", 1, resource="r/x", numa_node="0", state="free"),
        s("podres_node_devices", 2, resource="r/x", numa_node="0", state="allocated"),
        s("podres_node_devices", 1, resource="r/x", numa_node="0", state="allocated_unhealthy"),
    ]
    st = node_facts("n", samples).state
    assert len(st.devices["r/x"]) == 4
    assert sum(not d.healthy for d in st.devices["r/x"]) == 1
    assert len(st.free_devices["r/x"]) == 1


def test_memory_per_type_and_numa_node() -> None:
    """Allocatable and free memory per type and NUMA node; a joint label is not a NUMA
    node, and its block is taken from its first NUMA node on (the memory manager's way),
    not split evenly as the exported free share is."""
    alloc, mem = "podres_node_allocatable_memory_bytes", "podres_node_memory_bytes"
    huge = "hugepages-1Gi"
    samples = [
        s(alloc, 64 * GI, numa_node="0", memory_type="memory"),
        s(mem, 55.5 * GI, numa_node="0", memory_type="memory", state="free"),
        s(mem, 8 * GI, numa_node="0", memory_type="memory", state="allocated"),
        s(mem, GI, numa_node="0,1", memory_type="memory", state="allocated"),
        s(alloc, 4 * GI, numa_node="1", memory_type=huge),
        s(mem, 4 * GI, numa_node="1", memory_type=huge, state="free"),
    ]
    st = node_facts("n", samples).state
    assert st.memory["memory"][0].allocatable == 64 * GI
    assert st.memory["memory"][0].free == 55 * GI
    assert set(st.memory["memory"]) == {0}
    assert st.memory["hugepages-1Gi"][1].free == 4 * GI


def test_policies_from_the_kubelet_configuration() -> None:
    """Each policy, scope and option of podres_kubelet_config_info is read."""
    samples = [s("podres_kubelet_config_info", 1, **CONFIG), *cpu_samples("0", 4, 0, 0, 4)]
    facts = node_facts("n", samples)
    p = facts.state.policies
    assert facts.policies_known and not facts.notes
    assert p.topology is TopologyPolicy.SINGLE_NUMA_NODE
    assert p.scope is Scope.POD
    assert p.prefer_closest_numa_nodes and p.max_allowable_numa_nodes == 16
    assert p.cpu is CpuPolicy.STATIC and p.full_pcpus_only
    assert p.memory is MemoryPolicy.STATIC


def test_missing_or_unreadable_configuration_assumes_the_defaults_and_says_so() -> None:
    """Without the configuration the kubelet's defaults are taken, and a note says why."""
    missing = node_facts("n", [])
    assert not missing.policies_known
    assert missing.state.policies.topology is TopologyPolicy.NONE
    assert any("kubelet configuration not exported" in n for n in missing.notes)
    unreadable = node_facts("n", [s("podres_kubelet_config_up", 0)])
    assert any("kubelet configuration unreadable" in n for n in unreadable.notes)


def test_an_unknown_policy_value_is_noted() -> None:
    """A policy this version does not know is noted, and its default taken."""
    policies, notes = policies_from({"topology_manager_policy": "prefer-gpus"})
    assert policies.topology is TopologyPolicy.NONE
    assert notes == ["topology_manager_policy 'prefer-gpus' not understood: none assumed"]


def test_nodes_alike_share_a_key() -> None:
    """Two nodes with the same counts have one key (answered once); a different count differs."""
    a = node_facts("a", cpu_samples("0", 4, 0, 0, 4))
    b = node_facts("b", cpu_samples("0", 4, 0, 0, 4))
    c = node_facts("c", cpu_samples("0", 3, 0, 1, 3))
    assert a.key == b.key != c.key
