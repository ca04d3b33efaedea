"""The reader's pod identity: the routes read beside the kubelet, into the view and series."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from podres_exporter.core.accounting import LIVENESS_ANOMALY
from podres_exporter.core.model import (
    ApiVersion,
    ContainerAlloc,
    DeviceRef,
    KubeletReading,
    NodeTopology,
    PodAlloc,
    PodLiveness,
    RequestStats,
    Support,
)
from podres_exporter.core.podlabels import NOTHING
from podres_exporter.core.podmeta import PodDirectory, PodMeta, Route
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.sources.poddirectory import IdentityReader
from podres_sim import SimKubelet
from podres_sim.host.simhost import pod_uid
from podres_sim.kubelet.podsapi_wire import owner_of
from tests.support import exporter_settings, wait_until

GPU = DeviceRef("nvidia.com/gpu", "GPU-0", (0,))


class _Scripted:
    """A kubelet whose List lists a finished pod beside the one now holding its GPU."""

    socket_path = "/scripted.sock"

    def read(self) -> KubeletReading:
        new = PodAlloc("ns", "new", (ContainerAlloc("c", devices=(GPU,)),))
        old = PodAlloc("ns", "old", (ContainerAlloc("c", devices=(GPU,)),))
        return KubeletReading(ApiVersion.V1, (old, new), None, Support.DISABLED, 0.0)

    def get_pod(self, namespace: str, name: str) -> PodAlloc | None:
        return None

    def stats(self) -> RequestStats:
        return RequestStats()

    def release(self) -> None:
        pass


class _Fixed:
    """A route that always gives the same answer."""

    def __init__(self, answer: PodDirectory) -> None:
        self.answer = answer

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def current(self) -> PodDirectory | None:
        return self.answer


def test_a_routes_phase_settles_a_device_the_trees_cannot() -> None:
    """The log and cgroup trees say nothing (undecided), the Pods API says ``old``
    Succeeded: the GPU is ``new``'s alone, with no undecided anomaly."""
    pods = {
        "u-old": PodMeta("ns", "old", "u-old", Route.PODS_API, phase="Succeeded"),
        "u-new": PodMeta("ns", "new", "u-new", Route.PODS_API, phase="Running"),
    }
    api = _Fixed(PodDirectory(Route.PODS_API, MappingProxyType(pods)))
    blind = PodLiveness(None, None)
    topo = NodeTopology(frozenset({0}))

    def view(identity: IdentityReader | None) -> Any:
        reader = NodeReader(_Scripted(), lambda: topo, liveness=lambda: blind, identity=identity)
        return reader.view(reader.observe(), generation=1)

    settled = view(IdentityReader({Route.PODS_API: api}, NOTHING))
    assert [d.holder.pod for d in settled.accounting.container_devices] == ["new"]
    assert settled.accounting.anomalies[LIVENESS_ANOMALY] == 0
    assert settled.snapshot.identity is not None
    before = view(None)  # the trees alone cannot tell: both hold it, undecided
    assert sorted(d.holder.pod for d in before.accounting.container_devices) == ["new", "old"]
    assert before.accounting.anomalies[LIVENESS_ANOMALY] == 1


def test_the_reader_serves_every_pods_uid_from_the_log_directories(
    make_sim: Callable[..., SimKubelet],
) -> None:
    """With no Pods API, the log directories give each listed pod's UID on podres_pod_info,
    and --pod-labels with nothing to read gives label-less series."""
    sim = make_sim("minimal")
    settings = exporter_settings(sim, pod_labels=("team", "app.kubernetes.io/*"))
    reader = NodeReader.from_settings(settings, gpu_backend=sim.host.gpu_backend())  # type: ignore[attr-defined]
    try:
        view = reader.view(reader.observe(), generation=1)
        families = {f.name: f for f in reader.families(view, "0")}
    finally:
        reader.close()
    info = {
        (s.labels["namespace"], s.labels["pod"]): s.labels["uid"]
        for s in families["podres_pod"].samples
    }
    assert info == {(p.namespace, p.name): pod_uid(p.namespace, p.name) for p in sim.node.pods}
    up = {s.labels["route"]: s.value for s in families["podres_pod_identity_source_up"].samples}
    assert up["log-dirs"] == 1.0
    assert len(families["podres_pod_labels"].samples) == len(info)


def _scenario_owner(pod: Any, node: str) -> tuple[str, str] | None:
    """The workload the scenario gives a pod: its controlling owner, a Deployment's
    ReplicaSet resolved to the Deployment (named as in the scenario)."""
    owner = owner_of(pod, node)
    if owner is None:
        return None
    if owner[0] == "ReplicaSet":
        return ("Deployment", pod.spec.name)
    return owner


