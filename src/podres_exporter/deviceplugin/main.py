"""``podres plugin``: the device plugin's settings and composition root.

Precedence as everywhere in the project: flags > environment (``PODRES_*``, the
flag upper-cased with ``.`` and ``-`` as ``_``) > the resource file's ``[plugin]``
table (for ``--health-interval`` / ``--xid-unhealthy-for``) > defaults.

Exit status: 0 after SIGTERM / SIGINT (sockets removed), 2 on a bad flag or
resource file (the message names the flag or the key), 1 when the plugin cannot
start for another reason (no NVML bindings installed for an nvml resource). SIGHUP
reads the resource file again and logs whether it changed; a restart applies it.

The metrics listen on the loopback by default (``127.0.0.1:9843``): the plugin's web
page is for the node itself; a deployment that scrapes it says ``:9843``.

This module imports neither gRPC nor the hardware sources at import time, so the
CLI can build its parser cheaply; :func:`build_plugin` imports them. The resource
file is read once, by :func:`load_plugin_config`; :func:`build_plugin` composes the
plugin from the settings and that config.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from podres_exporter import __version__
from podres_exporter.buildinfo import BuildInfo, build_info
from podres_exporter.core.errors import ConfigError, PodresError
from podres_exporter.daemon import logconf, process
from podres_exporter.daemon.flags import (
    LOG_FORMAT,
    LOG_LEVEL,
    NODE_NAME,
    PATH_SYSFS,
    WEB_CONFIG_FILE,
    node_name,
)
from podres_exporter.daemon.options import Option, given, resolve
from podres_exporter.daemon.values import format_duration, parse_listen_address, parse_path
from podres_exporter.deviceplugin.config import (
    DEFAULT_HEALTH_INTERVAL_S,
    DEFAULT_XID_UNHEALTHY_FOR_S,
    HEALTH_INTERVAL,
    RESOURCES,
    XID_UNHEALTHY_FOR,
    PluginConfig,
    load_config,
)

if TYPE_CHECKING:
    from podres_exporter.daemon.web import WebServer
    from podres_exporter.daemon.web.config import WebConfigWatcher
    from podres_exporter.deviceplugin.lifecycle import PluginManager, Timing
    from podres_exporter.deviceplugin.metrics import PluginMetrics
    from podres_exporter.deviceplugin.monitor import Monitor
    from podres_exporter.sources.gpu import GpuBackend

__all__ = [
    "DEFAULT_DEVICE_PLUGIN_DIR",
    "DEFAULT_LISTEN",
    "PLUGIN_OPTIONS",
    "DevicePlugin",
    "PluginHealth",
    "PluginSettings",
    "add_plugin_arguments",
    "add_plugin_parser",
    "build_plugin",
    "load_plugin_config",
    "plugin_settings",
    "run_plugin",
]

log = structlog.get_logger(__name__)

DEFAULT_DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_LISTEN = "127.0.0.1:9843"

_NOT_CONFIG = (
    "is the settings file of podres export; the plugin's resource file is --resources FILE "
    f"(or {RESOURCES.env})"
)

PLUGIN_OPTIONS: tuple[Option, ...] = (
    Option("--device-plugin-dir", "device_plugin_dir", parse_path, DEFAULT_DEVICE_PLUGIN_DIR,
           "The kubelet's device-plugins directory: kubelet.sock is there, and the plugin's own "
           "sockets go there. Mount the DIRECTORY: the kubelet re-creates its socket."),
    Option("--listen-address", "listen_address", parse_listen_address, DEFAULT_LISTEN,
           "HOST:PORT for the plugin's /metrics, /healthz and /readyz. The loopback keeps them "
           "to the node; :9843 listens on every interface, for Prometheus to scrape it."),
    PATH_SYSFS,
    Option("--path.dev", "path_dev", parse_path, "/dev",
           "Where the plugin sees the host's /dev (e.g. /host/dev) for dev rules; containers "
           "are always given the host's /dev paths."),
    Option("--health-interval", "health_interval_s", HEALTH_INTERVAL, None,
           "Time between two health checks (re-discovery); overrides the resource file's "
           "[plugin] health_interval. A change reaches the kubelet at the next check. At least "
           "50ms: each check reads every device. At most 1m: a device gone bad must reach the "
           "kubelet within a minute.",
           fallback=f"the file's plugin.health_interval, else "
           f"{format_duration(DEFAULT_HEALTH_INTERVAL_S)}"),
    Option("--xid-unhealthy-for", "xid_unhealthy_for_s", XID_UNHEALTHY_FOR, None,
           "How long a GPU stays Unhealthy after a critical XID; overrides the resource file's "
           "[plugin] xid_unhealthy_for. At most 24h: a GPU still failing after a day reports "
           "new XIDs.",
           fallback=f"the file's plugin.xid_unhealthy_for, else "
           f"{format_duration(DEFAULT_XID_UNHEALTHY_FOR_S)}"),
    WEB_CONFIG_FILE,
    NODE_NAME,
    LOG_LEVEL,
    LOG_FORMAT,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """Every setting of the device plugin, parsed. See :data:`PLUGIN_OPTIONS`.

    ``health_interval_s`` / ``xid_unhealthy_for_s`` None: the resource file decides.
    """

    config_path: str
    device_plugin_dir: str = DEFAULT_DEVICE_PLUGIN_DIR
    listen_address: tuple[str, int] = ("127.0.0.1", 9843)
    path_sysfs: str = "/sys"
    path_dev: str = "/dev"
    health_interval_s: float | None = None
    xid_unhealthy_for_s: float | None = None
    log_level: str = "info"
    log_format: str = "auto"
    web_config_file: str | None = None
    # --node-name, else NODE_NAME, else the host name (resolved by plugin_settings).
    node_name: str = ""
    # The build's revision and Python version (podres_plugin_build_info).
    build: BuildInfo | None = None


# ----------------------------------------------------------------------------- CLI


def add_plugin_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the plugin's flags to ``parser`` (a sub-parser or a top-level one)."""
    for opt in (RESOURCES, *PLUGIN_OPTIONS):
        opt.add_to(parser)
    # Accepted only to be refused with the flag's new name (see RESOURCES), not shown.
    parser.add_argument("--config", dest="--config", default=None, help=argparse.SUPPRESS)
    return parser


