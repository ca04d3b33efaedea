"""The simulated kubelet's Pods API over real gRPC on a real unix socket."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
import structlog

from podres_exporter._generated.podsapi.v1alpha1 import api_pb2 as pods_pb2
from podres_exporter.core.errors import ScenarioError
from podres_exporter.daemon.fileid import file_identity
from podres_sim import ContainerSpec, KubeletBehaviour, PodSpec, SimKubelet
from podres_sim.kubelet.node import Node
from podres_sim.kubelet.podsapi import INITIALIZING, WATCHER_DROPPED, SimPodsApi
from podres_sim.kubelet.ratelimit import RATE_LIMITED
from podres_sim.scenario import parse_scenario
from tests.sim.kubelet.podsapi_fixture import (
    GPU,
    SCENARIO,
    PodsStub,
    decode,
    initial_sync,
    kubelet_root,
    pods_api_kubelet,
    pods_channel,
    watch,
)
from tests.support import wait_until


def _owners(pod: Any) -> list[tuple[str, str, bool]]:
    return [(o.kind, o.name, o.controller) for o in pod.metadata.ownerReferences]


def test_watch_sends_every_pod_then_initial_sync_complete() -> None:
    """WatchPods: ADDED per pod in UID order, then INITIAL_SYNC_COMPLETE with no pod."""
    with pods_api_kubelet() as sim, pods_channel(sim) as ch:
        api = sim.pods_api
        assert api is not None
        stream = watch(PodsStub(ch), timeout=10)
        pods = initial_sync(stream)
        stream.cancel()
        served = api.uids()
        assert [p.metadata.uid for p in pods] == sorted(served)
        assert {p.metadata.uid: (p.metadata.namespace, p.metadata.name) for p in pods} == served
        assert len(pods) == SCENARIO.pod_count


def test_pods_carry_owners_labels_phase_qos_and_node() -> None:
    """Each kind of owner is what its controller would set, with its controller's labels."""
    with pods_api_kubelet() as sim, pods_channel(sim) as ch:
        listed = PodsStub(ch).ListPods(pods_pb2.ListPodsRequest(), timeout=10)
        pods = {p.metadata.name.split("-")[0]: p for p in map(decode, listed.pods)}
    front = pods["frontend"]
    template_hash = front.metadata.labels["pod-template-hash"]
    assert _owners(front) == [("ReplicaSet", f"frontend-{template_hash}", True)]
    assert front.metadata.name.startswith(f"frontend-{template_hash}-")
    assert front.metadata.labels["team"] == "web"
    assert front.metadata.labels["app.kubernetes.io/name"] == "frontend"
    assert _owners(pods["trainer"]) == [("StatefulSet", "trainer", True)]
    assert pods["trainer"].metadata.labels["statefulset.kubernetes.io/pod-name"] == "trainer-0"
    assert _owners(pods["report"]) == [("Job", "report", True)]
    assert pods["report"].metadata.labels["job-name"] == "report"
    assert _owners(pods["debug"]) == []
    assert dict(pods["debug"].metadata.labels) == {"team": "ops"}
    for pod in pods.values():
        assert pod.status.phase == "Running"
        assert pod.spec.nodeName == "pa-node"
        assert pod.metadata.creationTimestamp.seconds > 0
    assert pods["trainer"].status.qosClass == "Guaranteed"
    assert pods["debug"].status.qosClass == "BestEffort"


def test_device_health_is_each_containers_allocated_resources_status() -> None:
    """A device turning unhealthy is a MODIFIED event with the container's new health."""
    with pods_api_kubelet() as sim, pods_channel(sim) as ch:
        stream = watch(PodsStub(ch), timeout=10)
        trainer = next(p for p in initial_sync(stream) if p.metadata.name == "trainer-0")
        (status,) = trainer.status.containerStatuses
        ((resource, device),) = [
            (r.name, h.resourceID) for r in status.allocatedResourcesStatus for h in r.resources
        ]
        assert resource == GPU
        assert status.allocatedResourcesStatus[0].resources[0].health == "Healthy"
        sim.set_device_health(GPU, device, healthy=False)
        event = next(stream)
        stream.cancel()
    assert event.type == pods_pb2.MODIFIED
    pod = decode(event.pod)
    assert pod.metadata.uid == trainer.metadata.uid
    health = pod.status.containerStatuses[0].allocatedResourcesStatus[0].resources[0]
    assert (health.resourceID, health.health) == (device, "Unhealthy")


def test_deleted_carries_only_name_namespace_and_uid() -> None:
    """A pod deleted is a DELETED event whose pod has its name, namespace and UID alone."""
    with pods_api_kubelet() as sim, pods_channel(sim) as ch:
        stream = watch(PodsStub(ch), timeout=10)
        debug = next(p for p in initial_sync(stream) if p.metadata.name == "debug")
        assert sim.remove("default", "debug")
        event = next(stream)
        stream.cancel()
    assert event.type == pods_pb2.DELETED
    pod = decode(event.pod)
    assert [f.name for f, _ in pod.ListFields()] == ["metadata"]
    fields = {f.name: v for f, v in pod.metadata.ListFields()}
    assert fields == {"name": "debug", "namespace": "default", "uid": debug.metadata.uid}


