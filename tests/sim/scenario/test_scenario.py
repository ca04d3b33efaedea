"""Scenario files, their loader's errors, scenario references, and the fake sysfs writer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podres_exporter.core.cpulist import format_cpulist
from podres_exporter.core.errors import ScenarioError
from podres_sim import (
    DevicePluginsSpec,
    Node,
    NodeSpec,
    builtin_names,
    load_builtin,
    resolve_scenario,
    write_sysfs,
)
from podres_sim.scenario import parse_scenario, read_scenario
from podres_sim.scenario.synthetic import synthetic_scenario

GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PCI = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

GOOD = """
name = "t"
seed = 1
[node]
numa_nodes = 2
cpus_per_numa_node = 2
[[node.devices]]
resource = "example.com/x"
id = "x0"
numa = 0
[[pods]]
namespace = "ns"
name = "p"
[[pods.containers]]
name = "c"
cpu = 1
memory = "1Gi"
"""


def test_demo_scenario_shape() -> None:
    """The demo node: 2 NUMA nodes, 48 CPUs, 4 reserved, static policies, 30+ pods."""
    s = load_builtin("demo")
    node = s.node
    assert node.numa_nodes == 2
    assert len(node.cpus) == 48
    assert node.numa_cpus[0] == tuple(range(24))
    assert node.reserved_cpus == (0, 1, 24, 25)
    assert len(node.allocatable_cpus) == 44
    assert (node.cpu_policy, node.memory_policy) == ("static", "static")
    assert set(node.memory) == {"memory", "hugepages-1Gi", "hugepages-2Mi"}
    assert s.pod_count >= 30
    assert len({p.namespace for p in s.pods}) >= 5
    assert s.churn_interval_s == 5.0
    assert s.kubelet.rate_limit


def test_demo_devices_look_real() -> None:
    """Demo device ids follow the plugins' formats; one resource has no topology."""
    node = load_builtin("demo").node
    gpus = node.devices_of("nvidia.com/gpu")
    assert len(gpus) == 4 and all(GPU_UUID.match(d.id) for d in gpus)
    assert sorted(d.numa for d in gpus if d.numa) == [(0,), (0,), (1,), (1,)]
    mig = node.devices_of("nvidia.com/mig-1g.10gb")
    assert len(mig) == 7 and all(MIG_UUID.match(d.id) for d in mig)
    shared = node.devices_of("nvidia.com/gpu.shared")
    assert [d.id.rsplit("::", 1)[1] for d in shared] == ["0", "1", "2", "3"]
    assert all(GPU_UUID.match(d.id.rsplit("::", 1)[0]) for d in shared)
    vfs = node.devices_of("intel.com/sriov_netdevice")
    assert all(PCI.match(d.id) and d.numa == (1,) for d in vfs)
    assert any(not d.healthy for d in vfs)
    assert any(d.numa is None for d in node.devices)


def test_demo_pods_cover_the_interesting_cases() -> None:
    """The admitted demo has exclusive and shared containers, sidecars, DRA, a rejected pod."""
    node = Node.from_scenario(load_builtin("demo"))
    pods = node.pods
    containers = [c for p in pods for c in p.containers]
    # One pod asks for more GPUs than exist; the hpc pods wait for the device plugin.
    assert sum(1 for p in pods if not p.admitted and p.namespace != "hpc") == 1
    assert [p.admitted for p in pods if p.namespace == "hpc"] == [False, False]
    assert sum(1 for c in containers if c.cpu_ids) >= 8
    assert any(not c.cpu_ids for p in pods if p.qos == "Guaranteed" for c in p.containers)
    assert any(c.kind == "sidecar" for c in containers)
    assert any(c.claims for c in containers)
    assert any(len(m.numa) == 2 for c in containers for m in c.memory)
    assert any(p.spec.churn for p in pods)


@pytest.mark.parametrize(
    "name",
    [
        "demo",
        "minimal",
        "policy-none",
        "v1alpha1",
        "kubelet-1.33",
        "kubelet-1.37",
        "small",
        "large",
    ],
)
def test_builtin_scenarios_load(name: str) -> None:
    """Every shipped scenario loads and admits."""
    assert name in builtin_names()
    s = load_builtin(name)
    assert s.name == name
    assert Node.from_scenario(s).pods


