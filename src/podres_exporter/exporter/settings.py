"""One typed settings object, built once at the composition root.

Precedence: command-line flags > environment (``PODRES_*``) > config file
(TOML, ``--config`` or ``PODRES_CONFIG``) > defaults. Every field names its flag;
the environment variable is the flag upper-cased with ``.`` and ``-`` as ``_``
(``--path.sysfs`` -> ``PODRES_PATH_SYSFS``), and the config-file key is the flag
without its dashes (``poll-interval = "10s"``, or ``[path]`` ``sysfs = "/host/sys"``).

Parsers take a ``Mapping`` for the environment and never read ``os.environ``.
A bad value raises :class:`~podres_exporter.core.errors.ConfigError` naming the flag
and where the value came from; the CLI turns that into exit status 2. Every duration
and size has an upper bound that no node needs to exceed (its help says which and
why), so no value reaches a wait or a gRPC deadline that it would overflow; every duration
a lower one too, below which the exporter would only load the kubelet or fail its calls.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from podres_exporter import __version__, collectors
from podres_exporter.buildinfo import BuildInfo, build_info
from podres_exporter.core.errors import ConfigError
from podres_exporter.core.ids import DEFAULT_GPU_RESOURCES
from podres_exporter.core.limits import DEFAULT_LIMITS, AnswerLimits
from podres_exporter.daemon.flags import (
    KUBELET_SOCKET,
    LOG_FORMAT,
    LOG_LEVEL,
    NODE_NAME,
    PATH_PROCFS,
    PATH_SYSFS,
    WEB_CONFIG_FILE,
    node_name,
)
from podres_exporter.daemon.options import (
    Option,
    check_at_most,
    key_hint,
    read_config_file,
    resolve,
    resolve_all,
)
from podres_exporter.daemon.values import (
    count,
    duration,
    parse_bool,
    parse_listen_address,
    parse_path,
    parse_patterns,
    shown,
    size,
)
from podres_exporter.sources.sysfs import DEFAULT_OPEN_FILES

DEFAULT_LISTEN = ":9842"

MIN_POLL_S = 0.05
"""--poll-interval at least 50ms: two kubelet calls a reading, 40 a second at most, under
the kubelet's pod-resources rate limit (100 calls a second, shared by all its clients)."""

MAX_OPEN_FILES = 65536
"""--sysfs-open-files: a large GPU node has some 2,000 counter files; 64Ki is far beyond any."""

MAX_MESSAGE_BYTES = 2**30
"""--kubelet-max-message-size at most 1Gi: gRPC refuses 2Gi and more (its limit is 2^31-1
bytes), and a kubelet's whole answer is a few MiB even with 20,000 pods."""

MAX_ANSWER_ENTRIES = 2**24
"""The --kubelet-max-* counts at most 16Mi: a 16 MiB answer cannot list more entries."""

ANSWER_LIMITS: tuple[Option, ...] = (
    Option("--kubelet-max-pods", "kubelet_max_pods", count(max_count=MAX_ANSWER_ENTRIES),
           DEFAULT_LIMITS.pods,
           "Most pods read from one kubelet answer; the rest are left out and counted in "
           "podres_data_anomalies{kind=\"pods_over_limit\"}. Beyond the largest node we "
           "support (5,000 pods) and the benchmarks' 20,000. At least 1."),
    Option("--kubelet-max-containers", "kubelet_max_containers",
           count(max_count=MAX_ANSWER_ENTRIES), DEFAULT_LIMITS.containers,
           "Most containers read of one pod (init and sidecar containers included); the rest "
           "counted as containers_over_limit. At least 1."),
    Option("--kubelet-max-devices", "kubelet_max_devices", count(max_count=MAX_ANSWER_ENTRIES),
           DEFAULT_LIMITS.devices,
           "Most device ids read of one container, and of its memory blocks, DRA claims and "
           "claim devices each; the rest counted as devices_over_limit. 8 GPUs, or 1,024 "
           "replicas of a shared device, fit. At least 1."),
    Option("--kubelet-max-cpus", "kubelet_max_cpus", count(max_count=MAX_ANSWER_ENTRIES),
           DEFAULT_LIMITS.cpus,
           "Most CPU ids read of one CPU set (a container's, a pod's, the allocatable ones); "
           "the rest counted as cpus_over_limit. Beyond the largest servers. At least 1."),
    Option("--kubelet-max-entries", "kubelet_max_entries",
           count(max_count=MAX_ANSWER_ENTRIES), DEFAULT_LIMITS.entries,
           "Most entries read of one kubelet answer, summed: pods, containers, device and CPU "
           "ids, memory blocks, claims (the allocatable resources: as many again). This bounds "
           "a poll's memory and time (the worst answer it lets through costs about 510 MiB; "
           "65536: 280 MiB); the rest counted as entries_over_limit. The benchmarks' "
           "5,000-pod node lists 70,000, their 20,000-pod node 120,000. At least 1."),
)  # fmt: skip
"""How much of one kubelet answer becomes objects (core/limits.py); every one at least 1."""

