"""The Pods API reader against the simulated kubelet, over real gRPC on real unix sockets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from podres_exporter.core.podmeta import OwnerRef, PodDirectory, ResourceHealth, Route
from podres_exporter.daemon.backoff import NO_JITTER, Backoff
from podres_exporter.sources.podsapi import Pacing, PodsApiSource, State
from podres_exporter.sources.podsapi_wire import LABELS_OVER_LIMIT, TEXT_CUT, PodsApiLimits
from podres_sim import ContainerSpec, PodSpec, SimKubelet
from podres_sim.kubelet.node import Node
from podres_sim.kubelet.podsapi import SimPodsApi
from tests.sim.kubelet.podsapi_fixture import (
    GPU,
    SCENARIO,
    decode,
    kubelet_root,
    pods_api_kubelet,
)
from tests.support import wait_until

FAST = Pacing(backoff=Backoff(initial_s=0.02, max_s=0.1, jitter=NO_JITTER), recheck_s=0.05)


@pytest.fixture
def sources() -> Iterator[Any]:
    """Start PodsApiSources on a socket; every one stopped at the end."""
    started: list[PodsApiSource] = []

    def make(path: Path | str, **kwargs: Any) -> PodsApiSource:
        source = PodsApiSource(str(path), pacing=kwargs.pop("pacing", FAST), **kwargs)
        started.append(source)
        source.start()
        return source

    yield make
    for s in started:
        s.stop()


def _synced(source: PodsApiSource, watches: int = 1) -> PodDirectory:
    def ready() -> PodDirectory | None:
        d = source.current()
        ok = d is not None and d.synced and not d.stale and source.watches >= watches
        return d if ok else None

    directory: PodDirectory = wait_until(ready)
    return directory


def _served(sim: SimKubelet) -> dict[str, Any]:
    """What the simulator serves now: UID -> the decoded v1.Pod."""
    api = sim.pods_api
    assert api is not None
    return {uid: decode(api.pod_bytes(uid)) for uid in api.uids()}


def _same_as_served(directory: PodDirectory, sim: SimKubelet) -> None:
    served = _served(sim)
    assert set(directory.pods) == set(served)
    for uid, pod in served.items():
        meta = directory.pods[uid]
        assert (meta.namespace, meta.name, meta.uid) == (
            pod.metadata.namespace,
            pod.metadata.name,
            pod.metadata.uid,
        )
        assert meta.route == Route.PODS_API
        assert (meta.phase, meta.qos_class) == (pod.status.phase, pod.status.qosClass)
        assert dict(meta.labels) == dict(pod.metadata.labels)
        assert meta.owners == tuple(
            OwnerRef(o.kind, o.name, o.controller) for o in pod.metadata.ownerReferences
        )


def test_every_pod_is_what_the_kubelet_serves(sources: Any) -> None:
    """UID, namespace, name, phase, QoS, owners and labels equal the simulator's pods."""
    with pods_api_kubelet() as sim:
        source = sources(sim.pods_api_socket_path)
        directory = _synced(source)
        _same_as_served(directory, sim)
        assert len(directory.pods) == SCENARIO.pod_count
        assert source.state == State.SYNCED
        owners = {m.name.split("-")[0]: m.owners for m in directory.pods.values()}
        assert owners["trainer"] == (OwnerRef("StatefulSet", "trainer", True),)
        assert owners["report"] == (OwnerRef("Job", "report", True),)
        assert owners["debug"] == ()


def test_changes_follow_the_watch(sources: Any) -> None:
    """A pod added, a pod deleted and a device turning unhealthy reach the directory."""
    with pods_api_kubelet() as sim:
        source = sources(sim.pods_api_socket_path)
        _synced(source)
        sim.admit(PodSpec.of("new", "late", ContainerSpec.of("c"), labels={"team": "x"}))
        sim.remove("default", "debug")
        sim.set_device_health(GPU, "gpu-0", healthy=False)

        def followed() -> bool:
            d = source.current()
            assert d is not None
            names = {m.name for m in d.pods.values()}
            health = [h for m in d.pods.values() for hs in m.resource_health.values() for h in hs]
            return (
                "late" in names
                and "debug" not in names
                and ResourceHealth(GPU, "gpu-0", "Unhealthy") in health
            )

        wait_until(followed)
        directory = source.current()
        assert directory is not None
        _same_as_served(directory, sim)


def test_a_watcher_dropped_by_the_kubelet_recovers_without_losing_a_pod(sources: Any) -> None:
    """RESOURCE_EXHAUSTED ends the stream; the source logs it, watches again after its
    backoff and holds every pod; it never calls ListPods or GetPod."""
    with pods_api_kubelet() as sim, structlog.testing.capture_logs() as logs:
        api = sim.pods_api
        assert api is not None
        source = sources(sim.pods_api_socket_path)
        before = _synced(source)
        wait_until(lambda: api.watcher_count == 1)
        api.drop_watchers()
        after = _synced(source, watches=2)
        assert set(after.pods) == set(before.pods)
        _same_as_served(after, sim)
        assert api.request_count["ListPods"] == api.request_count["GetPod"] == 0
    events = [e["event"] for e in logs if e["event"].startswith("pods_api_")]
    assert events == ["pods_api_syncing", "pods_api_synced", "pods_api_dropped", "pods_api_synced"]
    dropped = next(e for e in logs if e["event"] == "pods_api_dropped")
    assert dropped["code"] == "RESOURCE_EXHAUSTED"