def test_small_builtins() -> None:
    """minimal, policy-none and v1alpha1 are what their names say."""
    minimal = load_builtin("minimal")
    assert (minimal.node.numa_nodes, len(minimal.node.cpus), minimal.pod_count) == (1, 4, 2)
    assert len(minimal.node.resources) == 1
    assert load_builtin("policy-none").node.cpu_policy == "none"
    assert load_builtin("v1alpha1").kubelet.api == "v1alpha1"


def test_load_from_file(tmp_path: Path) -> None:
    """Scenario.load reads a TOML file; the name defaults to its stem."""
    path = tmp_path / "mine.toml"
    path.write_text(GOOD.replace('name = "t"\n', ""))
    s = read_scenario(path)
    assert s.name == "mine"
    assert s.pods[0].containers[0].cpu_m == 1000
    assert s.node.devices[0].numa == (0,)


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (("cpus_per_numa_node = 2", "cpus_per_numa_node = 2\nbogus = 1"), "node.bogus"),
        (("cpu = 1", 'cpu = "lots"'), "pods[0].containers[0].cpu"),
        (('memory = "1Gi"', 'memory = "1 gig"'), "pods[0].containers[0].memory"),
        (("numa = 0", "numa = 5"), "node.devices[0].numa"),
        (
            ("cpus_per_numa_node = 2", 'cpus_per_numa_node = 2\nreserved_cpus = "0,9"'),
            "node.reserved_cpus",
        ),
        (("seed = 1", 'seed = 1\n[kubelet]\nget = "maybe"'), "kubelet.get"),
        (("seed = 1", "seed = 1\n[kubelet]\nrate_limit = 3"), "kubelet.rate_limit"),
        (("seed = 1", "seed = 1\n[kubelet]\nspeed = 3"), "kubelet.speed"),
        (('name = "p"', 'name = "p"\nreplicas = 2\nnaming = "exact"'), "pods[0].replicas"),
        (('id = "x0"', 'ids = ["x0", "x0"]'), "node.devices[0].ids"),
        (('name = "c"', 'name = "c"\nkind = "helper"'), "pods[0].containers[0].kind"),
        (("seed = 1", "seed = 1\n[churn]\ninterval_s = -1"), "churn.interval_s"),
        (('resource = "example.com/x"', 'resource = "nodomain"'), "node.devices[0].resource"),
        (('namespace = "ns"\n', ""), "pods[0].namespace"),
    ],
)
def test_bad_scenario_errors_name_file_and_key(
    tmp_path: Path, edit: tuple[str, str], key: str
) -> None:
    """A bad scenario file raises ScenarioError naming the file and the offending key."""
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace(*edit, 1))
    with pytest.raises(ScenarioError) as info:
        read_scenario(path)
    assert info.value.key == key
    assert str(path) in str(info.value)
    assert key in str(info.value)
    assert isinstance(info.value, ValueError)


def test_missing_node_and_broken_toml(tmp_path: Path) -> None:
    """A file without [node], invalid TOML and a missing file are ScenarioErrors too."""
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\n')
    with pytest.raises(ScenarioError, match=r"bad\.toml: node: required"):
        read_scenario(path)
    path.write_text("[node\n")
    with pytest.raises(ScenarioError, match="invalid TOML"):
        read_scenario(path)
    with pytest.raises(ScenarioError, match="cannot read"):
        read_scenario(tmp_path / "absent.toml")
    with pytest.raises(ScenarioError, match="no built-in scenario"):
        load_builtin("nope")


def test_quantities_in_a_file() -> None:
    """CPU and memory keys take Kubernetes quantities; a bad one names its key."""
    text = GOOD.replace("cpu = 1", 'cpu = "250m"\nhugepages-2Mi = "1.5Gi"')
    container = parse_scenario(text).pods[0].containers[0]
    assert (container.cpu_m, container.memory) == (250, 2**30)
    assert dict(container.hugepages) == {"hugepages-2Mi": 3 * 2**29}
    with pytest.raises(ScenarioError, match=r"containers\[0\]\.hugepages-2Mi: expected a byte"):
        parse_scenario(text.replace('"1.5Gi"', '"1.1"'))
    with pytest.raises(ScenarioError, match=r"containers\[0\]\.hugepages-3x: unknown key"):
        parse_scenario(text.replace("hugepages-2Mi", "hugepages-3x"))


