"""Run the simulated kubelet standalone until SIGTERM or SIGINT.

    python -m podres_sim --scenario demo --socket /tmp/podres/kubelet.sock \\
        [--sysfs-out PATH] [--churn-interval DURATION] [--log-level LEVEL] [--log-format FORMAT]

``--scenario`` is a built-in name (``demo``, ``minimal`` ...), a TOML file, or
``synthetic:PODS[:N]`` (``synthetic_scenario``: every Nth pod with an exclusive CPU).
``--churn-interval`` defaults to the scenario's (0 turns churn off). ``--log-level`` and
``--log-format`` are the product's own (:mod:`podres_exporter.daemon.flags`), read from
``PODRES_LOG_LEVEL`` and ``PODRES_LOG_FORMAT`` too. On a signal the server stops and the
socket is removed. A bad flag exits with status 2, naming it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import structlog

from podres_exporter.core.errors import ConfigError, ScenarioError
from podres_exporter.daemon import process
from podres_exporter.daemon.flags import LOG_FORMAT, LOG_LEVEL
from podres_exporter.daemon.options import Option, resolve
from podres_exporter.daemon.values import duration, parse_path, parse_text
from podres_sim.host import write_sysfs
from podres_sim.kubelet import SimKubelet
from podres_sim.scenario import Scenario, builtin_names, resolve_scenario
from podres_sim.scenario.parse import MAX_CHURN_INTERVAL_S

log = structlog.get_logger("podres_sim")

# The simulator's own flags: none has a variable (the scenario file holds its settings).
SCENARIO = Option(
    "--scenario", "scenario", parse_text, "demo",
    f"A built-in scenario ({', '.join(builtin_names())}), a TOML file, or synthetic:PODS[:N] "
    "for synthetic_scenario (every Nth pod with an exclusive CPU).",
    metavar="SCENARIO", env_prefix=None,
)  # fmt: skip
SOCKET = Option(
    "--socket", "socket", parse_path, None, "Unix socket path to serve on; required.",
    env_prefix=None,
)  # fmt: skip
SYSFS_OUT = Option(
    "--sysfs-out", "sysfs_out", parse_path, None,
    "Also write a fake sysfs tree for the node here.", env_prefix=None,
)  # fmt: skip
CHURN_INTERVAL = Option(
    "--churn-interval", "churn_interval_s", duration(max_s=MAX_CHURN_INTERVAL_S, zero=True), None,
    "Time between churn steps; 0: no churn.", env_prefix=None, fallback="the scenario's",
)  # fmt: skip
OPTIONS: tuple[Option, ...] = (SCENARIO, SOCKET, SYSFS_OUT, CHURN_INTERVAL, LOG_LEVEL, LOG_FORMAT)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m podres_sim",
        description="Serve a simulated kubelet pod-resources API on a unix socket.",
    )
    for opt in OPTIONS:
        opt.add_to(p)
    return p


def _load(name: str) -> Scenario:
    try:
        return resolve_scenario(name)
    except ScenarioError as exc:
        raise ScenarioError("--scenario", "", str(exc)) from exc


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = vars(_parser().parse_args(argv))
    environ = os.environ if env is None else env
    try:
        values = {opt.attr: resolve(opt, args, environ) for opt in OPTIONS}
        if values["socket"] is None:
            raise ConfigError("--socket PATH is required")
    except ConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    process.configure_logging(values["log_level"], values["log_format"])
    try:
        scenario = _load(values["scenario"])
    except ScenarioError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    if values["sysfs_out"] is not None:
        write_sysfs(scenario.node, Path(values["sysfs_out"]))
    churn = values["churn_interval_s"]
    interval = scenario.churn_interval_s if churn is None else churn

    with process.stop_on_signals() as stop:
        sim = SimKubelet(scenario, Path(values["socket"]))
        try:
            sim.start()
        except OSError as exc:
            sys.stderr.write(f"error: {exc}\n")
            return 1
        try:
            if interval > 0:
                sim.start_churn(interval)
            log.info(
                "sim_serving",
                socket=str(sim.socket_path),
                scenario=scenario.name,
                pods=len(sim.node.pods),
                churn_interval_s=interval,
            )
            reason = stop.wait()
        finally:
            sim.stop(remove_socket=True)
    log.info("sim_exit", reason=reason)
    return 0


if __name__ == "__main__":
    sys.exit(main())
