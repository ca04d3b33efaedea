"""A real HTTPS server speaking the API server's pod list and watch protocol, for the tests.

It serves ``GET /api/v1/pods`` with a ``spec.nodeName`` field selector: a paged list
(``limit``, ``continue``) at the current resource version, or a chunked watch stream from a
resource version (``watch=1``), with BOOKMARK events when asked. The test drives it: pods
added, changed and deleted, bookmarks sent, history compacted (a watch from before answers
``410 Gone``, or an ERROR event with code 410), the watches' connections dropped, the
accepted token changed. Every request is recorded (path and token). Real TLS, from a CA of
the test's own (``tests/daemon/web/tlsutil.py``).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from tests.daemon.web.tlsutil import Issued, issue, make_ca

NODE = "node-a"


def pod(
    name: str,
    *,
    uid: str | None = None,
    node: str = NODE,
    namespace: str = "team-a",
    labels: dict[str, Any] | None = None,
    owner: tuple[str, str] | None = None,
    phase: str = "Running",
    qos: str = "BestEffort",
    **extra_meta: Any,
) -> dict[str, Any]:
    """A pod object as the API server's JSON has it."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"}
    meta["labels"] = labels or {}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "controller": True}
        ]
    meta.update(extra_meta)
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": phase, "qosClass": qos},
    }


