"""``podres demo``: the exporter against the built-in simulated node.

The simulated kubelet serves the real pod-resources gRPC API on a unix socket in
a temporary directory, beside the simulated host: a sysfs tree (CPU topology,
SR-IOV NICs), a procfs, the kubelet's log names and a fake NVML with the
scenario's GPUs. The exporter reads them exactly as it reads a real node. Tests
use the same simulator.

What the demo prints is meant to be pasted: the snapshot command names the ``podres``
being run by its full path and every root the demo's exporter reads (the kubelet
socket, sysfs, procfs, the log directories), with ``PYTHONPATH`` on a small ``pynvml``
module in the demo's directory that builds the scenario's fake NVML (the same GPUs;
their counters move on their own). Where nothing set them, the demo serves on the
loopback (``127.0.0.1:9842``) and, on a terminal, logs warnings only, so that the
banner is not lost among the start-up lines.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from podres_exporter.cli import DEMO_LISTEN_ADDRESS
from podres_exporter.cli.export import Exporter
from podres_exporter.core.errors import ConfigError, ScenarioError
from podres_exporter.daemon import logconf, process
from podres_exporter.daemon.options import raw_value, read_config_file, resolve
from podres_exporter.daemon.values import parse_listen_address
from podres_exporter.deviceplugin.main import (
    DevicePlugin,
    PluginSettings,
    build_plugin,
    load_plugin_config,
)
from podres_exporter.exporter.settings import BY_FLAG, Settings
from podres_sim import Scenario, SimKubelet, resolve_scenario
from podres_sim.host import SimHost

DEMO_LISTEN: Final = parse_listen_address(DEMO_LISTEN_ADDRESS.default)
"""Where the demo serves unless ``--listen-address`` (or its variable or key) says: the
default of the demo's own declaration of the flag, which its help shows."""

TERMINAL_LOG_LEVEL: Final = "warning"
"""The demo's log level on a terminal unless ``--log-level`` (or ...) says."""

_FAKE_PYNVML: Final = """\
\"\"\"The fake NVML of podres demo's simulated node, imported as pynvml.\"\"\"
import importlib
import os
import sys

# The fake takes its constants from the real pynvml: import that one first.
_here = os.path.dirname(os.path.abspath(__file__))
del sys.modules[__name__]
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
importlib.import_module("pynvml")

from podres_sim import resolve_scenario
from podres_sim.host import scenario_nvml

sys.modules[__name__] = scenario_nvml(resolve_scenario({scenario!r}))
"""


DEMO_POD_LABELS = ("team", "app.kubernetes.io/*")
"""The pod labels the demo's exporter serves unless told otherwise: those its pods carry."""


def demo_settings(
    settings: Settings,
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    config_path: str | None,
    terminal: bool,
) -> Settings:
    """``settings`` with the demo's own defaults where no flag, variable or config key
    set them: :data:`DEMO_LISTEN` (resolved through the demo's declaration of
    ``--listen-address``), :data:`DEMO_POD_LABELS` (the demo's pods' labels, so that
    ``podres_pod_labels_info`` shows them), and :data:`TERMINAL_LOG_LEVEL` when
    ``terminal``."""
    path = config_path or env.get("PODRES_CONFIG")
    file_values = read_config_file(path) if path else {}

    def unset(flag: str) -> bool:
        found = raw_value(BY_FLAG[flag], flags, env, file_values, path)
        return found is None or found[1] == "default"

    changes: dict[str, Any] = {
        "listen_address": resolve(DEMO_LISTEN_ADDRESS, flags, env, file_values, path)
    }
    if unset("--pod-labels"):
        changes["pod_labels"] = DEMO_POD_LABELS
    if terminal and unset("--log-level"):
        changes["log_level"] = TERMINAL_LOG_LEVEL
    return replace(settings, **changes)


def podres_command(argv0: str = "", executable: str = "") -> list[str]:
    """How to run the ``podres`` that runs now, pasted anywhere: the console script by
    its full path, else this Python with ``-m podres_exporter``."""
    argv0 = argv0 or sys.argv[0]
    if os.path.basename(argv0) == "podres":
        path = os.path.abspath(argv0)
        if os.access(path, os.X_OK):
            return [path]
    return [os.path.abspath(executable or sys.executable), "-m", "podres_exporter"]


