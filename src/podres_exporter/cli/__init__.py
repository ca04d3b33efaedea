"""The ``podres`` command: ``export`` (the daemon), ``demo``, ``snapshot``, ``plugin``, ``top``.

Exit status: 0 on success, 1 when the work failed (the kubelet could not be
read), 2 on a usage or configuration error; the message names what to fix. The daemon
commands (``export``, ``demo``, ``plugin``) ignore SIGHUP from their first step, so that
it never ends them while they start or stop; while they run it reloads.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from podres_exporter import __version__, collectors
from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon import process
from podres_exporter.deviceplugin.main import add_plugin_parser
from podres_exporter.exporter.settings import BY_FLAG, OPTIONS, Settings, build
from podres_exporter.top.main import add_top_parser

_SNAPSHOT_FLAGS = (
    "--kubelet-socket", "--kubelet-max-message-size", "--kubelet-timeout", "--path.sysfs",
    "--path.procfs", "--path.pod-logs", "--path.container-logs", "--source-timeout",
    "--gpu-resources", "--log-level", "--log-format",
)  # fmt: skip
_DEMO_FLAGS = ("--listen-address", "--poll-interval", "--log-level", "--log-format")
# The commands that run until stopped: a SIGHUP never ends them (it reloads, or is ignored).
_DAEMONS = ("export", "demo", "plugin")


def _add_options(
    p: argparse.ArgumentParser, flags: Sequence[str], *, collector_flags: bool
) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML config file (also PODRES_CONFIG)")
    for flag in flags:
        opt = BY_FLAG[flag]
        p.add_argument(flag, dest=flag, default=None, metavar="VALUE", help=opt.help + opt.shown())
    if collector_flags:
        group = p.add_argument_group("collectors")
        for c in collectors.ALL:
            state = "on" if c.default_enabled else "off"
            for switch, const, text in (
                (f"--collector.{c.name}", True, f"enable {c.description} (default {state})"),
                (f"--no-collector.{c.name}", False, argparse.SUPPRESS),
            ):
                group.add_argument(
                    switch,
                    dest=f"collector.{c.name}",
                    action="store_const",
                    const=const,
                    default=None,
                    help=text,
                )


def parser() -> argparse.ArgumentParser:
    """The whole command line."""
    top = argparse.ArgumentParser(
        prog="podres",
        description="Which container holds which CPUs, devices and memory on a Kubernetes node.",
    )
    top.add_argument("--version", action="version", version=f"podres {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    export = sub.add_parser("export", help="run the exporter daemon (serves /metrics)")
    _add_options(export, [o.flag for o in OPTIONS], collector_flags=True)
    demo = sub.add_parser("demo", help="run the exporter against the built-in simulated node")
    _add_options(demo, _DEMO_FLAGS, collector_flags=True)
    demo.add_argument(
        "--scenario",
        default="demo",
        help="built-in scenario name, a TOML file, or synthetic:PODS[:N]",
    )
    demo.add_argument(
        "--churn-interval",
        default="5s",
        metavar="DURATION",
        help="time between simulated pod replacements (0 for none; max 1h)",
    )
    snap = sub.add_parser("snapshot", help="print one reading with its accounting as JSON")
    _add_options(snap, _SNAPSHOT_FLAGS, collector_flags=False)
    snap.add_argument(
        "--pod", metavar="NAMESPACE/NAME", help="only this pod (uses Get where served)"
    )
    snap.add_argument(
        "--no-telemetry",
        dest="telemetry",
        action="store_false",
        help="read the kubelet only, not NVML, sysfs devices and procfs",
    )
    add_plugin_parser(sub)
    add_top_parser(sub)
    return top


def settings_from(ns: argparse.Namespace, env: Mapping[str, str]) -> Settings:
    """Settings from parsed arguments and the environment."""
    raw: dict[str, Any] = vars(ns)
    flags = {o.flag: raw[o.flag] for o in OPTIONS if raw.get(o.flag) is not None}
    coll = {
        c.name: raw[f"collector.{c.name}"]
        for c in collectors.ALL
        if raw.get(f"collector.{c.name}") is not None
    }
    return build(
        flags,
        env,
        config_path=ns.config,
        collector_names=tuple(collectors.BY_NAME),
        collector_flags=coll,
    )


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Entry point of ``podres``; returns the exit status.

    Run as the program (no ``argv``), ``podres top --once`` ends the process itself once
    its frame is written (see ``run_top``).
    """
    ns = parser().parse_args(argv)
    if ns.command in _DAEMONS:
        process.ignore_hangup()  # before anything slow: a SIGHUP while starting is no stop
    environ = os.environ if env is None else env
    if ns.command == "plugin":  # its own settings and config file
        from podres_exporter.deviceplugin.main import run_plugin

        return run_plugin(ns, environ)
    if ns.command == "top":  # its own flags; shares the exporter's kubelet settings
        from podres_exporter.top.main import run_top

        # Run as the program (no argv), a one-shot frame ends the process once written.
        return run_top(ns, environ, exit_when_done=argv is None)
    try:
        settings = settings_from(ns, environ)
        if ns.command == "export":
            from podres_exporter.cli.export import run_export

            return run_export(settings)
        if ns.command == "demo":
            from podres_exporter.cli.demo import run_demo

            return run_demo(settings, scenario=ns.scenario, churn=ns.churn_interval)
        from podres_exporter.cli.snapshot import run_snapshot

        return run_snapshot(settings, pod=ns.pod, telemetry=ns.telemetry)
    except ConfigError as err:
        print(f"podres {ns.command}: error: {err}", file=sys.stderr)
        return 2