def test_while_the_kubelet_is_down_the_last_pods_are_served_stale(sources: Any) -> None:
    """A stopped kubelet (stale socket): the last good directory, marked stale."""
    with pods_api_kubelet() as sim:
        source = sources(sim.pods_api_socket_path)
        good = _synced(source)
        sim.stop()
        stale = wait_until(lambda: (d := source.current()) is not None and d.stale and d)
        assert stale.pods == good.pods
        assert source.state == State.DROPPED


def test_a_pod_deleted_while_disconnected_is_gone_after_the_relist(sources: Any) -> None:
    """A fresh watch replaces the pods: one deleted while the kubelet was down is gone,
    one added meanwhile is there."""
    with pods_api_kubelet() as sim:
        source = sources(sim.pods_api_socket_path)
        _synced(source)
        sim.stop()
        wait_until(lambda: source.state == State.DROPPED)
        sim.remove("default", "debug")
        sim.admit(PodSpec.of("new", "meanwhile", ContainerSpec.of("c")))
        sim.start()
        directory = _synced(source, watches=2)
        names = {m.name for m in directory.pods.values()}
        assert "debug" not in names
        assert "meanwhile" in names
        _same_as_served(directory, sim)


def test_a_kubelet_restart_is_followed(sources: Any) -> None:
    """A restart re-creates the socket and answers FAILED_PRECONDITION while it warms
    up; the source waits it out and syncs again, the UIDs unchanged."""
    with pods_api_kubelet() as sim, structlog.testing.capture_logs() as logs:
        source = sources(sim.pods_api_socket_path)
        before = _synced(source)
        sim.restart(warmup=0.3)
        after = _synced(source, watches=2)
        assert set(after.pods) == set(before.pods)
    assert "pods_api_initializing" in [e["event"] for e in logs]


def test_the_watchdog_follows_a_socket_recreated_under_an_open_stream(sources: Any) -> None:
    """A new server bound at the path while the old one still streams: the watchdog
    cancels the old stream and the source reads the new kubelet's pods."""
    with kubelet_root() as root:
        path = root / "pods-api.sock"
        other = SCENARIO.__class__(node=SCENARIO.node, pods=SCENARIO.pods[:1], name="other")
        old = SimPodsApi(Node.from_scenario(SCENARIO), path).start()
        new = SimPodsApi(Node.from_scenario(other), root / "new.sock")
        try:
            source = sources(path)
            assert len(_synced(source).pods) == SCENARIO.pod_count
            new.start()
            (root / "new.sock").rename(path)  # old keeps serving its open stream
            directory = _synced(source, watches=2)
            assert set(directory.pods) == set(new.uids())
        finally:
            old.stop(remove_socket=False)
            new.stop(remove_socket=False)


def test_gate_off_is_none_until_the_socket_appears(sources: Any) -> None:
    """No socket (the gate off): None, looked for again; a later kubelet with the gate
    on is found without any setting."""
    with pods_api_kubelet(pods_api=False) as sim:
        source = sources(sim.pods_api_socket_path)
        wait_until(lambda: source.state == State.ABSENT)
        assert source.current() is None
        sim.stop()
        sim.set_behaviour(pods_api=True)
        sim.start()
        _synced(source)


def test_a_socket_without_the_service_is_none(sources: Any) -> None:
    """A socket that answers WatchPods UNIMPLEMENTED (here the pod-resources one): None."""
    with pods_api_kubelet() as sim:
        source = sources(sim.socket_path)
        wait_until(lambda: source.state == State.NOT_SERVED)
        assert source.current() is None


def test_hostile_pods_are_bounded_over_the_wire(sources: Any) -> None:
    """A pod with 10,000 labels and a huge one is held within the limits, each kind of
    excess logged once."""
    hostile = {f"k{i:05d}": "v" for i in range(10_000)} | {"big": "x" * 100_000}
    with pods_api_kubelet() as sim, structlog.testing.capture_logs() as logs:
        sim.admit(PodSpec.of("evil", "labels", ContainerSpec.of("c"), labels=hostile))
        source = sources(sim.pods_api_socket_path, limits=PodsApiLimits(labels=100))
        directory = _synced(source)
        (evil,) = [m for m in directory.pods.values() if m.namespace == "evil"]
        assert len(evil.labels) == 100
        assert evil.labels["big"] == "x" * 63 + "…(+99937 chars)"
        assert source.anomalies == {LABELS_OVER_LIMIT: 10_001 - 100, TEXT_CUT: 1}
    bounded = [e for e in logs if e["event"] == "pods_api_pod_bounded"]
    assert sorted(e["kind"] for e in bounded) == [LABELS_OVER_LIMIT, TEXT_CUT]


def test_a_message_over_the_limit_keeps_the_source_alive(sources: Any) -> None:
    """A pod bigger than the message limit fails the stream (never memory): the source
    retries, serves no half-synced answer, and syncs once the pod is gone."""
    with pods_api_kubelet() as sim:
        sim.admit(PodSpec.of("evil", "huge", ContainerSpec.of("c"), labels={"x": "y" * 300_000}))
        source = sources(sim.pods_api_socket_path, limits=PodsApiLimits(message_bytes=65_536))
        wait_until(lambda: source.state == State.DROPPED)
        directory = source.current()
        assert directory is not None
        assert not directory.synced
        assert directory.pods == {}
        sim.remove("evil", "huge")
        assert len(_synced(source).pods) == SCENARIO.pod_count


def test_stop_cancels_the_open_stream() -> None:
    """``stop`` returns with the stream cancelled and the threads ended."""
    with pods_api_kubelet() as sim:
        api = sim.pods_api
        assert api is not None
        source = PodsApiSource(str(sim.pods_api_socket_path), pacing=FAST)
        source.start()
        _synced(source)
        source.stop()
        assert source.state == State.STOPPED
        wait_until(lambda: api.watcher_count == 0)
