"""One typed settings object, built once at the composition root.

Precedence: command-line flags > environment (``PODRES_*``) > config file
(TOML, ``--config`` or ``PODRES_CONFIG``) > defaults. Every field names its flag;
the environment variable is the flag upper-cased with ``.`` and ``-`` as ``_``
(``--path.sysfs`` -> ``PODRES_PATH_SYSFS``), and the config-file key is the flag
without its dashes (``poll-interval = "10s"``, or ``[path]`` ``sysfs = "/host/sys"``).

Parsers take a ``Mapping`` for the environment and never read ``os.environ``.
A bad value raises :class:`~podres_exporter.errors.ConfigError` naming the flag
and where the value came from; the CLI turns that into exit status 2.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from podres_exporter.errors import ConfigError
from podres_exporter.ids import DEFAULT_GPU_RESOURCES
from podres_exporter.logconf import LEVELS

DEFAULT_LISTEN = ":9842"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+)\s*(Ki|Mi|Gi|K|M|G)?B?\s*$")
_SIZE_UNITS = {None: 1, "K": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def parse_duration(text: str) -> float:
    """``"10s"``, ``"500ms"``, ``"1m"``, ``"2.5"`` (seconds) -> seconds; must be > 0."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a duration (examples: 10s, 500ms, 1m)")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds <= 0:
        raise ValueError(f"{text!r} must be greater than zero")
    return seconds


def parse_size(text: str) -> int:
    """``"16Mi"``, ``"4194304"``, ``"64MiB"`` -> bytes; must be > 0."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a size (examples: 16Mi, 4194304)")
    size = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    if size <= 0:
        raise ValueError(f"{text!r} must be greater than zero")
    return size


def parse_listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (every interface) or ``[::1]:PORT`` -> (host, port)."""
    raw = str(text).strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"{text!r} is not HOST:PORT (examples: :9842, 127.0.0.1:9842, [::1]:9842)")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range 0-65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: put an IPv6 host in brackets, as in [::1]:9842")
    return (host or "0.0.0.0", port)  # noqa: S104 - binding every interface is the documented default


def parse_log_level(text: str) -> str:
    """One of debug, info, warning, error."""
    level = str(text).strip().lower()
    if level not in LEVELS:
        raise ValueError(f"{text!r} is not one of {', '.join(LEVELS)}")
    return level


def parse_log_format(text: str) -> str:
    """auto (JSON unless on a terminal), json or console."""
    fmt = str(text).strip().lower()
    if fmt not in ("auto", "json", "console"):
        raise ValueError(f"{text!r} is not one of auto, json, console")
    return fmt


def parse_bool(text: str | bool) -> bool:
    """true/false, 1/0, yes/no, on/off."""
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true or false)")


def parse_patterns(text: str) -> tuple[str, ...]:
    """Comma-separated, non-empty glob patterns: ``nvidia.com/*,amd.com/gpu``."""
    patterns = tuple(p.strip() for p in str(text).split(",") if p.strip())
    if not patterns:
        raise ValueError("expected at least one pattern, e.g. nvidia.com/*")
    return patterns


