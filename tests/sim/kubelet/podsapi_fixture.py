"""The simulated kubelet with its Pods API on, for the tests of the server and its client.

``kubelet_root`` is a short directory in /tmp (unix socket paths are short) laid out like
a kubelet's: ``pod-resources/kubelet.sock`` and ``pods-api/pods-api.sock``. ``SCENARIO``
has a pod of each owner kind and a GPU pod whose device health can change.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from podres_exporter._generated.k8s.api.core.v1 import pod_pb2
from podres_exporter._generated.podsapi.v1alpha1 import api_pb2 as pods_pb2
from podres_exporter._generated.podsapi.v1alpha1 import api_pb2_grpc as pods_grpc
from podres_sim import ContainerSpec, DeviceSpec, NodeSpec, PodSpec, Scenario, SimKubelet

GPU = "example.com/gpu"
PodsStub: Any = pods_grpc.PodsStub

SCENARIO = Scenario(
    node=NodeSpec.uniform(
        1,
        8,
        name="pa-node",
        devices=[DeviceSpec(GPU, "gpu-0", (0,)), DeviceSpec(GPU, "gpu-1", (0,))],
    ),
    pods=(
        PodSpec.of(
            "web",
            "frontend",
            ContainerSpec.of("nginx", cpu="500m", memory="64Mi"),
            replicas=2,
            labels={"team": "web", "app.kubernetes.io/name": "frontend"},
        ),
        PodSpec.of(
            "ml",
            "trainer",
            ContainerSpec.of("train", cpu=2, memory="1Gi", devices={GPU: 1}),
            naming="statefulset",
            labels={"team": "research"},
        ),
        PodSpec.of("batch", "report", ContainerSpec.of("run"), naming="generated", owner="Job"),
        PodSpec.of("default", "debug", ContainerSpec.of("sh"), labels={"team": "ops"}),
    ),
    name="pods-api",
)


@contextlib.contextmanager
def kubelet_root() -> Iterator[Path]:
    """A short, fresh directory for one kubelet's sockets; removed at the end."""
    directory = Path(tempfile.mkdtemp(prefix="pa-", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def pods_api_kubelet(
    scenario: Scenario = SCENARIO, *, pods_api: bool = True, warmup: float = 0.0
) -> Iterator[SimKubelet]:
    """A started simulated kubelet (Pods API gate as given) in a fresh kubelet root."""
    with kubelet_root() as root:
        sim = SimKubelet(scenario, root / "pod-resources" / "kubelet.sock")
        sim.set_behaviour(pods_api=pods_api)
        sim.start(warmup=warmup)
        try:
            yield sim
        finally:
            sim.stop(remove_socket=True)


def pods_channel(sim: SimKubelet) -> grpc.Channel:
    """A channel of its own to the Pods API socket."""
    return grpc.insecure_channel(
        f"unix:{sim.pods_api_socket_path}", options=[("grpc.use_local_subchannel_pool", 1)]
    )


def decode(data: bytes) -> Any:
    """A ``v1.Pod`` from its bytes."""
    return pod_pb2.Pod.FromString(data)


def watch(stub: Any, **kwargs: Any) -> Any:
    """Open a WatchPods stream."""
    return stub.WatchPods(pods_pb2.WatchPodsRequest(), **kwargs)


def initial_sync(stream: Any) -> list[Any]:
    """Read a watch up to INITIAL_SYNC_COMPLETE; the pods of its ADDED events."""
    pods: list[Any] = []
    for event in stream:
        if event.type == pods_pb2.INITIAL_SYNC_COMPLETE:
            return pods
        assert event.type == pods_pb2.ADDED
        pods.append(decode(event.pod))
    raise AssertionError("the stream ended before INITIAL_SYNC_COMPLETE")