def test_added_and_a_new_uid_for_a_pod_created_again_under_its_name() -> None:
    """A pod re-created under the same name is DELETED, then ADDED with a new UID."""
    with pods_api_kubelet() as sim, pods_channel(sim) as ch:
        stream = watch(PodsStub(ch), timeout=10)
        first = next(p for p in initial_sync(stream) if p.metadata.name == "debug")
        sim.remove("default", "debug")
        assert next(stream).type == pods_pb2.DELETED
        sim.admit(PodSpec.of("default", "debug", ContainerSpec.of("sh")))
        event = next(stream)
        stream.cancel()
    assert event.type == pods_pb2.ADDED
    again = decode(event.pod)
    assert again.metadata.name == "debug"
    assert again.metadata.uid != first.metadata.uid


def test_every_method_fails_precondition_until_the_kubelet_has_synced() -> None:
    """Before the kubelet has synced, List, Get and Watch answer FAILED_PRECONDITION."""
    with pods_api_kubelet(warmup=60.0) as sim, pods_channel(sim) as ch:
        stub = PodsStub(ch)
        calls = [
            lambda: stub.ListPods(pods_pb2.ListPodsRequest(), timeout=10),
            lambda: stub.GetPod(pods_pb2.GetPodRequest(podUID="x"), timeout=10),
            lambda: list(watch(stub, timeout=10)),
        ]
        for call in calls:
            with pytest.raises(grpc.RpcError) as err:
                call()
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert err.value.details() == INITIALIZING