@pytest.mark.parametrize(
    ("value", "cpus"),
    [('"0-1,3"', (0, 1, 3)), ('""', ()), ("[3, 1, 1]", (1, 3)), ("[]", ())],
)
def test_cpu_lists_are_strings_or_arrays(value: str, cpus: tuple[int, ...]) -> None:
    """A CPU list key takes a kernel CPU list or an array of ints: sorted, unique."""
    text = GOOD.replace(
        "cpus_per_numa_node = 2", f"cpus_per_numa_node = 2\nreserved_cpus = {value}"
    )
    assert parse_scenario(text).node.reserved_cpus == cpus


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('"3-1"', "bad CPU range '3-1'"),
        ('"x"', "bad CPU list part 'x'"),
        ("[1, true]", "expected CPU ids (non-negative ints), got True"),
        ("[-1]", "expected CPU ids (non-negative ints), got -1"),
        ("3", "expected a CPU list string or an array of ints, got 3"),
    ],
)
def test_bad_cpu_lists_name_their_key(value: str, problem: str) -> None:
    """A malformed CPU list is a ScenarioError naming the key and what is wrong."""
    text = GOOD.replace("cpus_per_numa_node = 2", f"cpus_per_numa_node = 2\noffline_cpus = {value}")
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text)
    assert info.value.key == "node.offline_cpus"
    assert problem in info.value.problem


@given(st.sets(st.integers(0, 3)))
def test_cpu_list_string_and_array_agree(cpus: set[int]) -> None:
    """A set of CPUs written as a range list or as an array loads the same."""
    as_array = f"reserved_cpus = {sorted(cpus)}"
    as_string = f'reserved_cpus = "{format_cpulist(cpus)}"'
    nodes = [
        parse_scenario(GOOD.replace("cpus_per_numa_node = 2", f"cpus_per_numa_node = 2\n{line}"))
        for line in (as_array, as_string)
    ]
    assert nodes[0].node.reserved_cpus == nodes[1].node.reserved_cpus == tuple(sorted(cpus))


def test_plugin_resource_names_are_checked() -> None:
    """[device_plugins] resources must be extended resource names, worded for the scenario."""
    for name, problem in (
        ("vf", "has no domain (expected domain/name)"),
        ("kubernetes.io/vf", "is in the kubernetes.io namespace"),
        ("requests.example.com/vf", "starts with requests."),
        ("example.com/a/b", "has more than one /"),
        ("/vf", "has an invalid domain (expected a lowercase DNS subdomain)"),
        ("Example.com/vf", "has an invalid domain (expected a lowercase DNS subdomain)"),
        ("example.com/", "has an invalid name part (alphanumerics, '-', '_' or '.', at most 63)"),
        (
            "example.com/-vf",
            "has an invalid name part (alphanumerics, '-', '_' or '.', at most 63)",
        ),
    ):
        with pytest.raises(ValueError) as info:
            DevicePluginsSpec((name,))
        assert str(info.value) == (
            f"device_plugins.resources: {name!r} is not an extended resource name: {problem}"
        )
    assert DevicePluginsSpec(("example.com/vf",)).resources == ("example.com/vf",)


def test_loads_names_the_source() -> None:
    """Scenario.loads passes source and default_name on: errors and the name follow them."""
    s = parse_scenario(GOOD.replace('name = "t"\n', ""), source="mem", default_name="inline")
    assert (s.name, s.source) == ("inline", "mem")
    with pytest.raises(ScenarioError, match=r"^mem: node: required table is missing$"):
        parse_scenario('name = "x"', source="mem")


def test_synthetic_scenario() -> None:
    """Scenario.synthetic builds a node with enough devices for its pods."""
    s = synthetic_scenario(100, devices_per_pod=1, exclusive_every=10)
    assert s.pod_count == 100
    assert s == synthetic_scenario(100, devices_per_pod=1, exclusive_every=10)
    assert len(s.node.devices) == 100 and all(GPU_UUID.match(d.id) for d in s.node.devices)
    node = Node.from_scenario(s)
    assert all(p.admitted for p in node.pods)
    assert sum(1 for p in node.pods for c in p.containers if c.cpu_ids) == 10


