"""The kubelet's Pods API (KEP-4188), read on the node: whose each pod is, kept live.

What the kubelet serves (kubernetes/kubernetes
``staging/src/k8s.io/kubelet/pkg/apis/pods/v1alpha1/api.proto``,
``pkg/kubelet/apis/pods/server.go`` and ``constants.go``):

- A unix socket ``<kubelet root>/pods-api/pods-api.sock`` (``/var/lib/kubelet/...``),
  root only, no RBAC, re-created at every kubelet start; there is none while the
  ``PodsAPI`` gate is off (alpha in 1.36, beta and on by default in 1.37).
- Service ``v1alpha1.Pods``: ``WatchPods(WatchPodsRequest) -> stream WatchPodsEvent{type,
  pod}``, ``ListPods(ListPodsRequest) -> ListPodsResponse{repeated pods}``,
  ``GetPod(GetPodRequest{podUID}) -> GetPodResponse{pod}``; each pod the bytes of
  ``v1.Pod#Marshal()``.
- Every method answers ``FAILED_PRECONDITION`` ("Kubelet is initializing") until the
  kubelet's pod sources are ready.
- WatchPods sends ADDED for each pod the kubelet knows (sorted by UID), then
  INITIAL_SYNC_COMPLETE (no pod), then ADDED, MODIFIED and DELETED; a DELETED pod
  carries only its name, namespace and UID.
- Each watcher has a buffer of 100 events; one whose buffer is full is dropped, its
  stream ending ``RESOURCE_EXHAUSTED``.
- ListPods and GetPod are rate-limited: 100 per second, a burst of 10.

How :class:`PodsApiSource` reads it: one WatchPods stream on a thread of its own (a watch
gives the whole node, so ListPods and GetPod are never called and the rate limit is never
met). The socket is detected, not configured: absent (or a kubelet that does not serve
the service), :meth:`~PodsApiSource.current` is None and the socket is looked at again
every ``recheck_s``. A stream dropped (``RESOURCE_EXHAUSTED``, ``UNAVAILABLE``, the
kubelet restarting, the socket re-created, which a watchdog notices) is opened again after
a backoff (:class:`~podres_exporter.daemon.backoff.Backoff`); meanwhile the last good
directory is served, ``stale``. A new stream's pods REPLACE the old ones once it says
INITIAL_SYNC_COMPLETE, so a pod deleted while disconnected is gone. Each pod is decoded
within :class:`~podres_exporter.sources.podsapi_wire.PodsApiLimits`; every state change
is logged once, as one structured event.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import grpc
import structlog

from podres_exporter._generated.podsapi.v1alpha1 import api_pb2 as pods_pb2
from podres_exporter._generated.podsapi.v1alpha1 import api_pb2_grpc as pods_grpc
from podres_exporter.core.limits import PODS_OVER_LIMIT
from podres_exporter.core.podmeta import PodDirectory, PodMeta, Route
from podres_exporter.core.printable import cut
from podres_exporter.daemon.backoff import Backoff
from podres_exporter.daemon.fileid import FileIdentity, file_identity
from podres_exporter.sources.podsapi_wire import (
    DEFAULT_PODS_API_LIMITS,
    PodDecodeError,
    PodsApiLimits,
    deleted_uid,
    pod_meta,
)

__all__ = [
    "DEFAULT_SOCKET",
    "Pacing",
    "PodsApiSource",
    "State",
]

log = structlog.get_logger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pods-api/pods-api.sock"
UNDECODABLE = "undecodable_pod"
UNKNOWN_EVENT = "unknown_event"
_DETAILS = 200  # characters of a kubelet's error details kept in a log line


class State:
    """What the source is doing, as :attr:`PodsApiSource.state` says it."""

    IDLE = "idle"  # not started
    ABSENT = "absent"  # no socket: the gate off, an older kubelet
    NOT_SERVED = "not_served"  # a socket without the service (UNIMPLEMENTED)
    SYNCING = "syncing"  # a watch open, before INITIAL_SYNC_COMPLETE
    SYNCED = "synced"
    INITIALIZING = "initializing"  # FAILED_PRECONDITION: the kubelet has not synced
    DROPPED = "dropped"  # the stream ended; retrying after a backoff
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Pacing:
    """When :class:`PodsApiSource` tries again, and its clocks (inject them in tests).

    ``backoff`` (with ``rng``): the wait after the n-th failure in a row (the first
    after a stream that had synced waits the least). ``recheck_s``: how often an absent
    socket is looked for again, a kubelet without the service asked again, and the
    watchdog looks whether the socket was re-created. ``absent_grace_s``: how long the
    last good directory is still served, stale, after the socket went away. ``clock``:
    the time a directory is taken at; ``monotonic``: for the grace.
    """

    backoff: Backoff = field(default_factory=lambda: Backoff(initial_s=1.0, max_s=30.0))
    recheck_s: float = 10.0
    absent_grace_s: float = 300.0
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)


class PodsApiSource:
    """The Pods API route's reader (a ``core.podmeta.PodDirectorySource``).

    ``socket_path``: the Pods API socket. ``limits``: what one pod and the node may hold.
    ``pacing``: backoff, rechecks and clocks.
    """

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        limits: PodsApiLimits = DEFAULT_PODS_API_LIMITS,
        pacing: Pacing | None = None,
    ) -> None:
        pacing = pacing or Pacing()
        self._path = socket_path
        self._limits = limits
        self._backoff = pacing.backoff
        self._recheck_s = pacing.recheck_s
        self._absent_grace_s = pacing.absent_grace_s
        self._clock = pacing.clock
        self._monotonic = pacing.monotonic
        self._rng = pacing.rng
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._call: Any = None
        self._identity: FileIdentity | None = None
        self._state = State.IDLE
        self._pods: dict[str, PodMeta] = {}  # the last synced set, kept up to date
        self._synced = False  # a stream has ever said INITIAL_SYNC_COMPLETE
        self._stale = False
        self._absent_since: float | None = None
        self._taken_at = 0.0
        self._snapshot: PodDirectory | None = None
        self._watches = 0
        self._anomalies: Counter[str] = Counter()
        self._logged_kinds: set[str] = set()

    # ------------------------------------------------------------------ the protocol

    def start(self) -> None:
        """Begin reading on a thread of its own (and a watchdog); returns at once."""
        if self._threads:
            return
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._run, name="podsapi-watch", daemon=True),
            threading.Thread(target=self._watchdog, name="podsapi-watchdog", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """End reading: cancel the open stream, wait for the threads."""
        self._stop.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()
        for t in self._threads:
            t.join()
        self._threads = []
        self._set_state(State.STOPPED)

    def current(self) -> PodDirectory | None:
        """The latest answer: None while the route is not available here."""
        with self._lock:
            if self._state in (State.IDLE, State.NOT_SERVED):
                return None
            if self._state == State.ABSENT and not self._within_grace():
                return None
            if self._snapshot is None:
                self._snapshot = PodDirectory(
                    route=Route.PODS_API,
                    pods=MappingProxyType(dict(self._pods)),
                    synced=self._synced,
                    stale=self._stale,
                    taken_at=self._taken_at,
                )
            return self._snapshot

    # ------------------------------------------------------------------ diagnostics

    @property
    def state(self) -> str:
        """One of :class:`State`."""
        with self._lock:
            return self._state

    @property
    def watches(self) -> int:
        """How many WatchPods streams were opened."""
        with self._lock:
            return self._watches

    @property
    def anomalies(self) -> Mapping[str, int]:
        """What was left out of the pods read, per kind, since the start."""
        with self._lock:
            return MappingProxyType(dict(self._anomalies))

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            if file_identity(self._path) is None:
                self._set_absent()
                self._stop.wait(self._recheck_s)
                continue
            code, synced = self._watch_once()
            if self._stop.is_set():
                return
            if code == grpc.StatusCode.UNIMPLEMENTED:
                failures = 0
                self._set_state(State.NOT_SERVED)
                self._stop.wait(self._recheck_s)
                continue
            failures = 1 if synced else failures + 1
            delay = self._backoff.delay(failures, self._rng)
            self._dropped(code, delay)
            self._stop.wait(delay)

    def _watch_once(self) -> tuple[grpc.StatusCode | None, bool]:
        """One WatchPods stream until it ends; (its status, whether it had synced)."""
        channel = grpc.insecure_channel(
            f"unix:{self._path}",
            options=[
                ("grpc.max_receive_message_length", self._limits.message_bytes),
                ("grpc.use_local_subchannel_pool", 1),
            ],
        )
        pending: dict[str, PodMeta] = {}
        synced = False
        try:
            stub = pods_grpc.PodsStub(channel)  # type: ignore[no-untyped-call]
            call = stub.WatchPods(pods_pb2.WatchPodsRequest())
            with self._lock:
                self._call, self._identity = call, file_identity(self._path)
                self._watches += 1
                self._logged_kinds.clear()
                if self._state in (State.IDLE, State.ABSENT, State.NOT_SERVED):
                    self._state_locked(State.SYNCING)
            if self._stop.is_set():
                call.cancel()
            for event in call:
                if synced:
                    self._apply(event, None)
                elif event.type == pods_pb2.INITIAL_SYNC_COMPLETE:
                    synced = True
                    self._replace(pending)
                else:
                    self._apply(event, pending)
        except grpc.RpcError as err:
            return (err.code() if isinstance(err, grpc.Call) else None), synced
        finally:
            with self._lock:
                self._call = None
            channel.close()
        return None, synced

    # ------------------------------------------------------------------ events

    def _apply(self, event: Any, into: dict[str, PodMeta] | None) -> None:
        """Apply one event to ``into`` (a sync in progress) or, with None, to the live
        directory."""
        kind = event.type
        try:
            if kind == pods_pb2.DELETED:
                uid = deleted_uid(event.pod, self._limits)
                self._delete(uid, into)
                return
            if kind not in (pods_pb2.ADDED, pods_pb2.MODIFIED):
                self._anomaly(UNKNOWN_EVENT, event_type=int(kind))
                return
            meta, dropped = pod_meta(event.pod, self._limits)
        except PodDecodeError as exc:
            self._anomaly(UNDECODABLE, error=cut(str(exc), _DETAILS))
            return
        for what, count in dropped.items():
            self._anomaly(what, count, uid=meta.uid)
        self._put(meta, into)

    def _put(self, meta: PodMeta, into: dict[str, PodMeta] | None) -> None:
        with self._lock:
            pods = self._pods if into is None else into
            if meta.uid not in pods and len(pods) >= self._limits.pods:
                self._anomaly_locked(PODS_OVER_LIMIT, 1, uid=meta.uid)
                return
            pods[meta.uid] = meta
            if into is None:
                self._changed_locked()

    def _delete(self, uid: str, into: dict[str, PodMeta] | None) -> None:
        with self._lock:
            pods = self._pods if into is None else into
            if pods.pop(uid, None) is not None and into is None:
                self._changed_locked()

    def _replace(self, pods: dict[str, PodMeta]) -> None:
        """A stream's initial sync is complete: its pods are the node's, all of them."""
        with self._lock:
            self._pods = pods
            self._synced, self._stale = True, False
            self._absent_since = None
            self._changed_locked()
            self._state_locked(State.SYNCED, pods=len(pods), watches=self._watches)

    def _changed_locked(self) -> None:
        self._taken_at = self._clock()
        self._snapshot = None

    def _anomaly(self, kind: str, count: int = 1, **fields: Any) -> None:
        with self._lock:
            self._anomaly_locked(kind, count, **fields)

    def _anomaly_locked(self, kind: str, count: int, **fields: Any) -> None:
        self._anomalies[kind] += count
        if kind not in self._logged_kinds:  # once per kind per stream
            self._logged_kinds.add(kind)
            log.warning("pods_api_pod_bounded", kind=kind, count=count, **fields)

    # ------------------------------------------------------------------ states

    def _within_grace(self) -> bool:
        since = self._absent_since
        return since is not None and self._monotonic() - since < self._absent_grace_s

    def _set_absent(self) -> None:
        with self._lock:
            if self._state == State.ABSENT:
                return
            if self._synced and self._absent_since is None:
                self._absent_since = self._monotonic()
                self._stale = True
                self._snapshot = None
            self._state_locked(State.ABSENT)

    def _dropped(self, code: grpc.StatusCode | None, delay: float) -> None:
        name = code.name if code is not None else "OK"
        state = State.INITIALIZING if code == grpc.StatusCode.FAILED_PRECONDITION else State.DROPPED
        with self._lock:
            if self._synced and not self._stale:
                self._stale = True
                self._snapshot = None
            self._state_locked(state, code=name, retry_in_s=round(delay, 3))

    def _set_state(self, state: str) -> None:
        with self._lock:
            self._state_locked(state)

    def _state_locked(self, state: str, **fields: Any) -> None:
        if state == self._state:
            return
        self._state = state
        log.info(f"pods_api_{state}", socket=self._path, **fields)

    def _watchdog(self) -> None:
        """Cancel the open stream when its socket was re-created or removed (a kubelet
        restart whose old stream did not end by itself)."""
        while not self._stop.wait(self._recheck_s):
            with self._lock:
                call, identity = self._call, self._identity
            if call is None or identity is None:
                continue
            now = file_identity(self._path)
            if now != identity:
                log.info("pods_api_socket_recreated", socket=self._path, present=now is not None)
                call.cancel()
