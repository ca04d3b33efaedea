"""``SimPodsApi``: the kubelet's Pods API (KEP-4188, ``v1alpha1.Pods``), simulated.

It serves ``/v1alpha1.Pods/{WatchPods,ListPods,GetPod}`` on its own unix socket
(``<kubelet root>/pods-api/pods-api.sock`` on a real node) over the real wire protocol,
pods as the bytes of a ``v1.Pod`` (:mod:`~podres_sim.kubelet.podsapi_wire`), answering
from a ``node.Node`` and behaving like the kubelet's server
(kubernetes/kubernetes ``pkg/kubelet/apis/pods/server.go``):

* every method answers ``FAILED_PRECONDITION`` "Kubelet is initializing" until the
  kubelet has synced its pod sources (the ``warmup`` window of a start);
* WatchPods sends ADDED for every pod the kubelet knows (sorted by UID), then
  INITIAL_SYNC_COMPLETE (no pod), then ADDED, MODIFIED and DELETED as pods change;
  a DELETED pod carries only its name, namespace and UID;
* each watcher has a buffer of 100 events: one that falls further behind is dropped,
  its stream ending with ``RESOURCE_EXHAUSTED`` after what was buffered;
* ListPods and GetPod share one token bucket, 100 qps with a burst of 10
  (``RESOURCE_EXHAUSTED`` "rejected by rate limit"); GetPod of an unknown UID answers
  ``NOT_FOUND``;
* a start binds a new socket inode; a stop leaves the socket file behind, stale.

Changes are found by watching the node's generation (``poll_s``): a pod whose UID is new
is ADDED, one whose encoded bytes changed (a phase, a device's health) MODIFIED, one gone
DELETED. ``drop_watchers`` drops every watcher at once, as if each had fallen behind.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import structlog

from podres_exporter._generated.podsapi.v1alpha1 import api_pb2 as pods_pb2
from podres_exporter.sources.poddirectory import pods_api_socket
from podres_sim.kubelet.grpcserve import bind, old_inode_held, shut_down, unlink_socket
from podres_sim.kubelet.node import Node
from podres_sim.kubelet.pods import PodState
from podres_sim.kubelet.podsapi_wire import (
    HEALTHY,
    UNHEALTHY,
    UNKNOWN,
    deleted_pod_bytes,
    pod_bytes,
)
from podres_sim.kubelet.ratelimit import RATE_LIMITED, TokenBucket

__all__ = [
    "INITIALIZING",
    "SERVICE",
    "WATCHER_DROPPED",
    "WATCH_BUFFER",
    "SimPodsApi",
    "pods_api_socket_for",
]

log = structlog.get_logger("podres_sim")

SERVICE = "v1alpha1.Pods"
WATCH_METHOD = f"/{SERVICE}/WatchPods"
LIST_METHOD = f"/{SERVICE}/ListPods"
GET_METHOD = f"/{SERVICE}/GetPod"
# The kubelet's own words and figures.
INITIALIZING = "Kubelet is initializing"
WATCHER_DROPPED = "watch client channel closed"
WATCH_BUFFER = 100
_WAKE_S = 0.05  # how often a waiting watch looks whether its client or server went away


def pods_api_socket_for(pod_resources_socket: Path) -> Path:
    """Where a kubelet whose pod-resources socket is ``pod_resources_socket`` serves the
    Pods API: where the exporter looks for it (``sources.poddirectory.pods_api_socket``:
    ``<root>/pods-api/`` beside ``<root>/pod-resources/``, else ``<socket stem>-pods-api/``
    beside the socket, so that several simulators can share a directory)."""
    return pods_api_socket(str(pod_resources_socket))


_Health = tuple[tuple[tuple[str, str], str], ...]  # ((resource, device id), health) ...


@dataclass(slots=True)
class _Entry:
    """One pod as last sent: its state, the devices' health then, its bytes."""

    state: PodState
    health: _Health
    data: bytes


def _changes(old: dict[str, _Entry], current: dict[str, _Entry]) -> list[Any]:
    """The watch events from ``old`` to ``current``: DELETED (name, namespace and UID
    only), then ADDED and MODIFIED."""
    events = [
        pods_pb2.WatchPodsEvent(
            type=pods_pb2.DELETED,
            pod=deleted_pod_bytes(e.state.namespace, e.state.name, uid),
        )
        for uid, e in old.items()
        if uid not in current
    ]
    for uid, e in current.items():
        before = old.get(uid)
        if before is None:
            events.append(pods_pb2.WatchPodsEvent(type=pods_pb2.ADDED, pod=e.data))
        elif before.data != e.data:
            events.append(pods_pb2.WatchPodsEvent(type=pods_pb2.MODIFIED, pod=e.data))
    return events


