"""The opt-in pod-identity route: this node's pods, watched on the API server.

For clusters whose kubelet serves no Pods API (before 1.36, or with the gate off), and only
when asked (``--pod-identity.apiserver``, with the RBAC of the ``pod-identity-apiserver``
component). :class:`ApiServerPods` lists ``/api/v1/pods`` with the field selector
``spec.nodeName=<node>`` (in pages), then watches from the list's resource version with
bookmarks, which move that version on while nothing changes, so a watch that the server
ends (``timeoutSeconds``) or a dropped connection resumes where it was without a new list.

- ``410 Gone`` (the answer's status, or an ERROR event with code 410: the version is older
  than the server keeps) lists again.
- ``401`` reads the ServiceAccount token again and retries once; the token is also read
  again whenever its file changes (the kubelet rotates bound tokens about every hour).
- Any other failure keeps the last good directory, marked stale, logs one event for the
  streak, and retries after a backoff (:mod:`~podres_exporter.daemon.backoff`).
- Reads are bounded: a list page over ``max_list_bytes``, or one watch event over
  ``max_event_bytes``, is refused (one event) and the route backs off, then lists again;
  every socket operation has a timeout, and a list page a deadline as a whole.

Full pod objects, not metadata only: a ``PartialObjectMetadata`` watch would give labels,
owners and the UID, but not ``status.phase`` or ``status.qosClass``, which the route is
also asked for (docs/pod-identity.md). The standard library's ``http.client`` and ``ssl``
speak the protocol: two requests and a line-delimited stream do not need a client library.
"""

from __future__ import annotations

import contextlib
import http.client
import random
import socket
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from types import MappingProxyType
from typing import Final

import structlog

from podres_exporter.core.podmeta import PodDirectory, PodMeta, Route
from podres_exporter.daemon.backoff import Backoff
from podres_exporter.sources.apiserver_wire import (
    ApiServer,
    ApiServerError,
    RelistNeeded,
    TokenFile,
    TooLarge,
    Unauthorized,
    WatchEvent,
    list_answer,
    pods_path,
    watch_event,
)

__all__ = ["ApiServerPods", "WatchLimits"]

log = structlog.get_logger(__name__)

_READ_CHUNK: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class WatchLimits:
    """How much the route reads and how long it waits.

    ``max_event_bytes``: one watch event (one pod, as JSON); the API server stores objects of
    at most 1.5 MiB, so 4 MiB refuses nothing real. ``max_list_bytes``: one list page of
    ``page_size`` pods. ``timeout_s``: connecting and each read of a list; ``list_deadline_s``
    a whole page. ``watch_timeout_s``: asked of the server (``timeoutSeconds``), which ends
    the watch then; reads of a watch wait that long and ``watch_grace_s`` more (bookmarks
    come about every minute).
    """

    max_event_bytes: int = 4 * 2**20
    max_list_bytes: int = 64 * 2**20
    page_size: int = 500
    timeout_s: float = 10.0
    list_deadline_s: float = 60.0
    watch_timeout_s: int = 300
    watch_grace_s: float = 60.0