class State:
    """What the server holds: pods, history, token, and the test's commands."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.version = 100
        self.pods: dict[str, dict[str, Any]] = {}
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.oldest = 0  # a watch from a version before this is gone
        self.accepted = "token-1"  # the bearer token the server takes
        self.gone_as_error = False  # answer an old version with an ERROR event, not 410
        self.generation = 0  # bumped to drop every watch's connection
        self.expire_generation = 0  # bumped to send an ERROR 410 on every open watch
        self.requests: list[tuple[str, str]] = []
        self.watching = 0
        self.closing = False
        self.hang = False  # a watch is never answered (no status line)
        self.dribble_s = 0.0  # a list's body sent a byte at a time, this long apart

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.history.append((self.version, kind, obj))
        self.cond.notify_all()

    def put(self, obj: dict[str, Any]) -> None:
        """Add or change a pod: ADDED or MODIFIED for the watchers."""
        with self.cond:
            uid = obj["metadata"]["uid"]
            kind = "MODIFIED" if uid in self.pods else "ADDED"
            self.pods[uid] = obj
            self._event(kind, obj)

    def delete(self, uid: str) -> None:
        """Delete a pod: DELETED with its last state."""
        with self.cond:
            self._event("DELETED", self.pods.pop(uid))

    def bookmark(self) -> int:
        """A BOOKMARK at a new version (as if other nodes' pods changed); that version."""
        with self.cond:
            self.version += 1
            meta = {"resourceVersion": str(self.version)}
            self.history.append((self.version, "BOOKMARK", {"kind": "Pod", "metadata": meta}))
            self.cond.notify_all()
            return self.version

    def compact(self, keep_from: int | None = None) -> None:
        """Forget the history before ``keep_from`` (default: all of it)."""
        with self.cond:
            self.oldest = keep_from if keep_from is not None else self.version

    def drop_watches(self) -> None:
        """Close every open watch's connection without a word."""
        with self.cond:
            self.generation += 1
            self.cond.notify_all()

    def expire_watches(self) -> None:
        """Send every open watch an ERROR event with code 410, and compact."""
        with self.cond:
            self.oldest = self.version
            self.expire_generation += 1
            self.cond.notify_all()

    def accept(self, bearer: str) -> None:
        """Take ``bearer`` as the token from now on (and no other)."""
        with self.cond:
            self.accepted = bearer

    def lists(self) -> int:
        """How many list requests (first pages) were served."""
        return sum(1 for p, _ in self.requests if "watch=1" not in p and "continue=" not in p)


def _status(code: int, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": "Expired" if code == 410 else "", "message": message}  # fmt: skip


class Handler(http.server.BaseHTTPRequestHandler):
    """GET /api/v1/pods: list or watch."""

    protocol_version = "HTTP/1.1"
    state: State

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        auth = self.headers.get("Authorization", "")
        with self.state.cond:
            self.state.requests.append((self.path, auth))
            accepted = self.state.accepted
        if auth != f"Bearer {accepted}":
            self._json(401, _status(401, "Unauthorized"))
            return
        if url.path != "/api/v1/pods" or not query.get("fieldSelector", "").startswith(
            "spec.nodeName="
        ):
            self._json(400, _status(400, "this server serves node-scoped pod lists only"))
            return
        node = query["fieldSelector"].split("=", 1)[1]
        if query.get("watch") == "1" and self.state.hang:
            with self.state.cond:
                self.state.cond.wait_for(lambda: self.state.closing or not self.state.hang)
            self.close_connection = True
            return
        if query.get("watch") == "1":
            self._watch(node, int(query.get("resourceVersion") or 0), query)
        else:
            self._list(node, int(query.get("limit") or 0), int(query.get("continue") or 0))

    def _json(self, code: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not self.state.dribble_s:
            self.wfile.write(body)
            return
        for i in range(len(body)):
            if self.state.closing:
                return
            self.wfile.write(body[i : i + 1])
            self.wfile.flush()
            time.sleep(self.state.dribble_s)

    def _list(self, node: str, limit: int, start: int) -> None:
        with self.state.cond:
            items = [p for p in self.state.pods.values() if p["spec"]["nodeName"] == node]
            version = self.state.version
        items.sort(key=lambda p: p["metadata"]["uid"])
        end = start + limit if limit else len(items)
        meta = {"resourceVersion": str(version)}
        if end < len(items):
            meta["continue"] = str(end)
        self._json(200, {"kind": "PodList", "metadata": meta, "items": items[start:end]})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _watch(self, node: str, since: int, query: dict[str, str]) -> None:
        state = self.state
        with state.cond:
            gone = since < state.oldest
        if gone and not state.gone_as_error:
            self._json(410, _status(410, "too old resource version"))
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if gone:
            self._send_event("ERROR", _status(410, "too old resource version"))
            self._chunk(b"")
            return
        bookmarks = query.get("allowWatchBookmarks") == "true"
        with state.cond:
            state.watching += 1
            generation, expire = state.generation, state.expire_generation
        try:
            self._stream(node, since, bookmarks, generation, expire)
        finally:
            with state.cond:
                state.watching -= 1

    def _stream(self, node: str, since: int, bookmarks: bool, generation: int, expire: int) -> None:
        state = self.state

        def woken(since: int) -> bool:
            return bool(
                state.closing
                or state.generation != generation
                or state.expire_generation != expire
                or (state.history and state.history[-1][0] > since)
            )

        while True:
            with state.cond:
                state.cond.wait_for(partial(woken, since), timeout=0.2)
                if state.closing or state.generation != generation:
                    self.close_connection = True
                    return  # dropped: no last chunk
                if state.expire_generation != expire:
                    self._send_event("ERROR", _status(410, "too old resource version"))
                    self._chunk(b"")
                    return
                events = [e for e in state.history if e[0] > since]
            for version, kind, obj in events:
                since = version
                if kind == "BOOKMARK":
                    if bookmarks:
                        self._send_event(kind, obj)
                elif obj["spec"]["nodeName"] == node:
                    self._send_event(kind, obj)

    def _send_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")


@contextlib.contextmanager
def api_server(directory: Path) -> Iterator[tuple[State, int, Issued]]:
    """The server on the loopback over TLS: its state, port, and the CA to trust."""
    ca = make_ca("podres test cluster CA")
    cert = issue(ca, "kube-apiserver")
    (directory / "tls.crt").write_bytes(cert.cert_pem)
    (directory / "tls.key").write_bytes(cert.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    state = State()
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, int(server.server_address[1]), ca
    finally:
        with state.cond:
            state.closing = True
            state.cond.notify_all()
        server.shutdown()
        server.server_close()
        thread.join(10)
