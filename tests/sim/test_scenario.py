"""Scenario files, their loader's errors, quantities, and the fake sysfs writer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podres_exporter.errors import ScenarioError
from podres_exporter.sim import (
    Node,
    NodeSpec,
    Scenario,
    builtin_names,
    format_cpu_list,
    load_builtin,
    parse_bytes,
    parse_cpu_list,
    parse_millicpu,
    write_sysfs,
)

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


@pytest.mark.parametrize("name", ["demo", "minimal", "policy-none", "v1alpha1"])
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
    s = Scenario.load(path)
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
        Scenario.load(path)
    assert info.value.key == key
    assert str(path) in str(info.value)
    assert key in str(info.value)
    assert isinstance(info.value, ValueError)


def test_missing_node_and_broken_toml(tmp_path: Path) -> None:
    """A file without [node], invalid TOML and a missing file are ScenarioErrors too."""
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\n')
    with pytest.raises(ScenarioError, match=r"bad\.toml: node: required"):
        Scenario.load(path)
    path.write_text("[node\n")
    with pytest.raises(ScenarioError, match="invalid TOML"):
        Scenario.load(path)
    with pytest.raises(ScenarioError, match="cannot read"):
        Scenario.load(tmp_path / "absent.toml")
    with pytest.raises(ScenarioError, match="no built-in scenario"):
        load_builtin("nope")


def test_quantities() -> None:
    """CPU and memory quantities parse like Kubernetes quantities."""
    assert parse_millicpu(2) == 2000
    assert parse_millicpu(1.5) == 1500
    assert parse_millicpu("500m") == 500
    assert parse_millicpu("0.25") == 250
    assert parse_bytes("64Gi") == 64 * 2**30
    assert parse_bytes("512M") == 512 * 10**6
    assert parse_bytes("1.5Gi") == 3 * 2**29
    assert parse_bytes(4096) == 4096
    for bad in ("x", "-1", True):
        with pytest.raises(ValueError):
            parse_millicpu(bad)
    for not_bytes in ("1 Gi", "Gi", -5, "1.1"):
        with pytest.raises(ValueError):
            parse_bytes(not_bytes)


def test_cpu_list_format() -> None:
    """CPU lists parse and print in the kernel's range-list format."""
    assert parse_cpu_list("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpu_list("") == ()
    assert parse_cpu_list([3, 1, 1]) == (1, 3)
    assert format_cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpu_list([]) == ""
    with pytest.raises(ValueError):
        parse_cpu_list("3-1")


@given(st.sets(st.integers(0, 300)))
def test_cpu_list_round_trip(cpus: set[int]) -> None:
    """Formatting then parsing a CPU set gives it back."""
    assert parse_cpu_list(format_cpu_list(cpus)) == tuple(sorted(cpus))


def test_synthetic_scenario() -> None:
    """Scenario.synthetic builds a node with enough devices for its pods."""
    s = Scenario.synthetic(100, devices_per_pod=1, exclusive_every=10)
    assert s.pod_count == 100
    node = Node.from_scenario(s)
    assert all(p.admitted for p in node.pods)
    assert sum(1 for p in node.pods for c in p.containers if c.cpu_ids) == 10


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
    s = Scenario.loads(text)
    root = write_sysfs(s.node, tmp_path)
    assert (root / "devices/system/node/node1/cpulist").read_text() == "2-3,6-7\n"
    assert (root / "devices/system/cpu/online").read_text() == "0-7\n"
