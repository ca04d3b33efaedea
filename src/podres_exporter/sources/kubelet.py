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
attempts is the caller's (the poller's) business. The messages become our model in
:mod:`~podres_exporter.sources.kubelet_wire`, within the answer's limits
(:mod:`~podres_exporter.core.limits`): what they leave out, and the pods merged because
they were listed more than once, are counted in the reading and logged once per change.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
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
from podres_exporter.core.limits import (
    DEFAULT_LIMITS,
    DUPLICATE_POD,
    PODS_OVER_LIMIT,
    AnswerLimits,
    Trim,
    merge_duplicates,
)
from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    KubeletReading,
    PodAlloc,
    RequestStats,
    Support,
)
from podres_exporter.daemon.fileid import FileIdentity, file_identity
from podres_exporter.sources.kubelet_wire import (
    PodCache,
    allocatable_from_wire,
    pod_from_v1,
    pod_from_v1alpha1,
)

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
    ``limits``: how much of one answer becomes objects (:mod:`~podres_exporter.core.limits`).
    """

    def __init__(  # noqa: PLR0913 - the settings of the client and two clocks, by keyword
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        limits: AnswerLimits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.socket_path = socket_path
        self._max = max_message_bytes
        self._timeout = timeout_s
        self._limits = limits
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
        self._allocatable_cache: tuple[bytes, Allocatable, Mapping[str, int]] | None = None
        self._dropped_kinds: frozenset[str] = frozenset()

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

    def _list(self, trim: Trim) -> tuple[PodAlloc, ...]:
        if self.api_version is ApiVersion.V1:
            try:
                resp = self._call(LIST, self._v1.List, v1.ListPodResourcesRequest())
                pods = trim.take(resp.pod_resources, self._limits.pods, PODS_OVER_LIMIT)
                return self._pods.convert(pods, pod_from_v1, trim)
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
        pods = trim.take(resp.pod_resources, self._limits.pods, PODS_OVER_LIMIT)
        return self._pods.convert(pods, pod_from_v1alpha1, trim)

    def _allocatable(self, trim: Trim) -> Allocatable | None:
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
            allocatable = allocatable_from_wire(resp, trim)
            self._allocatable_cache = (key, allocatable, trim.frozen())
        else:
            trim.charge(0, self._allocatable_cache[2])
        return self._allocatable_cache[1]

    def read(self) -> KubeletReading:
        """One complete reading: List, then GetAllocatableResources where served.

        Raises a :class:`~podres_exporter.core.errors.KubeletError` subclass on failure.
        """
        self._connect()
        trim = Trim(self._limits)
        pods, copies = merge_duplicates(self._list(trim))
        trim.dropped[DUPLICATE_POD] += copies
        allocatable_trim = Trim(self._limits)  # a budget of its own
        allocatable = self._allocatable(allocatable_trim)
        trim.charge(0, allocatable_trim.dropped)
        dropped = trim.frozen()
        self._note_dropped(dropped)
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
            dropped=dropped,
        )

    def _note_dropped(self, dropped: Mapping[str, int]) -> None:
        """Log what the answers leave out when that changes (which kinds), not per poll."""
        kinds = frozenset(dropped)
        if kinds == self._dropped_kinds:
            return
        self._dropped_kinds = kinds
        if kinds:
            log.warning(
                "kubelet_answer_trimmed",
                socket=self.socket_path,
                dropped=dict(sorted(dropped.items())),
                limits=str(self._limits),
                consequence="what is over a limit is left out (podres_data_anomalies); "
                "pods listed twice are merged; raise the --kubelet-max-* flags if the node "
                "really is that large",
            )
        else:
            log.info("kubelet_answer_whole", socket=self.socket_path)

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
                return pod_from_v1(resp.pod_resources, Trim(self._limits))
        for pod in self._list(Trim(self._limits)):
            if pod.namespace == namespace and pod.name == name:
                return pod
        return None

    def stats(self) -> RequestStats:
        """A frozen copy of the request counters."""
        return self._stats.freeze()