def add_plugin_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``plugin`` command to an ``add_subparsers()`` object; returns its parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "plugin",
        help="run the kubelet device plugin (advertises the configured hardware)",
        description="Kubelet device plugin (API v1beta1) for the resources of --resources.",
    )
    return add_plugin_arguments(parser)


def plugin_settings(ns: argparse.Namespace, env: Mapping[str, str]) -> PluginSettings:
    """PluginSettings from parsed arguments and the environment; ConfigError names the
    flag and where the bad value came from."""
    if getattr(ns, "--config", None) is not None:
        raise ConfigError(f"--config {_NOT_CONFIG}")
    flags = given(ns, (RESOURCES, *PLUGIN_OPTIONS))
    values = {opt.attr: resolve(opt, flags, env) for opt in PLUGIN_OPTIONS}
    config_path = resolve(RESOURCES, flags, env)
    if config_path is None and "PODRES_CONFIG" in env:
        raise ConfigError(f"the environment variable PODRES_CONFIG {_NOT_CONFIG}")
    if config_path is None:
        raise ConfigError(
            f"--resources FILE is required (or the environment variable {RESOURCES.env})"
        )
    values["node_name"] = node_name(values["node_name"], env)
    return PluginSettings(config_path=config_path, build=build_info(__version__, env), **values)


def load_plugin_config(settings: PluginSettings) -> PluginConfig:
    """Read the resource file of ``settings``, with its ``--health-interval`` and
    ``--xid-unhealthy-for`` overrides; ConfigError naming the file and the key."""
    return load_config(
        settings.config_path,
        health_interval_s=settings.health_interval_s,
        xid_unhealthy_for_s=settings.xid_unhealthy_for_s,
    )


# ---------------------------------------------------------------------- composition


@dataclass(slots=True)
class PluginHealth:
    """The plugin's ``/healthz``: the health loop runs and checks (``Monitor.alive``),
    every resource's thread runs (``PluginManager.alive``) and so does the web server's
    loop. ``http`` is set once the server exists (it serves this check)."""

    monitor: Monitor
    manager: PluginManager
    http: WebServer | None = None

    def __call__(self) -> tuple[bool, str]:
        if not self.monitor.alive():
            return False, "health checks stalled"
        if not self.manager.alive():
            return False, "a resource's plugin thread stopped"
        if self.http is not None and not self.http.alive():
            return False, "web server stopped"
        return True, "ok"


