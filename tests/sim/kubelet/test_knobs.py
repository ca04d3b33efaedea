"""The simulated kubelet's version knobs, each read through the real client over a socket:
finished pods listed or not, pod-level resources on or off, Get served or not, DRA share ids."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from podres_exporter.core.accounting import pod_state
from podres_exporter.core.errors import ScenarioError
from podres_exporter.core.model import PodAlloc, Support
from podres_exporter.sources.kubelet import KubeletClient
from podres_exporter.sources.liveness import read_liveness
from podres_sim import SimKubelet
from podres_sim.kubelet.node import Node
from podres_sim.scenario import load_builtin, parse_scenario

MakeSim = Callable[..., SimKubelet]


def _pods(sim: SimKubelet) -> dict[str, PodAlloc]:
    client = KubeletClient(str(sim.socket_path))
    try:
        return {p.name: p for p in client.read().pods}
    finally:
        client.close()


def test_finished_pod_listed_only_without_the_active_pods_filter(make_sim: MakeSim) -> None:
    """Before 1.34 List shows the finished job with the widget and CPU now online's."""
    sim = make_sim("kubelet-1.33")
    pods = _pods(sim)
    assert set(pods) == {"etl-job", "online"}
    stale, live = pods["etl-job"].containers[0], pods["online"].containers[0]
    assert stale.devices == live.devices
    assert stale.cpu_ids == live.cpu_ids == frozenset({1})
    sim.set_behaviour(list_active_only=True)
    assert set(_pods(sim)) == {"online"}


def test_get_of_a_finished_pod_follows_the_filter(make_sim: MakeSim) -> None:
    """Get (served) finds the finished pod without the filter, and not with it."""
    sim = make_sim("kubelet-1.33", get="served")
    client = KubeletClient(str(sim.socket_path))
    try:
        assert client.get_pod("batch", "etl-job") is not None
        assert client.get_support is Support.SERVED
        sim.set_behaviour(list_active_only=True)
        assert client.get_pod("batch", "etl-job") is None
    finally:
        client.close()


def test_get_disabled_falls_back_to_list(make_sim: MakeSim) -> None:
    """Get off (before 1.34): the client finds the pod through List and remembers it."""
    sim = make_sim("kubelet-1.33")
    client = KubeletClient(str(sim.socket_path))
    try:
        found = client.get_pod("default", "online")
        assert found is not None and found.name == "online"
        assert client.get_support is Support.DISABLED
    finally:
        client.close()


def test_pod_level_resources_on_and_off(make_sim: MakeSim) -> None:
    """With the gate, the pod-scoped pod lists its budget (trainer's CPU in it); without, none."""
    sim = make_sim("kubelet-1.37")
    scoped = _pods(sim)["scoped"]
    trainer, helper = scoped.containers
    assert len(scoped.cpu_ids) == 3
    assert trainer.cpu_ids < scoped.cpu_ids and len(trainer.cpu_ids) == 1
    assert helper.cpu_ids == frozenset()
    assert sum(b.size_bytes for b in scoped.memory) == 4 * 2**30
    sim.set_behaviour(pod_level_resources=False)
    scoped = _pods(sim)["scoped"]
    assert scoped.cpu_ids == frozenset() and scoped.memory == ()
    assert scoped.containers[0].cpu_ids == trainer.cpu_ids


def test_dra_share_ids_on_and_off(make_sim: MakeSim) -> None:
    """Share ids are sent from 1.35; switched off, the claim devices carry none."""
    sim = make_sim("kubelet-1.37")

    def shares() -> dict[str, str | None]:
        return {
            name: p.containers[0].dynamic_resources[0].devices[0].share_id
            for name, p in _pods(sim).items()
            if p.namespace == "infer"
        }

    assert shares() == {"a": "share-1", "b": "share-1", "c": "share-2"}
    sim.set_behaviour(dra_share_ids=False)
    assert shares() == {"a": None, "b": None, "c": None}


def test_demo_has_a_pod_scoped_pod(make_sim: MakeSim) -> None:
    """The demo's postgres-0: 2 pod-level CPUs, 1 of them its postgres container's."""
    pod = _pods(make_sim("demo"))["postgres-0"]
    exporter, postgres = pod.containers  # the sidecar first
    assert len(pod.cpu_ids) == 2
    assert len(postgres.cpu_ids) == 1 and postgres.cpu_ids < pod.cpu_ids
    assert exporter.cpu_ids == frozenset()
    assert sum(b.size_bytes for b in pod.memory) == (4 << 30) + (64 << 20)


def test_finish_gives_resources_back() -> None:
    """A finished pod's CPUs and devices are free again; it stays, Succeeded, stale."""
    node = Node.from_scenario(load_builtin("kubelet-1.33"))
    job = node.pod("batch", "etl-job")
    assert job is not None and job.phase == "Succeeded" and not job.active
    assert job.containers[0].cpu_ids == (1,)
    assert node.finish("batch", "etl-job") is None  # not running any more
    online = node.pod("default", "online")
    assert online is not None
    assert node.finish("default", "online") is not None
    assert node.free_cpus() == frozenset({1, 2, 3})


def test_pod_level_toml_keys() -> None:
    """Pod-level cpu and memory parse as quantities; the containers may not ask more."""
    text = """
[node]
numa_nodes = 1
cpus_per_numa_node = 4
[kubelet]
pod_level_resources = true
list_active_only = false
[[pods]]
namespace = "ns"
name = "p"
cpu = "2"
memory = "1Gi"
finished = true
[[pods.containers]]
name = "c"
cpu = 1
"""
    sc = parse_scenario(text)
    assert (sc.pods[0].cpu_m, sc.pods[0].memory, sc.pods[0].finished) == (2000, 2**30, True)
    assert sc.kubelet.pod_level_resources and not sc.kubelet.list_active_only
    with pytest.raises(ScenarioError, match=r"pods\[0\]\.cpu"):
        parse_scenario(text.replace('cpu = "2"', 'cpu = "500m"'))
    with pytest.raises(ScenarioError, match=r"kubelet\.dra_share_ids"):
        parse_scenario(text.replace("[kubelet]", '[kubelet]\ndra_share_ids = "yes"'))
    with pytest.raises(ScenarioError, match=r"pods\[0\]\.finished"):
        parse_scenario(text.replace("finished = true", "finished = 1"))


def test_host_shows_running_pods_cgroups_and_finished_pods_logs(make_sim: MakeSim) -> None:
    """The simulated host: a pod cgroup per running pod; a finished pod keeps only its logs."""
    sim = make_sim("kubelet-1.33")
    host = sim.host  # type: ignore[attr-defined]
    live = read_liveness(host.pod_logs, host.sysfs / "fs" / "cgroup")
    assert pod_state(live, "batch", "etl-job") == "finished"
    assert pod_state(live, "default", "online") == "running"
    sim.node.finish("default", "online")
    host.refresh(seconds=0.0)
    live = read_liveness(host.pod_logs, host.sysfs / "fs" / "cgroup")
    assert pod_state(live, "default", "online") == "finished"
