"""The simulated node's kubelet files and SMT topology (podres_sim/host): what the exporter's
kubelet_policy collector reads, from the scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from podres_exporter.core.errors import ScenarioError
from podres_sim import SimKubelet, load_builtin
from podres_sim.host.simhost import SimHost
from podres_sim.host.topology import write_sysfs
from podres_sim.scenario import NodeSpec, scenario_from_dict


def test_the_demo_hosts_kubelet_files(tmp_path: Path) -> None:
    """config.yaml says the scenario's policies; the checkpoint registers every device,
    the unhealthy one included, and records the running pods' devices by NUMA node."""
    sc = load_builtin("demo")
    sim = SimKubelet(sc, tmp_path / "kubelet.sock")
    sim.start()
    try:
        host = SimHost(sim, tmp_path / "host", clock=None)
        config = yaml.safe_load(host.kubelet_config.read_text())
        assert sc.node.topology_policy is None  # the simple allocator: no Topology Manager
        assert config["topologyManagerPolicy"] == "none"
        assert config["topologyManagerScope"] == "container"
        assert config["reservedSystemCPUs"] == "0-1,24-25"
        assert config["memoryManagerPolicy"] == "Static"
        data = json.loads(host.device_checkpoint.read_text())["Data"]
        assert "0000:af:02.7" in data["RegisteredDevices"]["intel.com/sriov_netdevice"]
        assert len(data["RegisteredDevices"]["podres.io/rdma-vf"]) == 7
        held = {
            (e["ResourceName"], d, numa)
            for e in data["PodDeviceEntries"]
            for numa, ids in e["DeviceIDs"].items()
            for d in ids
        }
        assert any(r == "devices.kubevirt.io/kvm" and n == "-1" for r, _, n in held)
        assert any(r == "nvidia.com/gpu" and n in {"0", "1"} for r, _, n in held)
    finally:
        sim.stop()


def test_cores_are_consecutive_cpus_of_a_numa_node(tmp_path: Path) -> None:
    """threads_per_core 2: CPUs 2k and 2k+1 are siblings; an offline one is left out."""
    write_sysfs(
        NodeSpec(numa_cpus=((0, 1, 2, 3),), offline_cpus=(3,), threads_per_core=2), tmp_path
    )
    cpu = tmp_path / "devices/system/cpu"
    assert (cpu / "cpu1/topology/thread_siblings_list").read_text() == "0-1\n"
    assert (cpu / "cpu2/topology/thread_siblings_list").read_text() == "2\n"
    assert not (cpu / "cpu3/topology").exists()
    assert (tmp_path / "devices/system/node/node0/distance").read_text() == "10\n"


ONE = {"numa_nodes": 1, "cpus_per_numa_node": 2}


@pytest.mark.parametrize(
    ("node", "key"),
    [
        ({**ONE, "cpus_per_numa_node": 3, "threads_per_core": 2}, "node.threads_per_core"),
        ({**ONE, "threads_per_core": 0}, "node.threads_per_core"),
        ({**ONE, "topology_policy": "strict"}, "node.topology_policy"),
        ({**ONE, "topology_scope": "node"}, "node.topology_scope"),
    ],
)
def test_a_wrong_smt_or_topology_setting_names_its_key(node: dict[str, object], key: str) -> None:
    """A thread count that does not divide a NUMA node, an unknown policy or scope."""
    with pytest.raises(ScenarioError, match=key):
        scenario_from_dict({"name": "t", "node": node})
