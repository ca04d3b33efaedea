"""The HTTP face: ``/metrics``, ``/healthz``, ``/readyz`` and a short index page.

A scrape never calls the kubelet. The exposition of a published view is
rendered once per view and format and shared by every scrape until the next
view (concurrent scrapes wait for one rendering). Only a few live lines, the
snapshot's age and the process metrics, are rendered per scrape and appended.
"""

from __future__ import annotations

import gzip
import html
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as om

from podres_exporter.collectors import Collector, RenderContext, collect_all
from podres_exporter.poller import Store
from podres_exporter.view import NodeView

log = structlog.get_logger(__name__)

_EOF = b"# EOF\n"


class _Families:
    """A prometheus_client collector over already-built families."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def _render(families: Iterable[Metric], openmetrics: bool) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    if openmetrics:
        body: bytes = om.generate_latest(registry)  # type: ignore[no-untyped-call]
        return body
    return generate_latest(registry)


class Exposition:
    """Renders and caches the exposition of the Store's current view."""

    def __init__(
        self,
        store: Store,
        collectors: Sequence[Collector],
        version: str,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._collectors = tuple(collectors)
        self._version = version
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._cache_generation = -1
        self._cache: dict[tuple[bool, bool], bytes] = {}
        self._live = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self._live)
        self.renders = 0  # how many times the cached part was rendered

    def _cached_part(self, view: NodeView | None, openmetrics: bool, gz: bool) -> bytes:
        generation = view.snapshot.generation if view else 0
        with self._lock:
            if generation != self._cache_generation:
                self._cache = {}
                self._cache_generation = generation
            key = (openmetrics, gz)
            if key not in self._cache:
                plain = self._cache.get((openmetrics, False))
                if plain is None:
                    families = (
                        collect_all(self._collectors, RenderContext(view, self._version))
                        if view
                        else []
                    )
                    plain = _render(families, openmetrics)
                    if openmetrics and plain.endswith(_EOF):
                        plain = plain[: -len(_EOF)]
                    self._cache[(openmetrics, False)] = plain
                    self.renders += 1
                if gz:
                    self._cache[key] = gzip.compress(plain, compresslevel=6, mtime=0)
            return self._cache[key]

    def _live_part(self, view: NodeView | None, openmetrics: bool) -> bytes:
        age = GaugeMetricFamily(
            "podres_snapshot_age_seconds",
            "Seconds since the served kubelet data was read; "
            "grows while the kubelet is unreachable.",
        )
        if view is not None and view.snapshot.reading is not None:
            age.add_metric([], max(0.0, self._wall() - view.snapshot.reading.taken_at))
        families = [age, *self._live.collect()]
        return _render(families, openmetrics)

    def body(self, *, openmetrics: bool, gz: bool) -> bytes:
        """The full exposition; gzip as two concatenated members when ``gz``."""
        view = self._store.current()
        cached = self._cached_part(view, openmetrics, gz)
        live = self._live_part(view, openmetrics)
        if gz:
            return cached + gzip.compress(live, compresslevel=1, mtime=0)
        return cached + live


INDEX = """<!doctype html>
<html><head><title>podres-exporter</title></head>
<body><h1>podres-exporter {version}</h1>
<p>Which container holds which CPUs, devices and memory on this node.</p>
<ul>
<li><a href="/metrics">/metrics</a>: Prometheus metrics</li>
<li><a href="/healthz">/healthz</a>: the process is alive</li>
<li><a href="/readyz">/readyz</a>: a first kubelet reading was taken</li>
</ul>
<p>kubelet socket: <code>{socket}</code></p>
</body></html>
"""


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # access logs are noise for a scrape target

    def _send(
        self,
        status: HTTPStatus,
        body: bytes,
        content_type: str,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        srv = self.server
        if path == "/metrics":
            _, content_type = choose_encoder(self.headers.get("Accept", ""))
            openmetrics = content_type.startswith("application/openmetrics-text")
            gz = "gzip" in self.headers.get("Accept-Encoding", "")
            body = srv.exposition.body(openmetrics=openmetrics, gz=gz)
            extra = {"Content-Encoding": "gzip"} if gz else {}
            self._send(HTTPStatus.OK, body, content_type, extra)
        elif path == "/healthz":
            ok = srv.healthy()
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, b"ok\n" if ok else b"poller stopped\n", "text/plain; charset=utf-8")
        elif path == "/readyz":
            view = srv.store.current()
            if view is not None and view.snapshot.ready:
                self._send(HTTPStatus.OK, b"ready\n", "text/plain; charset=utf-8")
            else:
                why = (view.snapshot.kubelet_error if view else None) or "no kubelet reading yet"
                self._send(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    f"not ready: {why}\n".encode(),
                    "text/plain; charset=utf-8",
                )
        elif path == "/":
            page = INDEX.format(
                version=html.escape(srv.version), socket=html.escape(srv.socket_path)
            )
            self._send(HTTPStatus.OK, page.encode(), "text/html; charset=utf-8")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")


class MetricsServer(ThreadingHTTPServer):
    """The exporter's HTTP server; ``serve_forever`` in a thread, ``shutdown`` to stop."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        address: tuple[str, int],
        *,
        store: Store,
        exposition: Exposition,
        version: str,
        socket_path: str,
        healthy: Callable[[], bool] = lambda: True,
    ) -> None:
        host = address[0]
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.store = store
        self.exposition = exposition
        self.version = version
        self.socket_path = socket_path
        self.healthy = healthy
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        """The base URL clients use, with the port actually bound."""
        host, port = self.server_address[:2]
        if isinstance(host, bytes):
            host = host.decode()
        shown = "localhost" if host in ("0.0.0.0", "", "::") else host  # noqa: S104 - display only
        if ":" in shown:
            shown = f"[{shown}]"
        return f"http://{shown}:{port}"
