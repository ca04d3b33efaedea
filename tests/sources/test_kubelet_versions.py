"""Kubelets 1.28 to 1.37 through the real client: what each serves, and what we account.

One node, served by the simulated kubelet with each version's defaults (and the
``PodLevelResourceManagers`` gate on where it exists): a finished job still holding
(in List) the widget and CPU now given to a running pod, a pod-scoped pod, and three
DRA claims on one device, two through one share id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import MappingProxyType

import pytest

from podres_exporter.core.accounting import LIVENESS_ANOMALY, PodCount, account
from podres_exporter.core.model import KubeletReading, NodeTopology, PodLiveness, Support
from podres_exporter.sources.kubelet import KubeletClient
from podres_sim import SimKubelet, parse_scenario
from podres_sim.scenario import KubeletBehaviour

MakeSim = Callable[..., SimKubelet]
VERSIONS = range(28, 38)

NODE = """
name = "versions"
seed = 7

[node]
name = "v-node"
numa_nodes = 2
cpus_per_numa_node = 4
reserved_cpus = "0"
cpu_policy = "static"
memory_policy = "static"

[node.memory]
memory = "16Gi"

[[node.devices]]
resource = "example.com/widget"
ids = ["widget-0", "widget-1"]
numa = 0

[[pods]]
namespace = "batch"
name = "job"
finished = true
[[pods.containers]]
name = "etl"
cpu = 1
memory = "1Gi"
devices = { "example.com/widget" = 1 }

[[pods]]
namespace = "web"
name = "online"
[[pods.containers]]
name = "server"
cpu = 1
memory = "1Gi"
devices = { "example.com/widget" = 1 }

[[pods]]
namespace = "ml"
name = "scoped"
cpu = 3
memory = "4Gi"
[[pods.containers]]
name = "trainer"
cpu = 1
memory = "1Gi"
[[pods.containers]]
name = "helper"

[[pods]]
namespace = "infer"
name = "a"
[[pods.containers]]
name = "s"
[[pods.containers.claims]]
name = "a-gpu"
driver = "gpu.example.com"
pool = "v-node"
device = "gpu-0"
share_id = "share-1"

[[pods]]
namespace = "infer"
name = "b"
[[pods.containers]]
name = "s"
[[pods.containers.claims]]
name = "b-gpu"
driver = "gpu.example.com"
pool = "v-node"
device = "gpu-0"
share_id = "share-1"
"""

TOPOLOGY = NodeTopology(frozenset(range(8)), MappingProxyType({c: c // 4 for c in range(8)}))
UIDS = {"job": "u-job", "online": "u-online", "scoped": "u-scoped", "a": "u-a", "b": "u-b"}
NAMESPACES = {"job": "batch", "online": "web", "scoped": "ml", "a": "infer", "b": "infer"}
# What the node shows: every pod's log directory; cgroups of all but the finished job.
LIVENESS = PodLiveness(
    pod_uids={(NAMESPACES[p], p): frozenset({u}) for p, u in UIDS.items()},
    live_uids=frozenset(u for p, u in UIDS.items() if p != "job"),
)


def _read(make_sim: MakeSim, minor: int) -> tuple[KubeletReading, KubeletClient]:
    behaviour = KubeletBehaviour.of_version(minor, pod_level_gate=True)
    scenario = dataclasses.replace(parse_scenario(NODE), kubelet=behaviour)
    sim = make_sim(scenario)
    client = KubeletClient(str(sim.socket_path))
    return client.read(), client


@pytest.mark.parametrize("minor", VERSIONS)
def test_what_each_kubelet_serves(make_sim: MakeSim, minor: int) -> None:
    """Finished pods before 1.34, Get from 1.34, share ids from 1.35, pod level from 1.36."""
    reading, client = _read(make_sim, minor)
    try:
        names = {p.name for p in reading.pods}
        assert ("job" in names) is (minor < 34)
        assert client.get_pod("web", "online") is not None
        assert client.get_support is (Support.SERVED if minor >= 34 else Support.DISABLED)
        scoped = next(p for p in reading.pods if p.name == "scoped")
        assert bool(scoped.cpu_ids) is (minor >= 36)
        shares = {
            d.share_id
            for p in reading.pods
            for c in p.containers
            for r in c.dynamic_resources
            for d in r.devices
        }
        assert shares == ({"share-1"} if minor >= 35 else {None})
    finally:
        client.close()


@pytest.mark.parametrize("minor", VERSIONS)
def test_what_the_exporter_accounts(make_sim: MakeSim, minor: int) -> None:
    """With the node's liveness facts, every version counts the widget and CPU once."""
    reading, client = _read(make_sim, minor)
    client.close()
    acc = account(reading, TOPOLOGY, LIVENESS)
    widget = [r.holder.pod for r in acc.container_devices if r.resource == "example.com/widget"]
    assert widget == ["online"]
    assert acc.anomalies["device_held_by_several_containers"] == 0
    assert acc.anomalies["cpu_listed_by_several_containers"] == 0
    assert acc.anomalies[LIVENESS_ANOMALY] == 0
    # one device, one share (1.35+); before, two claims without share ids: shared
    shared = acc.dra_shared_devices[("gpu.example.com", "v-node")]
    assert shared == (0 if minor >= 35 else 1)
    if minor >= 36:
        # scoped: CPU 2 for its trainer, 3 and (node 0 full) 4 for its shared pool
        assert acc.pod_shared_cpus == (
            PodCount("ml", "scoped", "0", 1),
            PodCount("ml", "scoped", "1", 1),
        )
        assert acc.node_cpus[("0", "exclusive")] == 3
        assert acc.node_cpus[("1", "exclusive")] == 1
        assert acc.node_cpus[("0", "shared_free")] == 0
    else:
        assert acc.pod_shared_cpus == ()


@pytest.mark.parametrize("minor", [28, 33])
def test_old_kubelet_without_liveness_facts_reports_the_conflict(
    make_sim: MakeSim, minor: int
) -> None:
    """Without liveness facts the finished job's stale widget is an anomaly, as before."""
    reading, client = _read(make_sim, minor)
    client.close()
    acc = account(reading, TOPOLOGY)
    assert acc.anomalies["device_held_by_several_containers"] == 1
    assert LIVENESS_ANOMALY not in acc.anomalies


def test_of_version_rejects_versions_outside_the_table() -> None:
    """A minor version outside 1.28 to 1.37 is an error naming it."""
    with pytest.raises(ValueError, match=r"kubelet 1\.27"):
        KubeletBehaviour.of_version(27)
