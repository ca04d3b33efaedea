"""The benchmark's scenarios: the shapes docs/performance.md states, the same on every call."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import pytest

from podres_exporter._generated.podresources.v1 import api_pb2, api_pb2_grpc
from podres_sim import SimKubelet
from podres_sim.scenario.synthetic import (
    BENCH_SCENARIOS,
    bench_scenario,
    fleet_scenario,
    identity_scenario,
    synthetic_scenario,
)

MiB = 1024 * 1024


def by_resource(name: str) -> Counter[str]:
    return Counter(d.resource for d in bench_scenario(name).node.devices)


def listed(sim: SimKubelet) -> Any:
    with grpc.insecure_channel(
        sim.target, options=[("grpc.max_receive_message_length", 64 * MiB)]
    ) as channel:
        stub: Any = api_pb2_grpc.PodResourcesListerStub(channel)
        return stub.List(api_pb2.ListPodResourcesRequest(), timeout=60)


def test_small_has_16_cpus_one_gpu_and_20_pods() -> None:
    sc = bench_scenario("small")
    assert len(sc.node.cpus) == 16
    assert by_resource("small") == {"nvidia.com/gpu": 1}
    assert sc.pod_count == 20


def test_large_has_the_stated_hardware() -> None:
    node = bench_scenario("large").node
    assert len(node.cpus) == 256
    assert node.numa_nodes == 4
    assert by_resource("large") == {
        "nvidia.com/gpu": 4,
        "nvidia.com/mig-1g.10gb": 14,
        "nvidia.com/gpu.shared": 8,
        "intel.com/sriov_netdevice": 128,
    }
    # 8 GPUs: 4 whole, 2 MIG parents (seven instances on each of two NUMA nodes), and
    # 2 time-sliced GPUs of four replicas each.
    mig_numa = Counter(d.numa for d in node.devices if d.resource == "nvidia.com/mig-1g.10gb")
    assert sorted(mig_numa.values()) == [7, 7]
    sliced = Counter(
        d.id.split("::")[0] for d in node.devices if d.resource == "nvidia.com/gpu.shared"
    )
    assert sorted(sliced.values()) == [4, 4]
    vfs = [d.id for d in node.devices if d.resource == "intel.com/sriov_netdevice"]
    assert len(set(vfs)) == 128


def test_large_admits_500_pods_of_3_containers_200_with_exclusive_cpus(tmp_path: Path) -> None:
    sim = SimKubelet(bench_scenario("large"), tmp_path / "k.sock")
    pods = sim.node.pods
    assert len(pods) == 500
    assert all(p.admitted for p in pods)
    assert {len(p.containers) for p in pods} == {3}
    pinned = [p for p in pods if any(c.cpu_ids for c in p.containers)]
    assert len(pinned) == 200
    held = Counter(d.resource for p in pods for c in p.containers for d in c.devices)
    assert held == by_resource("large")  # every device is held by some container


@pytest.mark.slow  # a node at full scale
def test_huge_has_5000_pods_and_its_list_answer_is_over_4_mib(tmp_path: Path) -> None:
    with SimKubelet(bench_scenario("huge"), tmp_path / "k.sock") as sim:
        answer = listed(sim)
    assert len(answer.pod_resources) == 5000
    assert answer.ByteSize() > 4 * MiB


@pytest.mark.parametrize("name", ["small", "large"])
def test_each_scenario_is_the_same_on_every_call(name: str) -> None:
    assert name in BENCH_SCENARIOS
    assert bench_scenario(name) == bench_scenario(name)
    assert fleet_scenario(50) == fleet_scenario(50)  # huge is fleet_scenario(5000)


def test_the_identity_node_is_huges_with_the_pods_api_owners_and_ten_labels() -> None:
    """The pod-identity benchmark's node: fleet pods, each a Deployment's with 10 labels,
    the kubelet serving its Pods API."""
    node = identity_scenario(50)
    assert node.kubelet.pods_api
    assert len(node.pods) == len(fleet_scenario(50).pods)
    assert all(p.naming == "deployment" and len(p.labels) == 10 for p in node.pods)
    assert "identity" in BENCH_SCENARIOS


def test_an_unknown_name_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="small, large, huge"):
        bench_scenario("medium")


def test_fleet_scales_the_pods_and_keeps_their_shape() -> None:
    for pods in (50, 500):
        sc = fleet_scenario(pods)
        assert sc.pod_count == pods
        assert len(sc.node.devices) == 10 * pods
        assert len(sc.node.cpus) == 512


def test_synthetic_default_ids_are_unchanged() -> None:
    # Ids of the older synthetic nodes stay as they were (golden files and runs compare).
    first = synthetic_scenario(1).node.devices[0].id
    assert first.startswith("GPU-")
    assert first == synthetic_scenario(1).node.devices[0].id