def snapshot_command(settings: Settings, nvml_dir: Path) -> str:
    """The shell command that reads the demo's node once, as its exporter reads it."""
    args = [
        *podres_command(),
        "snapshot",
        "--kubelet-socket", settings.kubelet_socket,
        "--path.sysfs", settings.path_sysfs,
        "--path.procfs", settings.path_procfs,
        "--path.pod-logs", settings.path_pod_logs,
        "--path.container-logs", settings.path_container_logs,
        "--kubelet-config", settings.kubelet_config_path,
        "--kubelet-device-checkpoint", settings.kubelet_device_checkpoint_path,
    ]  # fmt: skip
    return f"PYTHONPATH={shlex.quote(str(nvml_dir))} {shlex.join(args)}"


def _write_fake_pynvml(directory: Path, scenario: str) -> Path:
    """A ``pynvml`` module for the printed commands: the scenario's fake NVML."""
    if os.path.exists(scenario):  # a scenario file: by its full path
        scenario = os.path.abspath(scenario)
    directory.mkdir()
    (directory / "pynvml.py").write_text(_FAKE_PYNVML.format(scenario=scenario))
    return directory


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario, a scenario TOML file or ``synthetic:PODS[:N]``; ConfigError
    naming --scenario."""
    try:
        return resolve_scenario(name_or_path)
    except ScenarioError as err:
        raise ConfigError(f"--scenario: {err}") from err


def _start_plugin(sim: SimKubelet, host: SimHost, tmp: Path, node: str) -> DevicePlugin | None:
    """The real device plugin for the scenario's plugin resources, on the sim's kubelet."""
    if sim.device_manager is None:
        return None
    config = tmp / "plugin.toml"
    config.write_text(host.plugin_config())
    settings = PluginSettings(
        config_path=str(config),
        device_plugin_dir=str(sim.device_manager.directory),
        listen_address=("127.0.0.1", 0),
        path_sysfs=str(host.sysfs),
        node_name=node,
    )
    plugin = build_plugin(settings, load_plugin_config(settings))
    plugin.start()
    return plugin


def _tick(host: SimHost, stop: threading.Event) -> None:
    """Advance the simulated host's counters and follow its pods, once a second."""
    while not stop.wait(1.0):
        host.refresh(seconds=1.0)


def run_demo(settings: Settings, *, scenario: str, churn_s: float) -> int:
    """Serve the demo node until SIGTERM or SIGINT; ``churn_s`` 0: no churn."""
    process.configure_logging(settings.log_level, settings.log_format)
    sc = load_scenario(scenario)
    with tempfile.TemporaryDirectory(prefix="podres-demo-") as tmp:
        sim = SimKubelet(sc, Path(tmp) / "kubelet.sock")
        host = SimHost(sim, tmp)
        sim.start()
        if churn_s:
            sim.start_churn(churn_s)
        stop_ticking = threading.Event()
        ticker = threading.Thread(
            target=_tick, args=(host, stop_ticking), name="podres-demo-host", daemon=True
        )
        ticker.start()
        node_settings = replace(
            settings,
            kubelet_socket=str(sim.socket_path),
            path_sysfs=str(host.sysfs),
            path_procfs=str(host.procfs),
            path_pod_logs=str(host.pod_logs),
            path_container_logs=str(host.container_logs),
            kubelet_config=str(host.kubelet_config),
            kubelet_device_checkpoint=str(host.device_checkpoint),
            node_name=sc.name,  # the simulated node's, as a kubelet's would be its node's
        )
        exporter = Exporter(node_settings, gpu_backend=host.gpu_backend())
        exporter.start()
        plugin = _start_plugin(sim, host, Path(tmp), sc.name)
        nvml_dir = _write_fake_pynvml(Path(tmp) / "nvml", scenario)
        lines = [
            f"podres demo: simulated node {sc.name!r} ({sc.pod_count} pods, "
            f"{len(sc.node.online_cpus)} CPUs on {sc.node.numa_nodes} NUMA nodes)",
            f"  metrics:  {exporter.url}/metrics",
        ]
        if plugin is not None:
            lines.append(f"  device plugin metrics: {plugin.url}/metrics")
        lines += [
            f"  snapshot: {snapshot_command(node_settings, nvml_dir)}",
            "Ctrl-C to stop.",
        ]
        logconf.say(sys.stdout, "\n".join(lines))
        # The stops inside the handlers too: a second Ctrl-C while they run is noted, not
        # a KeyboardInterrupt through them.
        with process.stop_on_signals(last=True) as stopping:
            try:
                reason = stopping.wait()
            finally:
                exporter.stop("demo ended")
                if plugin is not None:
                    plugin.stop("demo ended")
                stop_ticking.set()
                ticker.join(5)
                sim.stop(remove_socket=True)
    logconf.say(sys.stderr, f"podres demo: stopped ({reason})")
    return 0