def test_get_pod_by_uid_and_not_found() -> None:
    """GetPod answers the pod of a UID, NOT_FOUND for an unknown one."""
    with pods_api_kubelet() as sim, pods_channel(sim) as ch:
        api = sim.pods_api
        assert api is not None
        uid, (namespace, name) = next(iter(api.uids().items()))
        stub = PodsStub(ch)
        pod = decode(stub.GetPod(pods_pb2.GetPodRequest(podUID=uid), timeout=10).pod)
        assert (pod.metadata.namespace, pod.metadata.name) == (namespace, name)
        with pytest.raises(grpc.RpcError) as err:
            stub.GetPod(pods_pb2.GetPodRequest(podUID="no-such-uid"), timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_list_and_get_share_a_token_bucket_of_burst_ten() -> None:
    """Within one instant 10 List/Get calls pass, the 11th is RESOURCE_EXHAUSTED; Watch is
    not limited; the bucket refills at 100 per second."""
    now = [1000.0]
    with kubelet_root() as root:
        api = SimPodsApi(Node.from_scenario(SCENARIO), root / "p.sock", clock=lambda: now[0])
        with api, grpc.insecure_channel(api.target) as ch:
            stub = PodsStub(ch)
            for i in range(10):
                if i % 2:
                    stub.ListPods(pods_pb2.ListPodsRequest(), timeout=10)
                else:
                    uid = next(iter(api.uids()))
                    stub.GetPod(pods_pb2.GetPodRequest(podUID=uid), timeout=10)
            with pytest.raises(grpc.RpcError) as err:
                stub.ListPods(pods_pb2.ListPodsRequest(), timeout=10)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert err.value.details() == RATE_LIMITED
            stream = watch(stub, timeout=10)
            assert len(initial_sync(stream)) == SCENARIO.pod_count
            stream.cancel()
            now[0] += 0.015  # one and a half tokens back
            stub.ListPods(pods_pb2.ListPodsRequest(), timeout=10)
            with pytest.raises(grpc.RpcError):
                stub.ListPods(pods_pb2.ListPodsRequest(), timeout=10)
            assert api.rate_limited_count == 2


def test_a_watcher_that_falls_behind_is_dropped_with_resource_exhausted() -> None:
    """A watcher that stops reading while pods change gets what was buffered, then
    RESOURCE_EXHAUSTED; a new watch sees every pod."""
    big = {"blob": "x" * 65_536}  # each event is big, so gRPC's windows fill quickly
    with pods_api_kubelet() as sim, pods_channel(sim) as ch:
        api = sim.pods_api
        assert api is not None
        stream = watch(PodsStub(ch), timeout=60)
        initial_sync(stream)
        for i in range(300):
            sim.admit(PodSpec.of("load", f"p{i}", ContainerSpec.of("c"), labels=big))
        wait_until(lambda: len(api.uids()) == SCENARIO.pod_count + 300, timeout=60)
        received = 0
        with pytest.raises(grpc.RpcError) as err:
            for _event in stream:
                received += 1
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert err.value.details() == WATCHER_DROPPED
        assert received < 300
        fresh = watch(PodsStub(ch), timeout=60)
        assert len(initial_sync(fresh)) == SCENARIO.pod_count + 300
        fresh.cancel()


def test_drop_watchers_ends_every_open_watch() -> None:
    """``drop_watchers`` ends every stream with RESOURCE_EXHAUSTED, as a slow one's."""
    with pods_api_kubelet() as sim, pods_channel(sim) as ch:
        api = sim.pods_api
        assert api is not None
        stream = watch(PodsStub(ch), timeout=10)
        initial_sync(stream)
        wait_until(lambda: api.watcher_count == 1)
        assert api.drop_watchers() == 1
        with pytest.raises(grpc.RpcError) as err:
            next(stream)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        wait_until(lambda: api.watcher_count == 0)


def test_restart_recreates_the_socket_and_keeps_the_pods() -> None:
    """A kubelet restart ends open watches and re-creates the socket (a new file); the
    pods keep their UIDs."""
    with pods_api_kubelet() as sim:
        path = str(sim.pods_api_socket_path)
        before = file_identity(path)
        with pods_channel(sim) as ch:
            stream = watch(PodsStub(ch), timeout=10)
            uids = {p.metadata.uid for p in initial_sync(stream)}
            sim.restart(warmup=0.0)
            with pytest.raises(grpc.RpcError):
                next(stream)
        assert file_identity(path) not in (None, before)
        with pods_channel(sim) as ch:
            stream = watch(PodsStub(ch), timeout=10)
            assert {p.metadata.uid for p in initial_sync(stream)} == uids
            stream.cancel()


def test_gate_off_serves_no_socket() -> None:
    """With the PodsAPI gate off there is no Pods API socket at all."""
    with pods_api_kubelet(pods_api=False) as sim:
        assert sim.pods_api is None
        assert not sim.pods_api_socket_path.exists()


def test_stop_leaves_a_stale_socket() -> None:
    """A stopped kubelet's Pods API socket stays on disk; calls get UNAVAILABLE."""
    with pods_api_kubelet() as sim:
        sim.stop()
        assert sim.pods_api_socket_path.exists()
        with pods_channel(sim) as ch, pytest.raises(grpc.RpcError) as err:
            PodsStub(ch).ListPods(pods_pb2.ListPodsRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("minor", "gate", "served"),
    [(35, True, False), (36, False, False), (36, True, True), (37, False, True)],
)
def test_the_gate_by_kubelet_version(minor: int, gate: bool, served: bool) -> None:
    """PodsAPI: absent before 1.36, opt-in in 1.36, on by default from 1.37."""
    assert KubeletBehaviour.of_version(minor, pods_api_gate=gate).pods_api is served


def test_scenario_gives_labels_owner_and_the_gate() -> None:
    """A scenario file sets a pod's labels and owner kind and the kubelet's gate."""
    sc = parse_scenario(
        """
        [kubelet]
        pods_api = true
        [node]
        numa_nodes = 1
        cpus_per_numa_node = 2
        [[pods]]
        namespace = "batch"
        name = "nightly"
        naming = "generated"
        owner = "Job"
        labels = { team = "data", "app.kubernetes.io/name" = "etl" }
        """
    )
    assert sc.kubelet.pods_api
    (pod,) = sc.pods
    assert (pod.owner, dict(pod.labels)) == (
        "Job",
        {"team": "data", "app.kubernetes.io/name": "etl"},
    )
    with pytest.raises(ScenarioError, match=r"pods\[0\]\.labels\.team"):
        parse_scenario(
            "[node]\nnuma_nodes = 1\ncpus_per_numa_node = 2\n"
            '[[pods]]\nnamespace = "a"\nname = "b"\nlabels = { team = 1 }'
        )


def test_sim_kubelets_side_by_side_get_pods_api_sockets_of_their_own() -> None:
    """A socket outside a ``pod-resources`` directory gets a Pods API directory of its own."""
    with kubelet_root() as root:
        one = SimKubelet(SCENARIO, root / "kubelet-0.sock")
        two = SimKubelet(SCENARIO, root / "kubelet-1.sock")
        assert one.pods_api_socket_path == root / "kubelet-0-pods-api" / "pods-api.sock"
        assert two.pods_api_socket_path == root / "kubelet-1-pods-api" / "pods-api.sock"


def test_a_pods_api_path_too_long_is_not_served_and_the_kubelet_runs() -> None:
    """When the Pods API path is too long for a unix socket the kubelet still serves
    pod-resources, without the Pods API, and says so."""
    with kubelet_root() as root:
        deep = root / ("d" * (100 - len(str(root)) - len("/k.sock") - 1))
        sim = SimKubelet(SCENARIO, deep / "k.sock")
        sim.set_behaviour(pods_api=True)
        with structlog.testing.capture_logs() as logs, sim:
            assert sim.running
            assert sim.pods_api is None
        assert "sim_pods_api_not_served" in [e["event"] for e in logs]
