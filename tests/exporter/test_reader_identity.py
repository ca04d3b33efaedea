"""The reader's pod identity: the routes read beside the kubelet, into the view and series."""

from __future__ import annotations

from collections.abc import Callable
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
from tests.support import exporter_settings

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
    sim = make_sim("demo")
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