@dataclass(eq=False, slots=True)
class _Watcher:
    events: queue.Queue[pods_pb2.WatchPodsEvent] = field(
        default_factory=lambda: queue.Queue(maxsize=WATCH_BUFFER)
    )
    dropped: bool = False


class _Router(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    def __init__(self, api: SimPodsApi) -> None:
        self._handlers = {
            WATCH_METHOD: grpc.unary_stream_rpc_method_handler(
                api._watch,
                request_deserializer=pods_pb2.WatchPodsRequest.FromString,
                response_serializer=pods_pb2.WatchPodsEvent.SerializeToString,
            ),
            LIST_METHOD: grpc.unary_unary_rpc_method_handler(
                api._list,
                request_deserializer=pods_pb2.ListPodsRequest.FromString,
                response_serializer=pods_pb2.ListPodsResponse.SerializeToString,
            ),
            GET_METHOD: grpc.unary_unary_rpc_method_handler(
                api._get,
                request_deserializer=pods_pb2.GetPodRequest.FromString,
                response_serializer=pods_pb2.GetPodResponse.SerializeToString,
            ),
        }

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        return self._handlers.get(handler_call_details.method)


class SimPodsApi:
    """The Pods API of a simulated kubelet on ``socket_path``, answering from ``node``.

    Nothing is served until ``start``. ``clock`` paces the rate limit (inject one to
    test it without waiting). Thread-safe.
    """

    def __init__(
        self,
        node: Node,
        socket_path: str | Path,
        *,
        workers: int = 16,
        poll_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._node = node
        self._socket_path = Path(socket_path).absolute()
        self._workers = workers
        self._poll_s = poll_s
        self._clock = clock
        self._bucket = TokenBucket(clock=clock)
        self._lock = threading.Lock()  # the pods, the watchers, the counters
        self._refreshing = threading.Lock()  # one refresh at a time, in order
        self._life = threading.RLock()
        self._pods: dict[str, _Entry] = {}
        self._created: dict[str, int] = {}
        self._watchers: set[_Watcher] = set()
        self._generation = -1
        self._ready_at = 0.0
        self._rate_limited = 0
        self._events_sent = 0
        self._calls: dict[str, int] = {"WatchPods": 0, "ListPods": 0, "GetPod": 0}
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ state

    @property
    def socket_path(self) -> Path:
        """The absolute path of the unix socket."""
        return self._socket_path

    @property
    def target(self) -> str:
        """The gRPC target for a client channel."""
        return f"unix:{self._socket_path}"

    @property
    def running(self) -> bool:
        """True while serving."""
        return self._server is not None

    @property
    def watcher_count(self) -> int:
        """How many WatchPods streams are open."""
        with self._lock:
            return len(self._watchers)

    @property
    def request_count(self) -> dict[str, int]:
        """Calls received per method (``WatchPods``, ``ListPods``, ``GetPod``)."""
        with self._lock:
            return dict(self._calls)

    @property
    def rate_limited_count(self) -> int:
        """How many ListPods/GetPod calls the token bucket refused."""
        with self._lock:
            return self._rate_limited

    def uids(self) -> dict[str, tuple[str, str]]:
        """Every pod served now: UID -> (namespace, name)."""
        self.refresh()
        with self._lock:
            return {u: (e.state.namespace, e.state.name) for u, e in self._pods.items()}

    def pod_bytes(self, uid: str) -> bytes:
        """The bytes served now for one pod (KeyError if there is none)."""
        self.refresh()
        with self._lock:
            return self._pods[uid].data

    def drop_watchers(self) -> int:
        """Drop every open watcher as if it had fallen behind; how many were open."""
        with self._lock:
            for w in self._watchers:
                w.dropped = True
            return len(self._watchers)

    # ------------------------------------------------------------------ changes

    def _health(self, resource: str, device_id: str) -> str:
        try:
            return HEALTHY if self._node.device_healthy(resource, device_id) else UNHEALTHY
        except KeyError:
            return UNKNOWN

    def refresh(self) -> None:
        """Take the node's pods now and send what changed to every watcher."""
        with self._refreshing:
            generation = self._node.generation
            if generation == self._generation:
                return
            node_name = self._node.spec.name
            current: dict[str, _Entry] = {}
            for pod in self._node.pods:
                health = tuple(
                    ((g.resource, g.device_id), self._health(g.resource, g.device_id))
                    for c in pod.containers
                    for g in c.devices
                )
                current[pod.uid] = self._entry(pod, health, node_name)
            with self._lock:
                self._generation = generation
                old, self._pods = self._pods, current
                for event in _changes(old, current):
                    self._broadcast(event)
                for uid in old.keys() - current.keys():
                    self._created.pop(uid, None)

    def _entry(self, pod: PodState, health: _Health, node_name: str) -> _Entry:
        before = self._pods.get(pod.uid)
        created = self._created.setdefault(pod.uid, int(time.time()))
        if before is not None and before.state is pod and before.health == health:
            return before
        known = dict(health)
        data = pod_bytes(pod, node_name, lambda r, d: known.get((r, d), UNKNOWN), created)
        return _Entry(pod, health, data)

    def _broadcast(self, event: pods_pb2.WatchPodsEvent) -> None:
        """Queue ``event`` for every watcher (lock held); a full buffer drops it."""
        for w in self._watchers:
            if w.dropped:
                continue
            try:
                w.events.put_nowait(event)
            except queue.Full:
                w.dropped = True
                log.info("sim_pods_api_watcher_dropped", buffered=WATCH_BUFFER)

    def _poll(self, stop: threading.Event) -> None:
        while not stop.wait(self._poll_s):
            self.refresh()

    # ------------------------------------------------------------------ handlers

    def _check_ready(self, context: grpc.ServicerContext) -> None:
        with self._lock:
            warming = time.monotonic() < self._ready_at
        if warming:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, INITIALIZING)

    def _check_rate(self, context: grpc.ServicerContext) -> None:
        if not self._bucket.allow():
            with self._lock:
                self._rate_limited += 1
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED)

    def _count(self, method: str) -> None:
        with self._lock:
            self._calls[method] += 1

    def _list(self, _request: Any, context: grpc.ServicerContext) -> Any:
        self._count("ListPods")
        self._check_rate(context)
        self._check_ready(context)
        self.refresh()
        with self._lock:
            data = [self._pods[uid].data for uid in sorted(self._pods)]
        return pods_pb2.ListPodsResponse(pods=data)

    def _get(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count("GetPod")
        self._check_rate(context)
        self._check_ready(context)
        self.refresh()
        with self._lock:
            entry = self._pods.get(request.podUID)
        if entry is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"pod with UID {request.podUID} not found")
        return pods_pb2.GetPodResponse(pod=entry.data)

    def _watch(self, _request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self._count("WatchPods")
        self._check_ready(context)
        self.refresh()
        watcher = _Watcher()
        with self._lock:  # the initial list and the registration see the same pods
            initial = [self._pods[uid].data for uid in sorted(self._pods)]
            self._watchers.add(watcher)
        try:
            for data in initial:
                yield pods_pb2.WatchPodsEvent(type=pods_pb2.ADDED, pod=data)
            yield pods_pb2.WatchPodsEvent(type=pods_pb2.INITIAL_SYNC_COMPLETE)
            yield from self._follow(watcher, context)
        finally:
            with self._lock:
                self._watchers.discard(watcher)

    def _follow(self, watcher: _Watcher, context: grpc.ServicerContext) -> Iterator[Any]:
        while True:
            try:
                event = watcher.events.get(timeout=_WAKE_S)
            except queue.Empty:
                if watcher.dropped:  # what was buffered is sent; then the end
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, WATCHER_DROPPED)
                if not context.is_active() or self._stop.is_set():
                    return
                continue
            with self._lock:
                self._events_sent += 1
            yield event

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, warmup: float = 0.0) -> SimPodsApi:
        """Create the socket (a new inode) and serve; ``FAILED_PRECONDITION`` for
        ``warmup`` seconds. RuntimeError if already running."""
        with self._life:
            if self._server is not None:
                raise RuntimeError("the simulated Pods API is already running")
            path = self._socket_path
            path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
            self.refresh()
            executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="sim-pods")
            server = grpc.server(
                executor,
                handlers=[_Router(self)],
                options=[("grpc.max_send_message_length", -1)],
            )
            with old_inode_held(path, self):
                unlink_socket(path)
                bind(server, executor, path)
                with self._lock:
                    self._ready_at = time.monotonic() + max(0.0, warmup)
                server.start()
            self._stop = threading.Event()
            self._poller = threading.Thread(
                target=self._poll, args=(self._stop,), name="sim-pods-poll", daemon=True
            )
            self._poller.start()
            self._server, self._executor = server, executor
            log.info("sim_pods_api_started", socket=str(path))
        return self

    def stop(self, *, remove_socket: bool = False) -> None:
        """Stop serving at once (open watches end); the socket file stays, stale,
        unless ``remove_socket``. Safe to call twice."""
        with self._life:
            self._stop.set()
            poller, self._poller = self._poller, None
            if poller is not None:
                poller.join()
            server, executor = self._server, self._executor
            self._server = self._executor = None
            if server is not None:
                shut_down(server, executor, self._socket_path, owner=self, stale=not remove_socket)
                log.info("sim_pods_api_stopped", socket=str(self._socket_path))
            if remove_socket:
                unlink_socket(self._socket_path)

    def __enter__(self) -> SimPodsApi:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop(remove_socket=True)
