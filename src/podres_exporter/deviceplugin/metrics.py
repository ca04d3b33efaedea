"""The device plugin's own metrics and its small HTTP server.

Metrics (a private registry; all alpha):

* ``podres_plugin_devices{resource,health}``: advertised device ids by health
  (``Healthy`` / ``Unhealthy``), as the last ListAndWatch message says;
* ``podres_plugin_allocations_total{resource,result}``: Allocate answers per
  container request, ``result`` = ``success``, ``unknown`` (ids we do not
  advertise) or ``unhealthy``;
* ``podres_plugin_registrations_total{resource,result}``: Register calls to the
  kubelet, ``result`` = ``success`` or ``error``;
* ``podres_plugin_registered{resource}``: 1 while the kubelet has our current
  socket registered (as far as the plugin knows), else 0;
* ``podres_plugin_kubelet_restarts_total``: re-creations of ``kubelet.sock`` seen;
* ``podres_plugin_list_and_watch_streams{resource}``: open ListAndWatch streams;
* ``podres_plugin_build_info{version}``: 1.

HTTP (``--listen-address``): ``/metrics``, ``/healthz`` (200 while the health loop
runs) and ``/readyz`` (200 once every resource is registered with the kubelet);
any other path is 404. A threaded wsgiref server with prometheus_client's WSGI app
behind a small router.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIEnvironment

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app

__all__ = ["MetricsServer", "PluginMetrics"]

HEALTH_LABELS = ("Healthy", "Unhealthy")


class PluginMetrics:
    """The plugin's metrics on a private registry; every method is thread-safe."""

    def __init__(self, version: str, resources: Iterable[str] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self._devices = Gauge(
            "podres_plugin_devices",
            "Device ids advertised to the kubelet, by health.",
            ["resource", "health"],
            registry=r,
        )
        self._allocations = Counter(
            "podres_plugin_allocations_total",
            "Allocate answers per container request, by result (success, unknown, unhealthy).",
            ["resource", "result"],
            registry=r,
        )
        self._registrations = Counter(
            "podres_plugin_registrations_total",
            "Register calls to the kubelet, by result (success, error).",
            ["resource", "result"],
            registry=r,
        )
        self._registered = Gauge(
            "podres_plugin_registered",
            "1 while the kubelet has the plugin's current socket registered.",
            ["resource"],
            registry=r,
        )
        self._restarts = Counter(
            "podres_plugin_kubelet_restarts",
            "Times kubelet.sock was re-created (kubelet restarts) while the plugin ran.",
            registry=r,
        )
        self._streams = Gauge(
            "podres_plugin_list_and_watch_streams",
            "Open ListAndWatch streams.",
            ["resource"],
            registry=r,
        )
        info = Gauge(
            "podres_plugin_build_info",
            "The plugin's version; always 1.",
            ["version"],
            registry=r,
        )
        info.labels(version=version).set(1)
        self._lock = threading.Lock()
        self._is_registered: dict[str, bool] = {}
        for name in resources:
            self.set_devices(name, healthy=0, unhealthy=0)
            self.set_registered(name, False)
            self._streams.labels(resource=name).set(0)
            for result in ("success", "error"):
                self._registrations.labels(resource=name, result=result)
            for result in ("success", "unknown", "unhealthy"):
                self._allocations.labels(resource=name, result=result)

    def set_devices(self, resource: str, *, healthy: int, unhealthy: int) -> None:
        self._devices.labels(resource=resource, health="Healthy").set(healthy)
        self._devices.labels(resource=resource, health="Unhealthy").set(unhealthy)

    def allocation(self, resource: str, result: str) -> None:
        self._allocations.labels(resource=resource, result=result).inc()

    def registration(self, resource: str, *, ok: bool) -> None:
        self._registrations.labels(resource=resource, result="success" if ok else "error").inc()

    def set_registered(self, resource: str, registered: bool) -> None:
        with self._lock:
            self._is_registered[resource] = registered
        self._registered.labels(resource=resource).set(1 if registered else 0)

    def all_registered(self) -> bool:
        with self._lock:
            return bool(self._is_registered) and all(self._is_registered.values())

    def unregistered(self) -> list[str]:
        with self._lock:
            return sorted(name for name, ok in self._is_registered.items() if not ok)

    def kubelet_restart(self) -> None:
        self._restarts.inc()

    def stream_opened(self, resource: str) -> None:
        self._streams.labels(resource=resource).inc()

    def stream_closed(self, resource: str) -> None:
        self._streams.labels(resource=resource).dec()


# ------------------------------------------------------------------------------ HTTP


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log: scrapes every few seconds would drown the plugin's own log."""


def _ipv6_server(host: str) -> type[_ThreadingServer]:
    if ":" not in host:
        return _ThreadingServer

    class _Server6(_ThreadingServer):
        address_family = socket.AF_INET6

    return _Server6


class MetricsServer:
    """``/metrics``, ``/healthz``, ``/readyz`` on ``address`` (host, port; port 0 picks one)."""

    def __init__(
        self,
        address: tuple[str, int],
        metrics: PluginMetrics,
        *,
        healthy: Callable[[], bool],
    ) -> None:
        self._metrics = metrics
        self._healthy = healthy
        self._metrics_app = make_wsgi_app(metrics.registry)
        host, port = address
        self._server = make_server(
            host,
            port,
            self._app,
            server_class=_ipv6_server(host),
            handler_class=_QuietHandler,
        )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        if host in ("0.0.0.0", "::"):  # noqa: S104 - naming the wildcard, not binding it
            host = "127.0.0.1" if host == "0.0.0.0" else "::1"  # noqa: S104
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            exposition: Iterable[bytes] = self._metrics_app(environ, start_response)
            return exposition
        if path == "/healthz":
            ok = self._healthy()
            return _text(start_response, ok, "ok\n" if ok else "health checks stalled\n")
        if path == "/readyz":
            missing = self._metrics.unregistered()
            ready = self._metrics.all_registered()
            body = "ok\n" if ready else f"not registered: {', '.join(missing) or 'none yet'}\n"
            return _text(start_response, ready, body)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /metrics, /healthz or /readyz\n"]

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},  # how soon stop() is noticed
            name="podres-plugin-http",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for a serve_forever that must run
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()


def _text(start_response: StartResponse, ok: bool, body: str) -> list[bytes]:
    status = "200 OK" if ok else "503 Service Unavailable"
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body.encode()]
