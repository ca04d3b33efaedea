"""``podres demo``: the exporter against the built-in simulated node.

The simulated kubelet serves the real pod-resources gRPC API on a unix socket in
a temporary directory, beside a sysfs tree with the scenario's CPU topology; the
exporter reads both exactly as it reads a real node. Tests use the same simulator.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from podres_exporter import logconf
from podres_exporter.cli.export import Exporter, wait_for_signal
from podres_exporter.errors import ConfigError
from podres_exporter.settings import Settings, parse_duration
from podres_exporter.sim import Scenario, ScenarioError, SimKubelet, builtin_names, write_sysfs
from podres_exporter.sim.scenario import load_builtin


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a scenario TOML file; ConfigError naming --scenario."""
    try:
        if name_or_path in builtin_names():
            return load_builtin(name_or_path)
        if not Path(name_or_path).is_file():
            raise ConfigError(
                f"--scenario {name_or_path!r}: neither a built-in scenario "
                f"({', '.join(builtin_names())}) nor a file"
            )
        return Scenario.load(name_or_path)
    except ScenarioError as err:
        raise ConfigError(f"--scenario: {err}") from err


def run_demo(settings: Settings, *, scenario: str, churn: str) -> int:
    """Serve the demo node until SIGTERM or SIGINT."""
    logconf.configure(
        settings.log_level,
        json=None if settings.log_format == "auto" else settings.log_format == "json",
    )
    sc = load_scenario(scenario)
    try:
        churn_s = 0.0 if churn.strip() in ("0", "0s") else parse_duration(churn)
    except ValueError as err:
        raise ConfigError(f"invalid value for --churn-interval: {err}") from err
    with tempfile.TemporaryDirectory(prefix="podres-demo-") as tmp:
        sysfs = Path(tmp) / "sys"
        write_sysfs(sc.node, sysfs)
        sim = SimKubelet(sc, Path(tmp) / "kubelet.sock")
        sim.start()
        if churn_s:
            sim.start_churn(churn_s)
        exporter = Exporter(
            replace(settings, kubelet_socket=str(sim.socket_path), path_sysfs=str(sysfs))
        )
        exporter.start()
        print(
            f"podres demo: simulated node {sc.name!r} ({sc.pod_count} pods, "
            f"{len(sc.node.online_cpus)} CPUs on {sc.node.numa_nodes} NUMA nodes)\n"
            f"  metrics:  {exporter.url}/metrics\n"
            f"  snapshot: podres snapshot --kubelet-socket {sim.socket_path} --path.sysfs {sysfs}\n"
            "Ctrl-C to stop.",
            flush=True,
        )
        try:
            reason = wait_for_signal()
        finally:
            exporter.stop("demo ended")
            sim.stop(remove_socket=True)
    print(f"podres demo: stopped ({reason})", file=sys.stderr)
    return 0