OPTIONS: tuple[Option, ...] = (
    KUBELET_SOCKET,
    Option("--kubelet-max-message-size", "kubelet_max_message_bytes",
           size(max_bytes=MAX_MESSAGE_BYTES), 16 * 2**20,
           "Largest kubelet response accepted, bytes: as much as the kubelet's own clients take "
           "(gRPC's 4 MiB is too small for busy nodes). At most 1Gi: gRPC cannot take 2Gi, "
           "and a kubelet's answer is a few MiB even with 20,000 pods."),
    *ANSWER_LIMITS,
    Option("--kubelet-timeout", "kubelet_timeout_s", duration(min_s=0.1, max_s=60.0), 10.0,
           "Deadline of each kubelet call. At least 100ms: less fails calls a busy kubelet "
           "answers. At most 1m: the kubelet answers in milliseconds, and a call still open "
           "after a minute has failed."),
    Option("--listen-address", "listen_address", parse_listen_address, DEFAULT_LISTEN,
           "HOST:PORT for /metrics, /healthz and /readyz (:PORT listens on every interface)."),
    Option("--poll-interval", "poll_interval_s", duration(min_s=MIN_POLL_S, max_s=3600.0), 10.0,
           "Time between two readings of the kubelet. Scrapes never call the kubelet. At least "
           "50ms: each reading is two calls against the kubelet's rate limit (100 per second, "
           "shared by every client). At most 1h: older data is no view of the node."),
    Option("--kubelet-backoff-initial", "backoff_initial_s",
           duration(min_s=0.01, max_s=300.0), 1.0,
           "First wait after a failed kubelet call; doubles per failure, with jitter. At least "
           "10ms, at most --kubelet-backoff-max, and 5m."),
    Option("--kubelet-backoff-max", "backoff_max_s", duration(min_s=0.1, max_s=600.0), 30.0,
           "Longest wait between retries of an unreachable or rate-limiting kubelet. At least "
           "100ms: retrying faster only adds to the load of a kubelet in trouble. At most 10m: "
           "a kubelet back from a restart is read again within minutes."),
    Option("--kubelet-empty-confirm", "empty_confirm_s", duration(min_s=0.1, max_s=300.0), 3.0,
           "How long a reading that lost every pod or every allocatable CPU at once must persist "
           "before it is believed (a restarting kubelet answers so for ~100 ms, the least "
           "accepted). At most 5m: a node emptied for real is shown within minutes."),
    PATH_SYSFS,
    PATH_PROCFS,
    Option("--path.pod-logs", "path_pod_logs", parse_path, "/var/log/pods",
           "The kubelet's pod log directory; its names map pod UIDs to pods."),
    Option("--path.container-logs", "path_container_logs", parse_path, "/var/log/containers",
           "The kubelet's container log links; their names map container IDs to containers "
           "(GPU processes to their holders)."),
    Option("--source-timeout", "source_timeout_s", duration(min_s=0.1, max_s=60.0), 5.0,
           "Longest wait for one telemetry source (NVML, sysfs, /proc) per poll; a slower one "
           "keeps its last data, marked stale, and never delays the others. At least 100ms: "
           "less marks healthy sources stale. At most 1m: a source slower than that is hung."),
    Option("--source-interval.gpu", "source_interval_gpu_s",
           duration(max_s=3600.0, zero=True), 0.0,
           "Least time between two readings of NVML; a poll sooner serves the last one. 0: "
           "every poll."),
    Option("--source-interval.gpu-slow", "source_interval_gpu_slow_s",
           duration(min_s=1.0, max_s=3600.0), 30.0,
           "Least time between two readings of the NVML fields that are slow in the driver or "
           "rarely change: PCIe throughput (a 20 ms sample per direction), ECC and remapped-row "
           "counts, the power limit. At least 1s, at most 1h."),
    Option("--source-interval.sysfs", "source_interval_sysfs_s",
           duration(max_s=3600.0, zero=True), 0.0,
           "Least time between two readings of the sysfs device counters (PCI, network, "
           "InfiniBand, DRM); a poll sooner serves the last one. 0: every poll."),
    Option("--source-interval.cpu", "source_interval_cpu_s",
           duration(max_s=3600.0, zero=True), 0.0,
           "Least time between two readings of the per-CPU times in /proc/stat. 0: every "
           "poll."),
    Option("--sysfs-open-files", "sysfs_open_files", count(max_count=MAX_OPEN_FILES),
           DEFAULT_OPEN_FILES,
           "Most device counter files kept open between polls and read again with one pread "
           "(11 per network interface; opening one costs three system calls and a path "
           "lookup). Each costs about 4 KiB of kernel memory on sysfs, charged to the pod. At "
           "most a quarter of the open-file limit is used. 0: every file is opened and closed "
           "at every poll."),
    Option("--gpu-resources", "gpu_resources", parse_patterns,
           ",".join(DEFAULT_GPU_RESOURCES),
           "Comma-separated glob patterns of the resources whose device ids are read as GPUs "
           "(nvidia<N>, card<N>-<M> ...); other resources are matched by id shape alone."),
    WEB_CONFIG_FILE,
    NODE_NAME,
    LOG_LEVEL,
    LOG_FORMAT,
)  # fmt: skip

