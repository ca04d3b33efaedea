"""The kubelet_policy collector: the kubelet's settings, free whole cores, every registered
device and the NUMA distances, as the metric contract says (docs/metrics.md)."""

from __future__ import annotations

from types import MappingProxyType

from podres_exporter.collectors import kubelet_policy
from podres_exporter.core.kubeletfiles import DeviceCheckpoint, kubelet_config
from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    ContainerAlloc,
    DeviceRef,
    KubeletReading,
    NodeTopology,
    PodAlloc,
    Support,
)
from podres_exporter.core.telemetry import SourceStatus, Telemetry
from podres_exporter.core.view import NodeView, Snapshot
from tests.collectors.support import exposition

# Two NUMA nodes of two cores of two threads: cores {0,1} {2,3} on node 0, {4,5} {6,7} on 1.
TOPOLOGY = NodeTopology(
    frozenset(range(8)),
    MappingProxyType({c: c // 4 for c in range(8)}),
    MappingProxyType({c: frozenset({c - c % 2, c - c % 2 + 1}) for c in range(8)}),
    MappingProxyType({0: MappingProxyType({0: 10, 1: 21}), 1: MappingProxyType({0: 21, 1: 10})}),
)
# CPU 0 reserved, CPU 5 exclusive: free whole cores {2,3} on node 0 and {6,7} on node 1.
READING = KubeletReading(
    ApiVersion.V1,
    (
        PodAlloc(
            "ml",
            "train",
            (
                ContainerAlloc(
                    "main", cpu_ids=frozenset({5}), devices=(DeviceRef("r/gpu", "g1", (1,)),)
                ),
            ),
        ),
    ),
    Allocatable(cpu_ids=frozenset(range(1, 8)), devices=(DeviceRef("r/gpu", "g0", (0,)),)),
    Support.SERVED,
    taken_at=1.0,
)
CONFIG = kubelet_config(
    {
        "topologyManagerPolicy": "single-numa-node",
        "cpuManagerPolicy": "static",
        "cpuManagerPolicyOptions": {"full-pcpus-only": "true"},
        "reservedSystemCPUs": "0",
    }
)
CHECKPOINT = DeviceCheckpoint(MappingProxyType({"r/gpu": ("g0", "g1", "g2")}))


def view(ok: bool = True) -> NodeView:
    status = SourceStatus(ok=ok, duration_s=0.001, stale=not ok)
    telemetry = Telemetry(
        kubelet_config=CONFIG,
        device_checkpoint=CHECKPOINT,
        sources=MappingProxyType({"kubelet_config": status, "device_checkpoint": status}),
    )
    return NodeView.of(Snapshot(1, 1.0, TOPOLOGY, READING, True, telemetry=telemetry))


EXPECTED = """\
# HELP podres_kubelet_config_up 1 when the latest read of the kubelet's configuration file (--kubelet-config) succeeded, 0 when it could not be read or parsed (the last good one is served).
# TYPE podres_kubelet_config_up gauge
podres_kubelet_config_up 1.0
# HELP podres_kubelet_config_info The kubelet's admission settings, from its configuration file with the kubelet's defaults for absent keys: Topology Manager policy, scope and options, CPU manager policy and options, memory manager policy, reserved CPUs. Options as sorted key=value joined by ','; the CPUs as a CPU list.
# TYPE podres_kubelet_config_info gauge
podres_kubelet_config_info{cpu_manager_options="full-pcpus-only=true",cpu_manager_policy="static",memory_manager_policy="None",reserved_cpus="0",topology_manager_policy="single-numa-node",topology_manager_scope="container"} 1.0
# HELP podres_node_free_cores Physical cores per NUMA node whose every online SMT sibling is a free shared-pool CPU (allocatable, exclusive to nobody, not reserved): what the CPU manager's full-pcpus-only option and its whole-core preference take.
# TYPE podres_node_free_cores gauge
podres_node_free_cores{numa_node="0"} 1.0
podres_node_free_cores{numa_node="1"} 1.0
# HELP podres_node_cpu_threads_per_core Online CPUs per physical core (SMT threads), as the kubelet counts them.
# TYPE podres_node_cpu_threads_per_core gauge
podres_node_cpu_threads_per_core 2.0
# HELP podres_node_numa_distance The kernel's distance from one NUMA node to another (10: the node itself).
# TYPE podres_node_numa_distance gauge
podres_node_numa_distance{numa_node="0",to_numa_node="0"} 10.0
podres_node_numa_distance{numa_node="0",to_numa_node="1"} 21.0
podres_node_numa_distance{numa_node="1",to_numa_node="0"} 21.0
podres_node_numa_distance{numa_node="1",to_numa_node="1"} 10.0
# HELP podres_node_registered_devices Every device the kubelet has registered per resource, healthy or not (its device-manager checkpoint), per NUMA node as the kubelet reported it; no numa_node label where the node is unknown, 'none' for a device without topology.
# TYPE podres_node_registered_devices gauge
podres_node_registered_devices{resource="r/gpu"} 1.0
podres_node_registered_devices{numa_node="0",resource="r/gpu"} 1.0
podres_node_registered_devices{numa_node="1",resource="r/gpu"} 1.0
"""


def test_every_family_as_documented() -> None:
    """The exact exposition: empty labels left out, the unplaced device without numa_node."""
    assert exposition(kubelet_policy.COLLECTOR, view()) == EXPECTED


def test_an_unreadable_configuration_is_down_and_its_last_reading_served() -> None:
    """up 0 while the last good settings are still served (marked by the source's status)."""
    text = exposition(kubelet_policy.COLLECTOR, view(ok=False))
    assert "podres_kubelet_config_up 0.0" in text
    assert 'topology_manager_policy="single-numa-node"' in text


def test_no_telemetry_read_gives_the_sysfs_facts_alone() -> None:
    """Without the file sources (none enabled), only what sysfs and the kubelet give."""
    v = NodeView.of(Snapshot(1, 1.0, TOPOLOGY, READING, True))
    text = exposition(kubelet_policy.COLLECTOR, v)
    assert "podres_kubelet_config" not in text
    assert "podres_node_registered_devices" not in text
    assert "podres_node_free_cores{" in text and "podres_node_numa_distance{" in text
