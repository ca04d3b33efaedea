"""The flags several commands share, each declared once.

``podres export`` and ``podres snapshot`` (the exporter), ``podres plugin``, ``podres top``
and the simulator's own command (``python -m podres_sim``) put these very objects in their
tables, so that a flag means the same, reads the same variable and shows the same help
wherever it appears. A flag of one command only is declared beside that command.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping

from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon.options import Option
from podres_exporter.daemon.values import (
    parse_log_format,
    parse_log_level,
    parse_node_name,
    parse_path,
)

LOG_LEVEL = Option(
    "--log-level", "log_level", parse_log_level, "info", "debug, info, warning or error."
)
LOG_FORMAT = Option(
    "--log-format",
    "log_format",
    parse_log_format,
    "auto",
    "auto (JSON unless stderr is a terminal), json or console.",
)
PATH_SYSFS = Option(
    "--path.sysfs",
    "path_sysfs",
    parse_path,
    "/sys",
    "Root of sysfs (the host's /sys mounted into the pod, e.g. /host/sys).",
)
PATH_PROCFS = Option(
    "--path.procfs",
    "path_procfs",
    parse_path,
    "/proc",
    "Root of procfs (the host's /proc mounted into the pod, e.g. /host/proc): per-CPU "
    "time and the cgroups of GPU processes.",
)
KUBELET_SOCKET = Option(
    "--kubelet-socket",
    "kubelet_socket",
    parse_path,
    "/var/lib/kubelet/pod-resources/kubelet.sock",
    "The kubelet's pod-resources socket. Mount its DIRECTORY into the pod: the kubelet "
    "re-creates the socket file at every start.",
)
WEB_CONFIG_FILE = Option(
    "--web.config.file",
    "web_config_file",
    parse_path,
    None,
    "A web-config file, the format of the Prometheus exporters (TLS, basic auth, response "
    "headers) for /metrics and the index page; /healthz and /readyz stay open. Re-read when "
    "it or a file it names changes, and on SIGHUP (docs/security.md). Unset: plain HTTP, "
    "open to whoever reaches the port.",
)
NODE_NAME = Option(
    "--node-name",
    "node_name",
    parse_node_name,
    None,
    "The name of this node, exported on the node info series (podres_node_info, "
    "podres_plugin_node_info) so that boards and rules find the node whatever the scrape "
    "set-up.",
    fallback="the environment variable NODE_NAME (the manifests set it from the downward "
    "API's spec.nodeName), else the host name",
)
NODE_NAME_FALLBACK = "NODE_NAME"
"""The variable the manifests fill from the downward API, read when --node-name is unset."""


def node_name(
    given: str | None,
    env: Mapping[str, str],
    hostname: Callable[[], str] = socket.gethostname,
) -> str:
    """The node's name: ``given`` (--node-name, PODRES_NODE_NAME or the config file), else
    the environment's NODE_NAME, else the host name. ConfigError for a bad NODE_NAME."""
    if given:
        return given
    fallback = env.get(NODE_NAME_FALLBACK, "").strip()
    if fallback:
        try:
            return parse_node_name(fallback)
        except ValueError as err:
            raise ConfigError(f"{NODE_NAME_FALLBACK} (from the environment): {err}") from None
    host = hostname()
    try:
        return parse_node_name(host)
    except ValueError:
        return host or "unknown"


LOGGING: tuple[Option, ...] = (LOG_LEVEL, LOG_FORMAT)
"""The two flags of every command that logs."""

__all__ = [
    "KUBELET_SOCKET",
    "LOGGING",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "NODE_NAME",
    "NODE_NAME_FALLBACK",
    "PATH_PROCFS",
    "PATH_SYSFS",
    "WEB_CONFIG_FILE",
    "node_name",
]
