"""Run the simulated kubelet standalone until SIGTERM or SIGINT.

    python -m podres_sim --scenario demo --socket /tmp/podres/kubelet.sock \\
        [--sysfs-out DIR] [--churn-interval SECONDS] [--log-level LEVEL] [--log-format FORMAT]

``--scenario`` is a built-in name (``demo``, ``minimal`` ...), a TOML file, or
``synthetic:PODS[:N]`` (``Scenario.synthetic``: every Nth pod with an exclusive CPU).
``--churn-interval`` defaults to the scenario's (0 turns churn off). On a signal the
server stops and the socket is removed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from podres_exporter.core.errors import ScenarioError
from podres_exporter.daemon import process
from podres_exporter.daemon.logconf import FORMATS, LEVELS
from podres_sim.host import write_sysfs
from podres_sim.kubelet import SimKubelet
from podres_sim.scenario import Scenario, builtin_names, resolve_scenario

log = structlog.get_logger("podres_sim")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m podres_sim",
        description="Serve a simulated kubelet pod-resources API on a unix socket.",
    )
    p.add_argument(
        "--scenario",
        default="demo",
        help=f"built-in scenario ({', '.join(builtin_names())}), a TOML file, or "
        "synthetic:PODS[:N] for Scenario.synthetic (every Nth pod with an exclusive CPU) "
        "(default: demo)",
    )
    p.add_argument("--socket", required=True, type=Path, help="unix socket path to serve on")
    p.add_argument("--sysfs-out", type=Path, help="also write a fake sysfs tree for the node here")
    p.add_argument(
        "--churn-interval",
        type=float,
        default=None,
        help="seconds between churn steps (default: the scenario's; 0: no churn)",
    )
    p.add_argument("--log-level", default="info", choices=LEVELS, help="(default: info)")
    p.add_argument(
        "--log-format",
        default="auto",
        choices=FORMATS,
        help="auto (JSON unless stderr is a terminal), json or console (default: auto)",
    )
    return p


def _load(name: str) -> Scenario:
    try:
        return resolve_scenario(name)
    except ScenarioError as exc:
        raise ScenarioError("--scenario", "", str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    process.configure_logging(args.log_level, args.log_format)
    try:
        scenario = _load(args.scenario)
    except ScenarioError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    if args.sysfs_out is not None:
        write_sysfs(scenario.node, args.sysfs_out)
    interval = scenario.churn_interval_s if args.churn_interval is None else args.churn_interval

    with process.stop_on_signals() as stop:
        sim = SimKubelet(scenario, args.socket)
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
