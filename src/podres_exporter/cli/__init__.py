"""The ``podres`` command: ``export`` (the daemon), ``demo``, ``snapshot``, ``plugin``, ``top``,
``fit``.

Exit status: 0 on success, 1 when the work failed (the kubelet answered an error), 2 on
a usage or configuration error, or when what a flag names cannot be used (a kubelet
socket missing or refusing, a port taken); the message names what to fix, once, and
nothing is logged before it. An unknown flag gets its command's usage and the flag it is
closest to (:class:`~podres_exporter.daemon.options.CommandParser`). The daemon
commands (``export``, ``demo``, ``plugin``) ignore SIGHUP from their first step, so that
it never ends them while they start or stop; while they run it reloads.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence

from podres_exporter import __version__, collectors
from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon import logconf, process
from podres_exporter.daemon.flags import (
    KUBELET_SOCKET,
    LOG_FORMAT,
    LOG_LEVEL,
    PATH_PROCFS,
    PATH_SYSFS,
)
from podres_exporter.daemon.options import CommandParser, Option, given, resolve
from podres_exporter.daemon.values import duration, parse_text
from podres_exporter.deviceplugin.main import add_plugin_parser
from podres_exporter.exporter.settings import (
    ANSWER_LIMITS,
    BY_FLAG,
    COLLECTOR_SWITCHES,
    CONFIG,
    KUBELET_FILES,
    OPTIONS,
    Settings,
    build,
)
from podres_exporter.fit import add_fit_parser
from podres_exporter.top.main import add_top_parser

SNAPSHOT_OPTIONS: tuple[Option, ...] = (
    KUBELET_SOCKET, BY_FLAG["--kubelet-max-message-size"], BY_FLAG["--kubelet-timeout"],
    PATH_SYSFS, PATH_PROCFS, BY_FLAG["--path.pod-logs"], BY_FLAG["--path.container-logs"],
    BY_FLAG["--source-timeout"], BY_FLAG["--gpu-resources"], *ANSWER_LIMITS, LOG_LEVEL,
    LOG_FORMAT, *KUBELET_FILES,
)  # fmt: skip
"""The exporter's options that ``podres snapshot`` takes: the reading, not the serving."""

SCENARIO = Option(
    "--scenario",
    "scenario",
    parse_text,
    "demo",
    "A built-in scenario, a scenario TOML file, or synthetic:PODS[:N].",
    metavar="SCENARIO",
    env_prefix=None,
)
CHURN_INTERVAL = Option(
    "--churn-interval",
    "churn_interval_s",
    duration(max_s=3600.0, zero=True),
    5.0,
    "Time between simulated pod replacements; 0: none. At most 1h: rarer churn is no churn "
    "to watch.",
    env_prefix=None,
)
DEMO_LISTEN_ADDRESS = dataclasses.replace(BY_FLAG["--listen-address"], default="127.0.0.1:9842")
"""The demo's ``--listen-address``: the exporter's, on the loopback unless told (its help
shows this default; ``demo_settings`` applies it where no flag, variable or key is set)."""
DEMO_OPTIONS: tuple[Option, ...] = (
    DEMO_LISTEN_ADDRESS, BY_FLAG["--poll-interval"], LOG_LEVEL, LOG_FORMAT,
)  # fmt: skip
"""The exporter's options that ``podres demo`` takes (the simulated node sets the rest)."""

# The commands that run until stopped: a SIGHUP never ends them (it reloads, or is ignored).
_DAEMONS = ("export", "demo", "plugin")


def _add_options(
    p: argparse.ArgumentParser, options: Sequence[Option], *, collector_flags: bool
) -> None:
    CONFIG.add_to(p)
    for opt in options:
        opt.add_to(p)
    if collector_flags:
        group = p.add_argument_group("collectors")
        for switch in COLLECTOR_SWITCHES:
            switch.add_to(group)


def parser() -> argparse.ArgumentParser:
    """The whole command line."""
    top = CommandParser(
        prog="podres",
        description="Which container holds which CPUs, devices and memory on a Kubernetes node.",
    )
    top.add_argument("--version", action="version", version=f"podres {__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    export = sub.add_parser("export", help="run the exporter daemon (serves /metrics)")
    _add_options(export, OPTIONS, collector_flags=True)
    demo = sub.add_parser("demo", help="run the exporter against the built-in simulated node")
    _add_options(demo, DEMO_OPTIONS, collector_flags=True)
    SCENARIO.add_to(demo)
    CHURN_INTERVAL.add_to(demo)
    snap = sub.add_parser("snapshot", help="print one reading with its accounting as JSON")
    _add_options(snap, SNAPSHOT_OPTIONS, collector_flags=False)
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
    add_fit_parser(sub)
    return top


def settings_from(ns: argparse.Namespace, env: Mapping[str, str]) -> Settings:
    """Settings from parsed arguments and the environment."""
    switched = given(ns, COLLECTOR_SWITCHES)
    return build(
        given(ns, OPTIONS),
        env,
        config_path=getattr(ns, CONFIG.flag),
        collector_names=tuple(collectors.BY_NAME),
        collector_flags={
            opt.attr: switched[opt.flag] for opt in COLLECTOR_SWITCHES if opt.flag in switched
        },
    )


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:  # noqa: PLR0911 - one return per command
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
    if ns.command == "fit":  # its own flags; shares top's sources
        from podres_exporter.fit import run_fit

        return run_fit(ns, environ)
    try:
        settings = settings_from(ns, environ)
        if ns.command == "export":
            from podres_exporter.cli.export import run_export

            return run_export(settings)
        if ns.command == "demo":
            from podres_exporter.cli.demo import demo_settings, run_demo

            raw = vars(ns)
            flags, config_path = given(ns, DEMO_OPTIONS), getattr(ns, CONFIG.flag)
            return run_demo(
                demo_settings(
                    settings, flags, environ, config_path=config_path, terminal=sys.stderr.isatty()
                ),
                scenario=resolve(SCENARIO, raw, environ),
                churn_s=resolve(CHURN_INTERVAL, raw, environ),
            )
        from podres_exporter.cli.snapshot import run_snapshot

        return run_snapshot(settings, pod=ns.pod, telemetry=ns.telemetry)
    except ConfigError as err:
        logconf.say(sys.stderr, f"podres {ns.command}: error: {err}")
        return 2
