"""A kubelet answer costs what the limits allow, not what it lists: real gRPC on a unix
socket, a server answering hostile but legal messages."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from podres_exporter._generated.podresources.v1 import api_pb2 as v1
from podres_exporter.core.accounting import account
from podres_exporter.core.limits import AnswerLimits
from podres_exporter.core.model import NodeTopology
from podres_exporter.exporter.poller import Poller, Store
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.sources.kubelet import KubeletClient
from tests.exporter.kubelet_answers import Answer, Kubelet

TOPO = NodeTopology(frozenset(range(4)))


def _pod(
    name: str, *, devices: int = 1, cpus: tuple[int, ...] = (), containers: int = 1
) -> v1.PodResources:
    pod = v1.PodResources(namespace="ns", name=name)
    for c in range(containers):
        container = pod.containers.add(name=f"c{c}", cpu_ids=list(cpus))
        if devices:
            container.devices.add(
                resource_name="example.com/dev", device_ids=[f"d{i}" for i in range(devices)]
            )
    return pod


def _serve(kubelet: Kubelet, pods: list[v1.PodResources], cpus: int = 4) -> None:
    listed = v1.ListPodResourcesResponse(pod_resources=pods)
    alloc = v1.AllocatableResourcesResponse(cpu_ids=list(range(cpus)))
    kubelet.set(Answer(listed.SerializeToString(), alloc.SerializeToString()))


@pytest.fixture
def client(kubelet: tuple[Kubelet, str]) -> Iterator[KubeletClient]:
    """A client with small limits against the module's server."""
    c = KubeletClient(
        kubelet[1], limits=AnswerLimits(pods=3, containers=2, devices=4, cpus=8, entries=100)
    )
    yield c
    c.close()


def test_fifty_copies_of_a_pod_are_one_pod_and_an_anomaly(kubelet: tuple[Kubelet, str]) -> None:
    """A pod listed 50 times is read as one pod; 49 copies counted as duplicate_pod."""
    _serve(kubelet[0], [_pod("p", cpus=(1,))] * 50)
    c = KubeletClient(kubelet[1])
    try:
        r = c.read()
    finally:
        c.close()
    assert [p.name for p in r.pods] == ["p"]
    acc = account(r, TOPO)
    assert acc.pods == 1 and acc.containers == 1
    assert acc.anomalies["duplicate_pod"] == 49
    assert acc.anomalies["cpu_listed_by_several_containers"] == 0


def test_devices_over_the_limit_are_trimmed_counted_and_logged_once(
    kubelet: tuple[Kubelet, str], client: KubeletClient
) -> None:
    """A container listing 10,000 device ids keeps 4; the rest are an anomaly, logged once."""
    _serve(kubelet[0], [_pod("p", devices=10_000)])
    with capture_logs() as logs:
        first = client.read()
        second = client.read()
    (container,) = first.pods[0].containers
    assert [d.device_id for d in container.devices] == ["d0", "d1", "d2", "d3"]
    assert first.dropped == {"devices_over_limit": 9_996} == second.dropped
    assert account(first, TOPO).anomalies["devices_over_limit"] == 9_996
    trimmed = [e for e in logs if e["event"] == "kubelet_answer_trimmed"]
    assert len(trimmed) == 1 and trimmed[0]["dropped"] == {"devices_over_limit": 9_996}
    _serve(kubelet[0], [_pod("p")])
    with capture_logs() as logs:
        whole = client.read()
    assert not whole.dropped and [e["event"] for e in logs] == ["kubelet_answer_whole"]


def test_pods_containers_and_cpus_over_their_limits(
    kubelet: tuple[Kubelet, str], client: KubeletClient
) -> None:
    """Pods past the limit, containers past a pod's, CPU ids past a set's are left out."""
    _serve(
        kubelet[0],
        [_pod(f"p{i}", devices=0, containers=5, cpus=tuple(range(20))) for i in range(6)],
        cpus=50,
    )
    r = client.read()
    assert [p.name for p in r.pods] == ["p0", "p1", "p2"]
    assert all(len(p.containers) == 2 for p in r.pods)
    assert all(len(c.cpu_ids) == 8 for p in r.pods for c in p.containers)
    assert r.allocatable is not None and r.allocatable.cpu_ids == frozenset(range(8))
    assert r.dropped == {
        "pods_over_limit": 3,
        "containers_over_limit": 9,
        "cpus_over_limit": 6 * 12 + 42,
    }


def test_the_answers_budget_bounds_the_whole(kubelet: tuple[Kubelet, str]) -> None:
    """Past the answer's budget of entries later pods keep nothing more, cached or not;
    a pod kept whole is reused from the last answer, a trimmed one converted again."""
    _serve(kubelet[0], [_pod(f"p{i}", devices=4, containers=2) for i in range(3)])
    c = KubeletClient(kubelet[1], limits=AnswerLimits(containers=2, devices=4, entries=20))
    try:
        first, second = c.read(), c.read()
    finally:
        c.close()
    for r in (first, second):
        kept = [sum(len(c.devices) for c in p.containers) for p in r.pods]
        assert kept == [8, 5, 0]
        assert r.dropped == {"entries_over_limit": 5}
    assert second.pods[0] is first.pods[0] and second.pods[1] is not first.pods[1]


def test_an_answer_over_the_size_limit_keeps_the_last_good_view(
    kubelet: tuple[Kubelet, str],
) -> None:
    """An answer over --kubelet-max-message-size is refused: the last good view is served,
    marked stale (kubelet_up 0, the error named), until a good answer comes back."""
    _serve(kubelet[0], [_pod("p")])
    c = KubeletClient(kubelet[1], max_message_bytes=64 * 1024)
    store = Store()
    poller = Poller(NodeReader(c, lambda: TOPO), store, rng=random.Random(0))
    try:
        poller.poll_once()
        _serve(kubelet[0], [_pod("p", devices=20_000)])  # some 200 KiB
        poller.poll_once()
        view = store.current()
        assert view is not None and not view.snapshot.kubelet_up
        assert "--kubelet-max-message-size" in (view.snapshot.kubelet_error or "")
        assert view.accounting is not None and view.accounting.pods == 1
        assert view.snapshot.reading is not None
        assert [len(c.devices) for c in view.snapshot.reading.pods[0].containers] == [1]
    finally:
        c.close()
