"""The device plugin's own metrics and what its web server serves.

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
* ``podres_plugin_build_info{version,revision,python_version}``: 1;
* ``podres_plugin_node_info{node}``: 1, the node's name (``--node-name``, else
  ``NODE_NAME``, else the host name).

Counters serve no ``*_created`` series (docs/plugin.md lists every series served).

HTTP (``--listen-address``, :mod:`podres_exporter.daemon.web`): ``/metrics``, ``/healthz``
(200 while the health loop runs), ``/readyz`` (200 once every resource is registered
with the kubelet) and an index page ``/``; any other path is 404.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics

from podres_exporter.buildinfo import BuildInfo
from podres_exporter.daemon.web import Check, Index, Site, registry_metrics

__all__ = ["PluginMetrics", "plugin_site"]

HEALTH_LABELS = ("Healthy", "Unhealthy")


class PluginMetrics:
    """The plugin's metrics on a private registry; every method is thread-safe."""

    def __init__(
        self,
        version: str,
        resources: Iterable[str] = (),
        *,
        node: str = "",
        build: BuildInfo | None = None,
    ) -> None:
        # The client's counters add a *_created series each, which no rule or board reads;
        # the switch is the client's own, process-wide (PROMETHEUS_DISABLE_CREATED_SERIES).
        disable_created_metrics()  # type: ignore[no-untyped-call]  # the client types it not
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
        b = build or BuildInfo(version)
        Gauge(
            "podres_plugin_build_info",
            "The plugin's version, the git commit it was built from (unknown when not known) "
            "and the Python version it runs on; always 1.",
            ["version", "revision", "python_version"],
            registry=r,
        ).labels(version=version, revision=b.revision, python_version=b.python_version).set(1)
        Gauge(
            "podres_plugin_node_info",
            "The name of the node the plugin runs on; always 1.",
            ["node"],
            registry=r,
        ).labels(node=node).set(1)
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
        """Every resource registered; true with none to register (a resource file that
        declares nothing: the plugin is ready, and advertises nothing)."""
        with self._lock:
            return all(self._is_registered.values())

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


def plugin_site(
    metrics: PluginMetrics,
    version: str,
    *,
    health: Check,
    facts: tuple[tuple[str, str], ...] = (),
) -> Site:
    """The plugin's web site: its registry on ``/metrics``, ``health`` on ``/healthz``,
    every resource registered on ``/readyz``."""

    def readiness() -> tuple[bool, str]:
        if metrics.all_registered():
            return True, "ok"
        return False, f"not registered: {', '.join(metrics.unregistered())}"

    return Site(
        metrics=registry_metrics(metrics.registry),
        health=health,
        readiness=readiness,
        index=Index(
            title="podres device plugin",
            version=version,
            summary="Kubelet device plugin (API v1beta1) for the resources of its resource file.",
            healthz="the health checks run",
            readyz="every resource is registered with the kubelet",
            facts=facts,
        ),
    )
