"""The kubelet pod-resources client: the only place that sees its protobuf messages.

One gRPC channel to the unix socket, a deadline on every call and a 16 MiB receive
limit by default (the kubelet's own clients use the same; its server has no size
options, so big nodes exceed gRPC's 4 MiB default). The channel stays open from one
call to the next unless the caller releases it (:meth:`KubeletClient.release`:
between polls far apart, an open channel costs more than a new one).

Degrades instead of dying:
- v1 answers UNIMPLEMENTED: fall back to v1alpha1 List (devices only).
- GetAllocatableResources UNIMPLEMENTED or disabled by its feature gate: go on
  without it; :attr:`KubeletClient.allocatable_support` says why, logged once.
- The socket is re-created (a kubelet restart; a new file, as
  :mod:`~podres_exporter.daemon.fileid` tells): the channel is rebuilt and the optional RPCs
  are probed again (the new kubelet may be another version).

Every gRPC error becomes one of :mod:`podres_exporter.core.errors`; backoff between
attempts is the caller's (the poller's) business.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

import grpc
import structlog

from podres_exporter._generated.podresources.v1 import api_pb2 as v1
from podres_exporter._generated.podresources.v1 import api_pb2_grpc as v1_grpc
from podres_exporter._generated.podresources.v1alpha1 import api_pb2 as v1alpha1
from podres_exporter._generated.podresources.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from podres_exporter.core.errors import (
    KubeletError,
    KubeletNotServed,
    KubeletRateLimited,
    KubeletResponseTooLarge,
    KubeletTimeout,
    KubeletUnavailable,
)
from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    ClaimDevice,
    ContainerAlloc,
    DeviceRef,
    DynamicResource,
    KubeletReading,
    MemoryBlock,
    NumaNodes,
    PodAlloc,
    RequestStats,
    Support,
    device_key_order,
)
from podres_exporter.daemon.fileid import FileIdentity, file_identity

log = structlog.get_logger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_TIMEOUT_S = 10.0
DURATION_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

# Method names as exported in podres_kubelet_requests_total{method}.
LIST = "List"
LIST_V1ALPHA1 = "v1alpha1.List"
ALLOCATABLE = "GetAllocatableResources"
GET = "Get"

_T = TypeVar("_T")


# ---------------------------------------------------------------- wire -> model


def _numa(msg: Any) -> NumaNodes:
    """Placement of a message with a ``topology`` field; None when it has none.

    An unset ``topology`` reads as an empty one. Nearly every placement is one node: it
    skips the set and the sort (a large node's answers hold tens of thousands).
    """
    nodes = msg.topology.nodes
    if len(nodes) == 1:
        return (int(nodes[0].ID),)
    if not nodes:
        return None
    return tuple(sorted({int(n.ID) for n in nodes}))


def _merge_numa(a: NumaNodes, b: NumaNodes) -> NumaNodes:
    if a is None:
        return b
    if b is None:
        return a
    return tuple(sorted(set(a) | set(b)))


def devices_from_wire(entries: Iterable[Any]) -> tuple[DeviceRef, ...]:
    """Aggregate ContainerDevices entries into one DeviceRef per (resource, id).

    Modern kubelets send one entry per device and NUMA node (a device on two
    nodes appears twice); older ones group ids per resource. Either way the ids
    are de-duplicated and their NUMA nodes merged. Sorted for stable output.
    """
    merged: dict[tuple[str, str], NumaNodes] = {}
    placed: bool | None = None  # whether the entries have a topology (v1alpha1's have none)
    for entry in entries:
        if placed is None:
            placed = hasattr(entry, "topology")
        numa = _numa(entry) if placed else None
        for device_id in entry.device_ids:
            key = (entry.resource_name, device_id)
            merged[key] = _merge_numa(merged[key], numa) if key in merged else numa
    return tuple([DeviceRef(r, d, merged[(r, d)]) for r, d in device_key_order(merged)])


def memory_from_wire(blocks: Iterable[Any]) -> tuple[MemoryBlock, ...]:
    """ContainerMemory messages as MemoryBlocks, sorted by type and placement."""
    out = [MemoryBlock(b.memory_type, int(b.size), _numa(b)) for b in blocks]
    return tuple(sorted(out, key=lambda m: (m.memory_type, m.numa or (), m.size_bytes)))


def _dynamic_from_wire(items: Iterable[Any]) -> tuple[DynamicResource, ...]:
    return tuple(
        DynamicResource(
            claim_namespace=d.claim_namespace,
            claim_name=d.claim_name,
            devices=tuple(
                ClaimDevice(
                    driver=c.driver_name,
                    pool=c.pool_name,
                    device=c.device_name,
                    cdi_devices=tuple(x.name for x in c.cdi_devices),
                    share_id=c.share_id if c.HasField("share_id") else None,
                )
                for c in d.claim_resources
            ),
        )
        for d in items
    )


def pod_from_v1(p: Any) -> PodAlloc:
    """A v1 PodResources message as a PodAlloc."""
    return PodAlloc(
        namespace=p.namespace,
        name=p.name,
        containers=tuple(
            ContainerAlloc(
                name=c.name,
                cpu_ids=frozenset(int(x) for x in c.cpu_ids),
                devices=devices_from_wire(c.devices),
                memory=memory_from_wire(c.memory),
                dynamic_resources=_dynamic_from_wire(c.dynamic_resources),
            )
            for c in p.containers
        ),
        cpu_ids=frozenset(int(x) for x in p.cpu_ids),
        memory=memory_from_wire(p.memory),
    )


def pod_from_v1alpha1(p: Any) -> PodAlloc:
    """A v1alpha1 PodResources message (devices only) as a PodAlloc."""
    return PodAlloc(
        namespace=p.namespace,
        name=p.name,
        containers=tuple(
            ContainerAlloc(name=c.name, devices=devices_from_wire(c.devices)) for c in p.containers
        ),
    )


def allocatable_from_wire(resp: Any) -> Allocatable:
    """An AllocatableResourcesResponse as our Allocatable."""
    return Allocatable(
        cpu_ids=frozenset(int(x) for x in resp.cpu_ids),
        devices=devices_from_wire(resp.devices),
        memory=memory_from_wire(resp.memory),
    )


# ---------------------------------------------------------------- conversion cache


class PodCache:
    """Converted pods kept from one List answer to the next, keyed by each pod message's
    serialised bytes: an unchanged pod costs a serialisation and a dict lookup instead of
    a conversion (most pods of a node do not change between polls). The model objects are
    frozen, so one is safely shared by successive readings.

    Only the pods of the latest answer are kept: a pod that left the node leaves the cache
    at the next answer, so memory follows the node's size, never its churn. Not
    thread-safe: its client's owner calls it.
    """

    def __init__(self) -> None:
        self._entries: dict[bytes, PodAlloc] = {}
        self._convert: Callable[[Any], PodAlloc] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def convert(
        self, messages: Iterable[Any], convert: Callable[[Any], PodAlloc]
    ) -> tuple[PodAlloc, ...]:
        """``convert`` of each message, reusing the last answer's objects for the same bytes.

        Another ``convert`` (the API version changed) starts from an empty cache.
        """
        previous = self._entries if convert is self._convert else {}
        current: dict[bytes, PodAlloc] = {}
        out: list[PodAlloc] = []
        for message in messages:
            key = message.SerializeToString()
            pod = current.get(key)
            if pod is None:
                pod = previous.get(key)
                if pod is None:
                    pod = convert(message)
                current[key] = pod
            out.append(pod)
        self._entries = current
        self._convert = convert
        return tuple(out)


# ---------------------------------------------------------------- errors


def map_rpc_error(err: grpc.RpcError, method: str, socket_path: str) -> KubeletError:
    """Turn a gRPC error into our own, with a message an operator can act on."""
    code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (err.details() if isinstance(err, grpc.Call) else None) or str(err)
    name = code.name
    text = f"kubelet {method} on {socket_path}: {name}: {details}"
    if code == grpc.StatusCode.UNAVAILABLE:
        return KubeletUnavailable(text, method=method, code=name)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return KubeletTimeout(text, method=method, code=name)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if "larger than max" in details.lower():
            return KubeletResponseTooLarge(
                text + " (raise --kubelet-max-message-size)", method=method, code=name
            )
        return KubeletRateLimited(text, method=method, code=name)
    if code == grpc.StatusCode.UNIMPLEMENTED or (
        code == grpc.StatusCode.UNKNOWN and "disabled" in details.lower()
    ):
        return KubeletNotServed(text, method=method, code=name)
    return KubeletError(text, method=method, code=name)


# ---------------------------------------------------------------- stats


class _Stats:
    """Thread-safe request counters; :meth:`freeze` copies them into the model."""

    def __init__(self, bounds: Sequence[float] = DURATION_BUCKETS) -> None:
        self._bounds = tuple(bounds)
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._buckets: dict[str, list[int]] = {}
        self._sum: dict[str, float] = {}
        self._n: dict[str, int] = {}

    def observe(self, method: str, code: str, seconds: float) -> None:
        with self._lock:
            self._counts[(method, code)] = self._counts.get((method, code), 0) + 1
            buckets = self._buckets.setdefault(method, [0] * len(self._bounds))
            for i in range(bisect.bisect_left(self._bounds, seconds), len(self._bounds)):
                buckets[i] += 1
            self._sum[method] = self._sum.get(method, 0.0) + seconds
            self._n[method] = self._n.get(method, 0) + 1

    def freeze(self) -> RequestStats:
        with self._lock:
            return RequestStats(
                bucket_bounds=self._bounds,
                counts=MappingProxyType(dict(self._counts)),
                duration_buckets=MappingProxyType({k: tuple(v) for k, v in self._buckets.items()}),
                duration_sum=MappingProxyType(dict(self._sum)),
                duration_count=MappingProxyType(dict(self._n)),
            )


# ---------------------------------------------------------------- client


class KubeletClient:
    """Reads the pod-resources API. Not thread-safe: one poller owns it.

    ``socket_path``: the kubelet's pod-resources socket.
    ``max_message_bytes``: receive limit per response.
    ``timeout_s``: deadline of each call.
    """

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.socket_path = socket_path
        self._max = max_message_bytes
        self._timeout = timeout_s
        self._clock = clock
        self._wall = wall_clock
        self._stats = _Stats()
        self._channel: grpc.Channel | None = None
        self._socket_id: FileIdentity | None = None
        self._v1: Any = None
        self._v1alpha1: Any = None
        self.api_version = ApiVersion.V1
        self.allocatable_support = Support.UNKNOWN
        self.get_support = Support.UNKNOWN
        self._pods = PodCache()
        self._allocatable_cache: tuple[bytes, Allocatable] | None = None

    # -- channel

    def _connect(self) -> None:
        """(Re)build the channel when there is none or the socket is a new file (fileid.py)."""
        socket_id = file_identity(self.socket_path)
        if socket_id is None:
            raise KubeletUnavailable(
                f"kubelet socket {self.socket_path} does not exist (set --kubelet-socket)",
                method=LIST,
                code="UNAVAILABLE",
            )
        if self._channel is not None and socket_id == self._socket_id:
            return
        new_kubelet = socket_id != self._socket_id
        if new_kubelet and self._socket_id is not None:
            log.info("kubelet_socket_recreated", socket=self.socket_path)
        self._drop_channel()
        self._channel = grpc.insecure_channel(
            f"unix://{os.path.abspath(self.socket_path)}",
            options=[
                ("grpc.max_receive_message_length", self._max),
                ("grpc.enable_retries", 0),
                # A private subchannel pool: a rebuilt channel must not inherit the old
                # connection's reconnect backoff after the kubelet re-created its socket.
                ("grpc.use_local_subchannel_pool", 1),
                # Reconnect quickly after a kubelet restart; the poller spaces calls.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ],
        )
        self._socket_id = socket_id
        # The generated gRPC stubs carry no type hints.
        self._v1 = v1_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]
        self._v1alpha1 = v1alpha1_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]
        if new_kubelet:  # it may be another version: probe again
            self.api_version = ApiVersion.V1
            self.allocatable_support = Support.UNKNOWN
            self.get_support = Support.UNKNOWN

    def _drop_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def release(self) -> None:
        """Close the channel until the next call, which opens a new one. What was learnt
        of the kubelet (its API version, the optional calls it serves) is kept while its
        socket is the same file. An open channel keeps gRPC's threads, which wake several
        times a second (about 1 ms of CPU a second); a new channel costs about 2 ms once."""
        self._drop_channel()

    def close(self) -> None:
        """Close the channel; a later call opens a new one and probes the kubelet again."""
        self._drop_channel()
        self._socket_id = None

    # -- calls

    def _call(self, method: str, fn: Callable[..., _T], request: Any) -> _T:
        start = self._clock()
        try:
            result = fn(request, timeout=self._timeout)
        except grpc.RpcError as err:
            mapped = map_rpc_error(err, method, self.socket_path)
            self._stats.observe(method, mapped.code, self._clock() - start)
            raise mapped from err
        self._stats.observe(method, "OK", self._clock() - start)
        return result

    def _list(self) -> tuple[PodAlloc, ...]:
        if self.api_version is ApiVersion.V1:
            try:
                resp = self._call(LIST, self._v1.List, v1.ListPodResourcesRequest())
                return self._pods.convert(resp.pod_resources, pod_from_v1)
            except KubeletNotServed as err:
                if err.code != "UNIMPLEMENTED":
                    raise
                log.warning(
                    "kubelet_api_fallback",
                    socket=self.socket_path,
                    from_version="v1",
                    to_version="v1alpha1",
                    reason=str(err),
                )
                self.api_version = ApiVersion.V1ALPHA1
        resp = self._call(LIST_V1ALPHA1, self._v1alpha1.List, v1alpha1.ListPodResourcesRequest())
        return self._pods.convert(resp.pod_resources, pod_from_v1alpha1)

    def _allocatable(self) -> Allocatable | None:
        if self.api_version is not ApiVersion.V1 or self.allocatable_support in (
            Support.DISABLED,
            Support.UNIMPLEMENTED,
        ):
            return None
        try:
            resp = self._call(
                ALLOCATABLE, self._v1.GetAllocatableResources, v1.AllocatableResourcesRequest()
            )
        except KubeletNotServed as err:
            self.allocatable_support = (
                Support.UNIMPLEMENTED if err.code == "UNIMPLEMENTED" else Support.DISABLED
            )
            log.warning(
                "kubelet_rpc_not_served",
                socket=self.socket_path,
                method=ALLOCATABLE,
                support=self.allocatable_support.value,
                detail=str(err),
                consequence="free and reserved CPUs are computed from the node's online CPUs",
            )
            return None
        self.allocatable_support = Support.SERVED
        key = resp.SerializeToString()
        if self._allocatable_cache is None or self._allocatable_cache[0] != key:
            self._allocatable_cache = (key, allocatable_from_wire(resp))
        return self._allocatable_cache[1]

    def read(self) -> KubeletReading:
        """One complete reading: List, then GetAllocatableResources where served.

        Raises a :class:`~podres_exporter.core.errors.KubeletError` subclass on failure.
        """
        self._connect()
        pods = self._list()
        allocatable = self._allocatable()
        if self.api_version is ApiVersion.V1ALPHA1:
            support = Support.UNIMPLEMENTED
        else:
            support = self.allocatable_support
        return KubeletReading(
            api_version=self.api_version,
            pods=pods,
            allocatable=allocatable,
            allocatable_support=support,
            taken_at=self._wall(),
        )

    def get_pod(self, namespace: str, name: str) -> PodAlloc | None:
        """One pod through ``Get`` where served, else by filtering ``List``.

        Returns None when the pod is not on this node.
        """
        self._connect()
        if self.api_version is ApiVersion.V1 and self.get_support in (
            Support.UNKNOWN,
            Support.SERVED,
        ):
            request = v1.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
            try:
                resp = self._call(GET, self._v1.Get, request)
            except KubeletNotServed as err:
                self.get_support = (
                    Support.UNIMPLEMENTED if err.code == "UNIMPLEMENTED" else Support.DISABLED
                )
            except KubeletError as err:
                if "not found" in str(err):
                    self.get_support = Support.SERVED
                    return None
                raise
            else:
                self.get_support = Support.SERVED
                return pod_from_v1(resp.pod_resources)
        for pod in self._list():
            if pod.namespace == namespace and pod.name == name:
                return pod
        return None

    def stats(self) -> RequestStats:
        """A frozen copy of the request counters."""
        return self._stats.freeze()