def test_resolve_a_scenario_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference is synthetic:PODS[:N], a built-in name (before a file of that name), or
    a TOML file."""
    assert resolve_scenario("minimal") == load_builtin("minimal")
    s = resolve_scenario("synthetic:30:10")
    assert (s.name, s.pod_count) == ("synthetic-30", 30)
    assert [p.replicas for p in s.pods if p.qos == "Guaranteed"] == [3]
    assert resolve_scenario("synthetic:5") == synthetic_scenario(5)
    path = tmp_path / "mine.toml"
    path.write_text(GOOD)
    assert resolve_scenario(str(path)).name == "t"
    (tmp_path / "plain").write_text(GOOD)
    (tmp_path / "minimal").write_text(GOOD)
    monkeypatch.chdir(tmp_path)
    assert resolve_scenario("plain").source == "plain"
    assert resolve_scenario("minimal").name == "minimal"


@pytest.mark.parametrize("ref", ["synthetic:", "synthetic:many", "synthetic:0", "synthetic:5:1:2"])
def test_bad_synthetic_references(ref: str) -> None:
    """A malformed synthetic reference is a ScenarioError naming it."""
    with pytest.raises(ScenarioError) as info:
        resolve_scenario(ref)
    assert str(info.value) == f"{ref}: expected synthetic:PODS[:N]"


def test_unknown_references(tmp_path: Path) -> None:
    """A reference to nothing lists the built-ins; a missing .toml file is named as such."""
    with pytest.raises(ScenarioError) as info:
        resolve_scenario("nope")
    assert str(info.value) == (
        f"nope: neither a built-in scenario ({', '.join(builtin_names())}), a file "
        "nor synthetic:PODS[:N]"
    )
    with pytest.raises(ScenarioError, match=r"absent\.toml: cannot read"):
        resolve_scenario(str(tmp_path / "absent.toml"))


def test_python_builder_validates() -> None:
    """Building a node in Python is validated like a file."""
    with pytest.raises(ScenarioError, match="reserved_cpus"):
        NodeSpec.uniform(1, 2, reserved_cpus=(7,))


def test_sysfs_writer_for_the_demo(tmp_path: Path) -> None:
    """write_sysfs writes online CPUs, online NUMA nodes and each node's cpulist."""
    root = write_sysfs(load_builtin("demo").node, tmp_path)
    cpu = root / "devices/system/cpu"
    node = root / "devices/system/node"
    assert (cpu / "online").read_text() == "0-47\n"
    assert (cpu / "possible").read_text() == "0-47\n"
    assert (cpu / "offline").read_text() == "\n"
    assert (node / "online").read_text() == "0-1\n"
    assert (node / "node0/cpulist").read_text() == "0-23\n"
    assert (node / "node1/cpulist").read_text() == "24-47\n"
    assert (cpu / "cpu5/online").read_text() == "1\n"


def test_sysfs_writer_marks_cpus_offline(tmp_path: Path) -> None:
    """Offline CPUs leave cpu/online and their node's cpulist but stay possible and present."""
    root = write_sysfs(load_builtin("demo"), tmp_path, offline_cpus=[5, 6, 30])
    cpu = root / "devices/system/cpu"
    assert (cpu / "online").read_text() == "0-4,7-29,31-47\n"
    assert (cpu / "offline").read_text() == "5-6,30\n"
    assert (cpu / "present").read_text() == "0-47\n"
    assert (cpu / "cpu5/online").read_text() == "0\n"
    assert (root / "devices/system/node/node0/cpulist").read_text() == "0-4,7-23\n"
    assert (root / "devices/system/node/node1/cpulist").read_text() == "24-29,31-47\n"
    with pytest.raises(ValueError, match="not on the node"):
        write_sysfs(load_builtin("minimal"), tmp_path, offline_cpus=[99])


def test_sysfs_writer_explicit_numa_layout(tmp_path: Path) -> None:
    """A node with interleaved NUMA CPU lists is written as such."""
    text = GOOD.replace(
        "numa_nodes = 2\ncpus_per_numa_node = 2", 'numa_cpus = ["0-1,4-5", "2-3,6-7"]'
    )
    s = parse_scenario(text)
    root = write_sysfs(s.node, tmp_path)
    assert (root / "devices/system/node/node1/cpulist").read_text() == "2-3,6-7\n"
    assert (root / "devices/system/cpu/online").read_text() == "0-7\n"


def test_topology_manager_keys() -> None:
    """node.topology_policy / topology_scope load; unset means no Topology Manager; a
    bad value is a ScenarioError naming the key."""
    assert parse_scenario(GOOD).node.topology_policy is None
    text = GOOD.replace(
        "cpus_per_numa_node = 2",
        'cpus_per_numa_node = 2\ntopology_policy = "restricted"\ntopology_scope = "pod"',
    )
    node = parse_scenario(text).node
    assert (node.topology_policy, node.topology_scope) == ("restricted", "pod")
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text.replace('"restricted"', '"strict"'))
    assert info.value.key == "node.topology_policy"
    assert load_builtin("numa").node.topology_policy == "single-numa-node"
