"""The flags several commands share, each declared once.

``podres export`` and ``podres snapshot`` (the exporter), ``podres plugin``, ``podres top``
and the simulator's own command (``python -m podres_sim``) put these very objects in their
tables, so that a flag means the same, reads the same variable and shows the same help
wherever it appears. A flag of one command only is declared beside that command.
"""

from __future__ import annotations

from podres_exporter.daemon.options import Option
from podres_exporter.daemon.values import parse_log_format, parse_log_level, parse_path

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
LOGGING: tuple[Option, ...] = (LOG_LEVEL, LOG_FORMAT)
"""The two flags of every command that logs."""

__all__ = [
    "KUBELET_SOCKET",
    "LOGGING",
    "LOG_FORMAT",
    "LOG_LEVEL",
    "PATH_PROCFS",
    "PATH_SYSFS",
    "WEB_CONFIG_FILE",
]