def test_on_a_kubelet_with_the_pods_api_every_pods_uid_owner_and_labels_are_the_sims(
    make_sim: Callable[..., SimKubelet],
) -> None:
    """The demo serves its Pods API: each pod's UID, workload, phase and allowed labels on
    the info series equal what the simulated kubelet serves, with no API server."""
    sim = make_sim("demo")
    settings = exporter_settings(sim, pod_labels=("team", "app.kubernetes.io/*"))
    reader = NodeReader.from_settings(settings, gpu_backend=sim.host.gpu_backend())  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + 10
        seen = reader.observe()
        while not _synced(seen) and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = reader.observe()
        view = reader.view(seen, generation=1)
        families = {f.name: f for f in reader.families(view, "0")}
    finally:
        reader.close()
    assert _synced(seen)
    pods = {(p.namespace, p.name): p for p in sim.node.pods}
    info = {
        (s.labels["namespace"], s.labels["pod"]): s.labels for s in families["podres_pod"].samples
    }
    assert set(info) == set(pods)
    for key, labels in info.items():
        pod = pods[key]
        assert labels["uid"] == pod.uid
        owner = _scenario_owner(pod, sim.node.spec.name)
        got = (labels["owner_kind"], labels["owner_name"]) if "owner_kind" in labels else None
        assert got == owner, key
    assert info[("ml-inference", pods_named(pods, "vllm-llama3-8b"))]["owner_kind"] == "Deployment"
    assert "owner_kind" not in info[("research", "jupyter-alice")]  # a bare pod
    labelled = {
        (s.labels["namespace"], s.labels["pod"]): s.labels
        for s in families["podres_pod_labels"].samples
    }
    for key, pod in pods.items():
        expected = {
            f"label_{k.replace('.', '_').replace('/', '_')}": v for k, v in pod.spec.labels.items()
        }
        served = {k: v for k, v in labelled[key].items() if k.startswith("label_")}
        assert served == expected, key
    # Health comes with the Pods API; only a device the kubelet does not call Healthy has a
    # series, and every held device of the demo is healthy.
    assert families["podres_container_device_health"].samples == []


def pods_named(pods: Mapping[tuple[str, str], Any], prefix: str) -> str:
    """The name of the first pod whose name starts with ``prefix``."""
    return next(name for _, name in sorted(pods) if name.startswith(prefix))


def _synced(seen: Any) -> bool:
    identity = seen.identity
    return identity is not None and any(
        r.route is Route.PODS_API and r.available and r.synced for r in identity.routes
    )


def test_a_pod_recreated_under_its_name_is_a_new_uid_and_the_old_ones_series_go(
    make_sim: Callable[..., SimKubelet],
) -> None:
    """A StatefulSet's pod deleted and admitted again under the same name: podres_pod_info
    names the new incarnation's UID, and no series of the old UID is left."""
    sim = make_sim("demo")
    settings = exporter_settings(sim)
    reader = NodeReader.from_settings(settings, gpu_backend=sim.host.gpu_backend())  # type: ignore[attr-defined]

    def uids(name: str) -> set[str]:
        view = reader.view(reader.observe(), generation=1)
        fam = next(f for f in reader.families(view, "0") if f.name == "podres_pod")
        return {s.labels["uid"] for s in fam.samples if s.labels["pod"] == name}

    try:
        pod = next(p for p in sim.node.pods if p.name == "postgres-0")
        wait_until(lambda: uids("postgres-0") == {pod.uid}, timeout=10)
        sim.node.remove(pod.namespace, pod.name)
        sim.node.admit(pod.spec, name=pod.name)
        again = next(p for p in sim.node.pods if p.name == "postgres-0")
        assert again.uid != pod.uid
        wait_until(lambda: uids("postgres-0") == {again.uid}, timeout=10)
    finally:
        reader.close()


def test_a_watcher_dropped_by_the_kubelet_recovers_without_losing_a_pod(
    make_sim: Callable[..., SimKubelet],
) -> None:
    """The kubelet drops the exporter's watch (RESOURCE_EXHAUSTED) and a pod comes and goes
    meanwhile: once the route has synced again, podres_pod_info lists every pod the
    kubelet serves, the new one included, and the gone one not, never fewer in between."""
    sim = make_sim("demo")
    reader = NodeReader.from_settings(exporter_settings(sim), gpu_backend=sim.host.gpu_backend())  # type: ignore[attr-defined]

    def served() -> dict[tuple[str, str], str]:
        view = reader.view(reader.observe(), generation=1)
        fam = next(f for f in reader.families(view, "0") if f.name == "podres_pod")
        return {(s.labels["namespace"], s.labels["pod"]): s.labels["uid"] for s in fam.samples}

    def kubelets() -> dict[tuple[str, str], str]:
        return {(p.namespace, p.name): p.uid for p in sim.node.pods}

    try:
        wait_until(lambda: served() == kubelets(), timeout=10)
        api = sim.pods_api
        assert api is not None
        assert api.drop_watchers() == 1
        gone = next(p for p in sim.node.pods if p.name == "clickhouse-0")
        sim.node.remove(gone.namespace, gone.name)
        sim.node.admit(gone.spec, name="clickhouse-1")
        seen = served()
        assert len(seen) >= len(kubelets()) - 1  # the last answer, kept while reconnecting
        wait_until(lambda: served() == kubelets(), timeout=15)
        assert ("data", "clickhouse-0") not in served()
        assert ("data", "clickhouse-1") in served()
    finally:
        reader.close()