class DevicePlugin:
    """The running plugin: health loop, one socket per resource, HTTP server.

    ``reloads``: what SIGHUP runs (:meth:`reload_config`, the web config's reload).
    """

    def __init__(
        self,
        settings: PluginSettings,
        config: PluginConfig,
        *,
        monitor: Monitor,
        manager: PluginManager,
        metrics: PluginMetrics,
        http: WebServer,
        web_config: WebConfigWatcher | None = None,
        owned_backend: GpuBackend | None,
    ) -> None:
        self.settings = settings
        self.config = config
        self.monitor = monitor
        self.manager = manager
        self.metrics = metrics
        self.http = http
        self._owned_backend = owned_backend
        self.web_config = web_config
        self.reloads: list[process.Reload] = [self.reload_config]
        if web_config is not None:
            self.reloads.append(web_config.reload)

    @property
    def url(self) -> str:
        return self.http.url

    def start(self) -> None:
        """First health check (so the first ListAndWatch is complete), then serve. A
        resource file that declares nothing is logged once (``no_resources_configured``):
        the plugin then registers nothing and serves its pages alone."""
        try:
            self.monitor.check()
        except Exception as err:  # noqa: BLE001 - the health loop retries; serve regardless
            log.error("health_check_failed", error=repr(err))
        self.monitor.start()
        self.manager.start()
        if self.web_config is not None:
            self.web_config.start()
        self.http.start("podres-plugin-http")
        if not self.config.resources:
            log.warning(
                "no_resources_configured",
                path=self.settings.config_path,
                advertises="nothing",
                hint="declare the devices to advertise in [[resource]] tables",
            )
        log.info(
            "plugin_started",
            version=__version__,
            resources=[r.name for r in self.config.resources],
            device_plugin_dir=self.settings.device_plugin_dir,
            url=self.url,
            health_interval_s=self.config.health_interval_s,
        )

    def reload_config(self) -> None:
        """Read the resource file again (SIGHUP). A change is logged, not applied: a
        restart applies it (the sockets, registrations and streams stay as they are); a
        file that no longer validates is logged and the running configuration kept."""
        path = self.settings.config_path
        try:
            fresh = load_plugin_config(self.settings)
        except ConfigError as err:
            log.error("plugin_config_invalid", path=path, error=str(err), applies="nothing")
            return
        if fresh == self.config:
            log.info("plugin_config_unchanged", path=path)
            return
        before = {r.name: r for r in self.config.resources}
        after = {r.name: r for r in fresh.resources}
        log.warning(
            "plugin_config_changed",
            path=path,
            added=sorted(after.keys() - before.keys()),
            removed=sorted(before.keys() - after.keys()),
            changed=sorted(n for n in before.keys() & after.keys() if before[n] != after[n]),
            plugin_settings_changed=(fresh.health_interval_s, fresh.xid_unhealthy_for_s)
            != (self.config.health_interval_s, self.config.xid_unhealthy_for_s),
            applies="at the next restart of the plugin",
        )

    def stop(self, reason: str = "requested") -> None:
        """Remove the sockets, stop serving and checking; within a few seconds."""
        self.manager.stop()
        self.monitor.stop()
        self.http.stop()
        if self.web_config is not None:
            self.web_config.stop()
        if self._owned_backend is not None:
            self._owned_backend.close()
        log.info("plugin_stopped", reason=reason)


def build_plugin(
    settings: PluginSettings,
    config: PluginConfig,
    *,
    gpu_backend: GpuBackend | None = None,
    clock: Callable[[], float] = time.monotonic,
    timing: Timing | None = None,
) -> DevicePlugin:
    """Compose the plugin for ``config`` (see :func:`load_plugin_config`).
    ``gpu_backend``: injected by tests and the demo; by default NVML
    (``open_nvml_backend``), opened only when a resource uses nvml."""
    from podres_exporter.deviceplugin.lifecycle import PluginManager, Timing
    from podres_exporter.deviceplugin.metrics import PluginMetrics, plugin_site
    from podres_exporter.deviceplugin.monitor import Discoverer, Monitor

    owned: GpuBackend | None = None
    if gpu_backend is None and config.uses_nvml:
        from podres_exporter.sources.gpu import open_nvml_backend

        gpu_backend = owned = open_nvml_backend()
    metrics = PluginMetrics(
        __version__,
        (r.name for r in config.resources),
        node=settings.node_name,
        build=settings.build,
    )
    discoverer = Discoverer(
        config,
        sysfs_root=settings.path_sysfs,
        dev_root=settings.path_dev,
        gpu_backend=gpu_backend,
    )
    monitor = Monitor(config, discoverer, metrics, clock=clock)
    manager = PluginManager(
        config.resources,
        monitor.boards,
        metrics,
        plugin_dir=settings.device_plugin_dir,
        health_check=monitor.check,
        timing=timing or Timing(),
    )
    health = PluginHealth(monitor, manager)
    site = plugin_site(
        metrics,
        __version__,
        health=health,
        facts=(("resources", ", ".join(r.name for r in config.resources) or "none declared"),),
    )
    try:
        web_config = process.web_config(settings.web_config_file)
        http = process.listen(settings.listen_address, site, web_config=web_config)
    except ConfigError:
        if owned is not None:
            owned.close()
        raise
    health.http = http
    return DevicePlugin(
        settings,
        config,
        monitor=monitor,
        manager=manager,
        metrics=metrics,
        http=http,
        web_config=web_config,
        owned_backend=owned,
    )


def run_plugin(
    ns: argparse.Namespace,
    env: Mapping[str, str],
    *,
    gpu_backend: GpuBackend | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Run the device plugin until SIGTERM / SIGINT (or ``stop``); the exit status."""
    try:
        settings = plugin_settings(ns, env)
        config = load_plugin_config(settings)
        process.configure_logging(settings.log_level, settings.log_format)
        plugin = build_plugin(settings, config, gpu_backend=gpu_backend)
    except ConfigError as err:
        logconf.say(sys.stderr, f"podres plugin: error: {err}")
        return 2
    except PodresError as err:
        logconf.say(sys.stderr, f"podres plugin: error: {err}")
        return 1
    process.tune_gc()
    # Before start: a SIGTERM still cleans up, and a SIGHUP never ends the process.
    # The stop inside too: a second SIGTERM or Ctrl-C while it stops is noted, not a
    # KeyboardInterrupt through the stop.
    with process.stop_on_signals(stop, reload=plugin.reloads, last=True) as stopping:
        plugin.start()
        reason = stopping.wait()
        plugin.stop(reason)
    return 0
