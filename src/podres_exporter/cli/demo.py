"""``podres demo``: the exporter against the built-in simulated node.

The simulated kubelet serves the real pod-resources gRPC API on a unix socket in
a temporary directory, beside the simulated host: a sysfs tree (CPU topology,
SR-IOV NICs), a procfs, the kubelet's log names and a fake NVML with the
scenario's GPUs. The exporter reads them exactly as it reads a real node. Tests
use the same simulator.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from podres_exporter.cli.export import Exporter
from podres_exporter.core.errors import ConfigError, ScenarioError
from podres_exporter.daemon import logconf, process
from podres_exporter.deviceplugin.main import (
    DevicePlugin,
    PluginSettings,
    build_plugin,
    load_plugin_config,
)
from podres_exporter.exporter.settings import Settings
from podres_sim import Scenario, SimKubelet, resolve_scenario
from podres_sim.host import SimHost


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario, a scenario TOML file or ``synthetic:PODS[:N]``; ConfigError
    naming --scenario."""
    try:
        return resolve_scenario(name_or_path)
    except ScenarioError as err:
        raise ConfigError(f"--scenario: {err}") from err


def _start_plugin(sim: SimKubelet, host: SimHost, tmp: Path) -> DevicePlugin | None:
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
        sysfs = host.sysfs
        exporter = Exporter(
            replace(
                settings,
                kubelet_socket=str(sim.socket_path),
                path_sysfs=str(host.sysfs),
                path_procfs=str(host.procfs),
                path_pod_logs=str(host.pod_logs),
                path_container_logs=str(host.container_logs),
            ),
            gpu_backend=host.gpu_backend(),
        )
        exporter.start()
        plugin = _start_plugin(sim, host, Path(tmp))
        lines = [
            f"podres demo: simulated node {sc.name!r} ({sc.pod_count} pods, "
            f"{len(sc.node.online_cpus)} CPUs on {sc.node.numa_nodes} NUMA nodes)",
            f"  metrics:  {exporter.url}/metrics",
        ]
        if plugin is not None:
            lines.append(f"  device plugin metrics: {plugin.url}/metrics")
        lines += [
            f"  snapshot: podres snapshot --kubelet-socket {sim.socket_path} --path.sysfs {sysfs}",
            "Ctrl-C to stop.",
        ]
        logconf.say(sys.stdout, "\n".join(lines))
        try:
            reason = process.wait_for_signal()
        finally:
            exporter.stop("demo ended")
            if plugin is not None:
                plugin.stop("demo ended")
            stop_ticking.set()
            ticker.join(5)
            sim.stop(remove_socket=True)
    logconf.say(sys.stderr, f"podres demo: stopped ({reason})")
    return 0