class ApiServerPods:
    """This node's pods from the API server: a :class:`PodDirectorySource`."""

    def __init__(
        self,
        server: ApiServer,
        node: str,
        *,
        limits: WatchLimits | None = None,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.server = server
        self.node = node
        self.limits = limits or WatchLimits()
        self.backoff = backoff or Backoff(initial_s=1.0, max_s=60.0)
        self._rng = rng or random.Random()
        self._token = TokenFile(server.token_path)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._conn: http.client.HTTPSConnection | None = None
        self._answer: http.client.HTTPResponse | None = None
        # The directory, written by the thread: by UID, the version it is at, its state.
        self._pods: dict[str, PodMeta] = {}
        self._version = ""
        self._synced = False
        self._stale = False
        self._taken_at = 0.0
        self._published: PodDirectory | None = None
        self._listed_at = -1e9  # monotonic
        self._consistent = False  # the next list from etcd, not the watch cache (after 410)
        self._failures = 0  # failures in a row, since a watch was last opened
        self.lists = 0  # successful lists, for the tests and the log

    # ------------------------------------------------------------------ the protocol

    def start(self) -> None:
        """Begin listing and watching in a thread of its own."""
        self._thread = threading.Thread(target=self._run, name="apiserver-pods", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the watch (its connection closed under it) and wait for the thread."""
        self._stop.set()
        with self._lock:  # after the flag: see _send
            conn = self._conn
            sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):  # wakes the read; the thread closes it
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(self.limits.timeout_s + 5)

    def current(self) -> PodDirectory:
        """The directory as the last list and the events since make it."""
        with self._lock:
            if self._published is None:
                self._published = PodDirectory(
                    route=Route.APISERVER,
                    pods=MappingProxyType(dict(self._pods)),
                    synced=self._synced,
                    stale=self._stale,
                    taken_at=self._taken_at,
                )
            return self._published

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._version:
                    self._relist()
                self._watch()  # returns when the server ends the watch: watch on
            except RelistNeeded as err:
                log.info("apiserver_relist", node=self.node, reason=str(err))
                self._version, self._consistent = "", True
                if time.monotonic() - self._listed_at < 1.0:  # 410 at once: no list loop
                    self._failed(err)
            except (ApiServerError, OSError, http.client.HTTPException, ValueError) as err:
                self._failed(err)
            finally:
                self._drop_connection()

    def _recovered(self) -> None:
        """A watch is open again: the streak of failures, if any, is over."""
        if self._failures:
            log.info("apiserver_watch_recovered", node=self.node, failures=self._failures)
            self._failures = 0

    def _failed(self, err: Exception) -> None:
        """Mark the directory stale, log the first failure of a streak, wait."""
        if self._stop.is_set():
            return
        self._failures += 1
        failures = self._failures
        if isinstance(err, TooLarge):
            self._version = ""
        self._update(stale=True)
        wait = self.backoff.delay(failures, self._rng)
        if failures == 1:
            log.warning(
                "apiserver_watch_failed",
                node=self.node,
                server=self.server.netloc,
                error=f"{type(err).__name__}: {err}"[:300],
                retry_in_s=round(wait, 3),
            )
        self._stop.wait(wait)

    def _relist(self) -> None:
        """List the node's pods: from the API server's watch cache (``resourceVersion=0``,
        as the kubelet and every informer list, so that a DaemonSet's lists do not each
        read every pod of the cluster from etcd), or a consistent read after a 410 (the
        cache may then be older than the version that was gone)."""
        pods: dict[str, PodMeta] = {}
        token, version = "", ""
        while True:
            params = {"limit": str(self.limits.page_size)}
            if token:
                params["continue"] = token
            elif not self._consistent:
                params["resourceVersion"] = "0"
            body = self._get_body(pods_path(self.node, **params))
            page, version, token = list_answer(body)
            pods.update((p.uid, p) for p in page)
            if not token:
                break
        with self._lock:
            self._pods = pods
            self._version = version
            self._synced, self._stale = True, False
            self._taken_at = time.time()
            self._published = None
        self._listed_at = time.monotonic()
        self._consistent = False
        self.lists += 1

    def _watch(self) -> None:
        path = pods_path(
            self.node,
            watch="1",
            resourceVersion=self._version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(self.limits.watch_timeout_s),
        )
        answer = self._open(
            path, read_timeout=self.limits.watch_timeout_s + self.limits.watch_grace_s
        )
        self._update(stale=False)
        self._recovered()
        limit = self.limits.max_event_bytes
        opened, lines = time.monotonic(), 0
        while not self._stop.is_set():
            line = answer.readline(limit + 1)
            if not line:  # the server ended the watch; at once and empty is a failure
                if not lines and time.monotonic() - opened < 1.0:
                    raise ApiServerError("the watch ended at once with no event")
                return
            lines += 1
            if len(line) > limit:
                log.warning("apiserver_event_refused", node=self.node, limit_bytes=limit)
                raise TooLarge(f"a watch event over {limit} bytes")
            if line.strip():
                self._apply(watch_event(line))

    def _apply(self, event: WatchEvent) -> None:
        if event.type == "ERROR":
            if event.code == HTTPStatus.GONE:
                raise RelistNeeded(f"ERROR event 410: {event.message}")
            raise ApiServerError(f"ERROR event {event.code}: {event.message}")
        with self._lock:
            pod = event.pod
            if pod is not None and event.type == "DELETED":
                self._pods.pop(pod.uid, None)
            elif pod is not None:
                self._pods[pod.uid] = pod
            if event.resource_version:
                self._version = event.resource_version
            self._taken_at = time.time()
            self._published = None

    def _update(self, *, stale: bool) -> None:
        with self._lock:
            if self._stale != stale:
                self._stale = stale
                self._published = None

    # ------------------------------------------------------------------ HTTP

    def _get_body(self, path: str) -> bytes:
        """One list page, bounded in size and in time."""
        answer = self._open(path, read_timeout=self.limits.timeout_s)
        limit = self.limits.max_list_bytes
        length = answer.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise TooLarge(f"a list page over {limit} bytes ({length})")
        deadline = time.monotonic() + self.limits.list_deadline_s
        chunks: list[bytes] = []
        size = 0
        # read1: what has arrived, so that the deadline is checked at every receive (read
        # would wait for a whole chunk from a server sending a byte at a time).
        while chunk := answer.read1(_READ_CHUNK):
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"a list page over {limit} bytes")
            if time.monotonic() > deadline:
                raise ApiServerError(f"a list page not read in {self.limits.list_deadline_s}s")
            chunks.append(chunk)
        return b"".join(chunks)

    def _open(self, path: str, *, read_timeout: float) -> http.client.HTTPResponse:
        """A 200 answer to GET ``path``; the token read again and the request sent once
        more on a 401."""
        for attempt in (0, 1):
            answer = self._send(path, self._token.get(force=attempt > 0))
            if answer.status == HTTPStatus.OK:
                if self._conn is not None and self._conn.sock is not None:
                    self._conn.sock.settimeout(read_timeout)
                return answer
            reason = answer.read(512).decode("utf-8", errors="replace")
            self._drop_connection()
            if answer.status == HTTPStatus.UNAUTHORIZED and attempt == 0:
                continue
            raise _status_error(answer.status, reason)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, path: str, token: str) -> http.client.HTTPResponse:
        """GET ``path`` on a new connection. The connection is where :meth:`stop` finds it
        before it connects, and the stop flag is checked once it is connected: a stop at
        any moment either is seen here or shuts the connected socket under the read."""
        self._drop_connection()
        conn = http.client.HTTPSConnection(
            self.server.host,
            self.server.port,
            timeout=self.limits.timeout_s,
            context=self.server.ssl_context(),
        )
        with self._lock:
            self._conn = conn
        if self._stop.is_set():
            raise ApiServerError("stopping")
        conn.connect()
        with self._lock:
            if self._stop.is_set():
                raise ApiServerError("stopping")
        conn.request(
            "GET",
            path,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )
        answer = conn.getresponse()
        with self._lock:
            self._answer = answer
        return answer

    def _drop_connection(self) -> None:
        """Close the connection and its answer (in the reading thread only)."""
        with self._lock:
            conn, self._conn = self._conn, None
            answer, self._answer = self._answer, None
        if answer is not None:
            answer.close()
        if conn is not None:
            conn.close()


def _status_error(status: int, reason: str) -> ApiServerError:
    """The exception for an answer other than 200."""
    reason = " ".join(reason.split())[:200]
    if status == HTTPStatus.GONE:
        return RelistNeeded(f"410 Gone: {reason}")
    if status == HTTPStatus.UNAUTHORIZED:
        return Unauthorized(f"401 Unauthorized even with the token read again: {reason}")
    if status == HTTPStatus.FORBIDDEN:
        return ApiServerError(
            "403 Forbidden: the ServiceAccount may not list and watch pods (the "
            f"pod-identity-apiserver component grants it): {reason}"
        )
    return ApiServerError(f"{status}: {reason}")