# ---- the kubelet's own files: the facts it admits pods with (collector kubelet_policy)
KUBELET_FILES: tuple[Option, ...] = (
    Option("--kubelet-config", "kubelet_config", parse_path, None,
           "The kubelet's configuration file (its --config; YAML or JSON), read for the "
           "policies it admits pods with (podres_kubelet_config_info). Only the file: flags "
           "the kubelet was started with that override it are not seen.",
           fallback="config.yaml in the kubelet's root directory, the one that holds "
                    "--kubelet-socket's directory (/var/lib/kubelet/config.yaml)"),
    Option("--kubelet-device-checkpoint", "kubelet_device_checkpoint", parse_path, None,
           "The kubelet's device-manager checkpoint (JSON, read-only): every device "
           "registered per resource, healthy or not (podres_node_registered_devices).",
           fallback="device-plugins/kubelet_internal_checkpoint in the kubelet's root "
                    "directory, as for --kubelet-config"),
)  # fmt: skip
OPTIONS = (*OPTIONS, *KUBELET_FILES)


def kubelet_root(socket: str) -> str:
    """The kubelet's root directory: the one that holds the pod-resources socket's
    directory (``/var/lib/kubelet`` for ``/var/lib/kubelet/pod-resources/kubelet.sock``)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(socket)))


# ---- end of the kubelet's own files
BY_FLAG = {o.flag: o for o in OPTIONS}

CONFIG = Option(
    "--config",
    "config_path",
    parse_path,
    None,
    "A TOML file of these settings, keyed by flag without its dashes (a regular file, at "
    "most 1Mi).",
    metavar="FILE",
)
"""--config: not a setting of its own, so not in :data:`OPTIONS` (nor a key of the file)."""


def collector_switch(name: str, *, default: bool | None = None, help: str = "") -> Option:
    """``--[no-]collector.NAME``: its variable ``PODRES_COLLECTOR_NAME``, its key
    ``collector.NAME``. Without a ``default`` it resolves to None when unset."""
    return Option(f"--collector.{name}", name, parse_bool, default, help, switch=True)


COLLECTOR_SWITCHES: tuple[Option, ...] = tuple(
    collector_switch(c.name, default=c.default_enabled, help=f"Collect {c.description}.")
    for c in collectors.ALL
)
"""One switch per collector of the registry, with its default on or off."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of the exporter, parsed and validated. See :data:`OPTIONS`."""

    kubelet_socket: str
    kubelet_max_message_bytes: int
    kubelet_max_pods: int
    kubelet_max_containers: int
    kubelet_max_devices: int
    kubelet_max_cpus: int
    kubelet_max_entries: int
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
    source_interval_gpu_s: float
    source_interval_gpu_slow_s: float
    source_interval_sysfs_s: float
    source_interval_cpu_s: float
    sysfs_open_files: int
    gpu_resources: tuple[str, ...]
    log_level: str
    log_format: str
    web_config_file: str | None = None
    # --node-name, else NODE_NAME, else the host name: resolved by build().
    node_name: str = ""
    # The build's version, revision and Python version (podres_build_info).
    build: BuildInfo = field(default_factory=lambda: BuildInfo(__version__))
    # --collector.NAME switches given (name -> on/off); the others keep their default.
    collector_overrides: Mapping[str, bool] = field(default_factory=dict)
    # ---- the kubelet's own files (KUBELET_FILES); None: in the kubelet's root directory
    kubelet_config: str | None = None
    kubelet_device_checkpoint: str | None = None

    @property
    def kubelet_config_path(self) -> str:
        """--kubelet-config, else ``config.yaml`` in the kubelet's root directory."""
        return self.kubelet_config or os.path.join(kubelet_root(self.kubelet_socket), "config.yaml")

    @property
    def kubelet_device_checkpoint_path(self) -> str:
        """--kubelet-device-checkpoint, else the device manager's in the kubelet's root."""
        return self.kubelet_device_checkpoint or os.path.join(
            kubelet_root(self.kubelet_socket), "device-plugins", "kubelet_internal_checkpoint"
        )

    @property
    def answer_limits(self) -> AnswerLimits:
        """The --kubelet-max-* counts: how much of one kubelet answer is read."""
        return AnswerLimits(
            pods=self.kubelet_max_pods,
            containers=self.kubelet_max_containers,
            devices=self.kubelet_max_devices,
            cpus=self.kubelet_max_cpus,
            entries=self.kubelet_max_entries,
        )


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
    for key, value in file_values.items():
        if key not in known and not (value == {} and _is_table(key, known)):
            raise ConfigError(_unknown_key(key, known, path))
    values, origins = resolve_all(OPTIONS, flags, env, file_values, path)
    check_at_most(
        BY_FLAG["--kubelet-backoff-initial"],
        BY_FLAG["--kubelet-backoff-max"],
        values,
        origins,
        "the first wait after a failure cannot be longer than the longest",
    )
    for option in ANSWER_LIMITS:
        if values[option.attr] < 1:
            raise ConfigError(
                f"{option.flag} (0, from {origins[option.attr]}): at least 1 "
                "(a limit of none would leave the whole answer out)"
            )
    switched = {f"--collector.{name}": on for name, on in (collector_flags or {}).items()}
    overrides: dict[str, bool] = {}
    for name in collector_names:
        on = resolve(collector_switch(name), switched, env, file_values, path)
        if on is not None:
            overrides[name] = on
    values["node_name"] = node_name(values["node_name"], env)
    return Settings(**values, build=build_info(__version__, env), collector_overrides=overrides)


def _is_table(key: str, known: set[str]) -> bool:
    """Whether ``key`` is a table of known keys (``path``, ``collector``)."""
    return any(k.startswith(key + ".") for k in known)


def _unknown_key(key: str, known: set[str], path: str | None) -> str:
    """Why a flattened config-file key is not one of ``known``: a table where a value
    belongs, a value where a table belongs, or a key nobody knows."""
    where = f"config file {path}"
    for k in known:
        if key.startswith(k + "."):
            return f"{where}: key {k!r}: expected a value, got a table"
    if _is_table(key, known):
        return f"{where}: key {shown(key)}: expected a table ([{key}])"
    return f"{where}: unknown key {shown(key)}{key_hint(key, known)}"