def parse_path(text: str) -> str:
    """A non-empty path."""
    value = str(text)
    if not value:
        raise ValueError("the path is empty")
    return value


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: its flag, parser, default and help (unit and why included)."""

    flag: str
    attr: str
    parse: Callable[[Any], Any]
    default: Any
    help: str

    @property
    def env(self) -> str:
        return "PODRES_" + re.sub(r"[.-]", "_", self.flag.lstrip("-")).upper()

    @property
    def key(self) -> str:
        return self.flag.lstrip("-")


OPTIONS: tuple[Option, ...] = (
    Option("--kubelet-socket", "kubelet_socket", parse_path,
           "/var/lib/kubelet/pod-resources/kubelet.sock",
           "The kubelet's pod-resources socket. Mount its DIRECTORY into the pod: the kubelet "
           "re-creates the socket file at every start."),
    Option("--kubelet-max-message-size", "kubelet_max_message_bytes", parse_size, 16 * 2**20,
           "Largest kubelet response accepted, bytes (16Mi, like the kubelet's own clients; "
           "gRPC's 4 MiB default is too small for busy nodes)."),
    Option("--kubelet-timeout", "kubelet_timeout_s", parse_duration, 10.0,
           "Deadline of each kubelet call."),
    Option("--listen-address", "listen_address", parse_listen_address, DEFAULT_LISTEN,
           "HOST:PORT for /metrics, /healthz and /readyz (:PORT listens on every interface)."),
    Option("--poll-interval", "poll_interval_s", parse_duration, 10.0,
           "Time between two readings of the kubelet. Scrapes never call the kubelet."),
    Option("--kubelet-backoff-initial", "backoff_initial_s", parse_duration, 1.0,
           "First wait after a failed kubelet call; doubles per failure, with jitter."),
    Option("--kubelet-backoff-max", "backoff_max_s", parse_duration, 30.0,
           "Longest wait between retries of an unreachable or rate-limiting kubelet."),
    Option("--kubelet-empty-confirm", "empty_confirm_s", parse_duration, 3.0,
           "How long a reading that lost every pod or every allocatable CPU at once must persist "
           "before it is believed (a restarting kubelet answers so for ~100 ms)."),
    Option("--path.sysfs", "path_sysfs", parse_path, "/sys",
           "Root of sysfs (the host's /sys mounted into the pod, e.g. /host/sys)."),
    Option("--path.procfs", "path_procfs", parse_path, "/proc",
           "Root of procfs (the host's /proc mounted into the pod, e.g. /host/proc): per-CPU "
           "time and the cgroups of GPU processes."),
    Option("--path.pod-logs", "path_pod_logs", parse_path, "/var/log/pods",
           "The kubelet's pod log directory; its names map pod UIDs to pods."),
    Option("--path.container-logs", "path_container_logs", parse_path, "/var/log/containers",
           "The kubelet's container log links; their names map container IDs to containers "
           "(GPU processes to their holders)."),
    Option("--source-timeout", "source_timeout_s", parse_duration, 5.0,
           "Longest wait for one telemetry source (NVML, sysfs, /proc) per poll; a slower one "
           "keeps its last data, marked stale, and never delays the others."),
    Option("--gpu-resources", "gpu_resources", parse_patterns,
           ",".join(DEFAULT_GPU_RESOURCES),
           "Comma-separated glob patterns of the resources whose device ids are read as GPUs "
           "(nvidia<N>, card<N>-<M> ...); other resources are matched by id shape alone."),
    Option("--log-level", "log_level", parse_log_level, "info", "debug, info, warning or error."),
    Option("--log-format", "log_format", parse_log_format, "auto",
           "auto (JSON unless stderr is a terminal), json or console."),
)  # fmt: skip
BY_FLAG = {o.flag: o for o in OPTIONS}


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of the exporter, parsed and validated. See :data:`OPTIONS`."""

    kubelet_socket: str
    kubelet_max_message_bytes: int
    kubelet_timeout_s: float
    listen_address: tuple[str, int]
    poll_interval_s: float
    backoff_initial_s: float
    backoff_max_s: float
    empty_confirm_s: float
    path_sysfs: str
    path_procfs: str
    path_pod_logs: str
    path_container_logs: str
    source_timeout_s: float
    gpu_resources: tuple[str, ...]
    log_level: str
    log_format: str
    collectors: Mapping[str, bool] = field(default_factory=dict)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def resolve(
    opt: Option,
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    file_values: Mapping[str, Any] | None = None,
    file_path: str | None = None,
) -> Any:
    """One option's parsed value: flag > environment > config file > default.

    A default of None stays None (the option is unset). ConfigError names the flag and
    where the bad value came from.
    """
    if flags.get(opt.flag) is not None:
        raw, origin = flags[opt.flag], f"flag {opt.flag}"
    elif opt.env in env:
        raw, origin = env[opt.env], f"environment variable {opt.env}"
    elif file_values is not None and opt.key in file_values:
        raw, origin = file_values[opt.key], f"key {opt.key!r} of config file {file_path}"
    elif opt.default is None:
        return None
    else:
        raw, origin = opt.default, "default"
    try:
        return opt.parse(raw)
    except ValueError as err:
        raise ConfigError(f"invalid value for {opt.flag} (from {origin}): {err}") from err


def read_config_file(path: str) -> dict[str, Any]:
    """The config file's keys, flattened (``[path] sysfs`` -> ``path.sysfs``)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as err:
        raise ConfigError(f"config file {path} (--config): {err.strerror or err}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} (--config) is not valid TOML: {err}") from err
    return _flatten(data)


def build(
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    config_path: str | None = None,
    collector_names: tuple[str, ...] = (),
    collector_flags: Mapping[str, bool] | None = None,
) -> Settings:
    """Build Settings from parsed flags (flag -> raw value, only the ones given), env and file.

    ``collector_names`` are the known collectors, for ``collector.NAME`` keys and
    ``PODRES_COLLECTOR_NAME`` variables; ``collector_flags`` the ones set on the command line.
    """
    path = config_path or env.get("PODRES_CONFIG")
    file_values = read_config_file(path) if path else {}
    known = {o.key for o in OPTIONS} | {f"collector.{n}" for n in collector_names}
    for key in file_values:
        if key not in known:
            raise ConfigError(
                f"config file {path}: unknown key {key!r} (known: {', '.join(sorted(known))})"
            )
    values = {opt.attr: resolve(opt, flags, env, file_values, path) for opt in OPTIONS}
    collectors: dict[str, bool] = {}
    for name in collector_names:
        env_key = "PODRES_COLLECTOR_" + name.upper()
        try:
            if collector_flags and name in collector_flags:
                collectors[name] = collector_flags[name]
            elif env_key in env:
                collectors[name] = parse_bool(env[env_key])
            elif f"collector.{name}" in file_values:
                collectors[name] = parse_bool(file_values[f"collector.{name}"])
        except ValueError as err:
            raise ConfigError(f"invalid value for --collector.{name}: {err}") from err
    return Settings(**values, collectors=collectors)
