"""The kubelet client's conversion cache: an unchanged pod is not converted again.

Real gRPC on a unix socket: the simulated kubelet, or a server answering generated
messages (the generators of the property tests), swapped between reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podres_exporter._generated.podresources.v1 import api_pb2 as v1
from podres_exporter.core.limits import Trim, merge_duplicates
from podres_exporter.core.model import PodAlloc
from podres_exporter.sources.kubelet import KubeletClient
from podres_exporter.sources.kubelet_wire import PodCache, allocatable_from_wire, pod_from_v1
from podres_sim import SimKubelet
from tests.exporter.kubelet_answers import PODS, Kubelet, Node, Pod, answer_of, any_node

MakeSim = Callable[..., SimKubelet]


@pytest.fixture(scope="module")
def shared_client(kubelet: tuple[Kubelet, str]) -> Iterator[KubeletClient]:
    """One client for every generated example: its cache sees answer after answer."""
    client = KubeletClient(kubelet[1])
    yield client
    client.close()


def uncached(node: Node) -> tuple[tuple[PodAlloc, ...], Any]:
    """What converting the served answer afresh gives: the pods (copies of one merged, as
    a reading merges them) and the allocatable."""
    answer = answer_of(node)
    pods = v1.ListPodResourcesResponse.FromString(answer.pods).pod_resources
    allocatable = None
    if answer.allocatable is not None:
        message = v1.AllocatableResourcesResponse.FromString(answer.allocatable)
        allocatable = allocatable_from_wire(message)
    return merge_duplicates([pod_from_v1(p) for p in pods])[0], allocatable


def test_unchanged_pods_are_the_same_objects(make_sim: MakeSim) -> None:
    """A second reading of an unchanged node shares every pod and the allocatable."""
    sim = make_sim("demo")
    client = KubeletClient(str(sim.socket_path))
    first = client.read()
    second = client.read()
    client.close()
    assert len(second.pods) == len(first.pods) >= 30
    # The kubelet lists its pods in no set order (the simulator shuffles them too).
    earlier = {(p.namespace, p.name): p for p in first.pods}
    assert all(earlier[p.namespace, p.name] is p for p in second.pods)
    assert first.allocatable is not None and second.allocatable is first.allocatable


def test_a_departed_pod_leaves_and_the_others_stay(make_sim: MakeSim) -> None:
    """A removed pod is gone from the reading and the cache; the rest are reused."""
    sim = make_sim("demo")
    client = KubeletClient(str(sim.socket_path))
    first = client.read()
    gone = first.pods[0]
    sim.node.remove(gone.namespace, gone.name)
    second = client.read()
    client.close()
    assert gone not in second.pods
    assert len(second.pods) == len(first.pods) - 1
    assert all(any(p is q for q in first.pods) for p in second.pods)


def test_a_changed_pod_is_converted_again(kubelet: tuple[Kubelet, str]) -> None:
    """Only the pod whose message changed is a new object, and it says what changed."""
    server_side, socket = kubelet
    pods = tuple(Pod("ns", f"p{i}", ()) for i in range(3))
    server_side.set(answer_of(Node({0: 0}, pods, (0,))))
    client = KubeletClient(socket)
    first = client.read()
    changed = Pod("ns", "p1", (), cpus=(0,))
    server_side.set(answer_of(Node({0: 0}, (pods[0], changed, pods[2]), (0, 1))))
    second = client.read()
    client.close()
    assert second.pods[0] is first.pods[0] and second.pods[2] is first.pods[2]
    assert second.pods[1] is not first.pods[1]
    assert second.pods[1].cpu_ids == frozenset({0})
    assert second.allocatable is not first.allocatable
    assert second.allocatable is not None and second.allocatable.cpu_ids == frozenset({0, 1})


def test_pod_cache_keeps_only_the_last_answer() -> None:
    """Each answer replaces the cache: what left is dropped, an unchanged pod not converted."""
    converted: list[str] = []

    def convert(message: Any, trim: Trim) -> PodAlloc:
        converted.append(message.name)
        return pod_from_v1(message, trim)

    a, b, c = (v1.PodResources(namespace="ns", name=n) for n in "abc")
    cache = PodCache()
    first = cache.convert([a, b, c], convert)
    assert converted == ["a", "b", "c"] and len(cache) == 3
    second = cache.convert([a, c], convert)
    assert converted == ["a", "b", "c"] and len(cache) == 2
    assert second == (first[0], first[2]) and second[0] is first[0]
    cache.convert([b], convert)
    assert converted == ["a", "b", "c", "b"] and len(cache) == 1
    # Another conversion (the API version changed) does not reuse the other's objects.
    other = cache.convert([b], lambda m, _: PodAlloc(m.namespace, "other", ()))
    assert other[0].name == "other" and converted == ["a", "b", "c", "b"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    any_node(),
    any_node(),
    st.lists(PODS, max_size=3),
)
def test_cached_readings_equal_fresh_conversions(
    kubelet: tuple[Kubelet, str],
    shared_client: KubeletClient,
    before: Node,
    after: Node,
    extra: list[Pod],
) -> None:
    """Whatever was read before, a reading equals converting its answer afresh."""
    server_side, _ = kubelet
    # Some of the earlier pods stay, so that cached objects are reused; GetAllocatable-
    # Resources is always served (a client stops asking once it is not).
    after = Node(
        after.online,
        (*before.pods[: len(before.pods) // 2], *after.pods, *extra),
        after.allocatable_cpus or (),
        after.allocatable_devices,
        after.allocatable_memory,
    )
    before = Node(before.online, before.pods, before.allocatable_cpus or ())
    server_side.set(answer_of(before))
    shared_client.read()
    server_side.set(answer_of(after))
    reading = shared_client.read()
    pods, allocatable = uncached(after)
    assert reading.pods == pods
    assert reading.allocatable == allocatable
