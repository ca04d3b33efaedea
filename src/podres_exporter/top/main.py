"""``podres top``: the command line, its settings and the one-shot output.

Exit status: 0 on success (``q`` or Ctrl-C in live mode included; 130 for Ctrl-C
before the live loop runs or during ``--once``; a reader that left, ``| head``); 2 on a
usage or configuration error (a malformed URL included), or when what a flag names
cannot be reached or used (kubelet socket missing or permission denied, nothing
listening on it, an exporter or Prometheus URL that does not answer within
``--timeout``, a certificate not trusted, credentials refused, an HTTP 404 for the URL's
path): the message names the flag; 1 when the source answered but its answer is unusable
(another HTTP error, a rejected query, no podres metrics, an answer malformed, over
``--max-answer-size`` or unfinished at ``--timeout``, a kubelet error other than
UNAVAILABLE), or when the frame cannot be written (a full disk). Every error is one line
on stderr; URLs show no password.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from podres_exporter.core.errors import ConfigError, FetchError
from podres_exporter.daemon import logconf
from podres_exporter.daemon.flags import KUBELET_SOCKET, PATH_PROCFS, PATH_SYSFS
from podres_exporter.daemon.options import Option, given, resolve
from podres_exporter.daemon.values import duration, parse_path, parse_text, size
from podres_exporter.top.fetch import (
    BUSY_ONLY,
    HTTP_TIMEOUT_S,
    MAX_ANSWER_BYTES,
    ExporterSource,
    HttpSettings,
    LocalSource,
    PrometheusSource,
    Source,
    read_password,
)
from podres_exporter.top.jsonout import to_json
from podres_exporter.top.render import render
from podres_exporter.top.rows import (
    TopData,
    add_busy,
    build,
    cpu_times_advanced,
    needs_second_reading,
)
from podres_exporter.top.selection import ALL_SORT_KEYS, SORT_KEYS, VIEWS, Options

OUTPUTS = ("table", "wide", "json")
# --once: the time over which the local source measures busy shares.
BUSY_SAMPLE_S = 0.25
# --once --exporter: how long top waits for the exporter's next poll (the second reading
# of its busy counters), unless --interval is longer.
EXPORTER_WAIT_S = 30.0
# Width of a frame printed off a terminal (no COLUMNS): room for every column.
PIPE_WIDTH = {"table": 160, "wide": 240}

_TOP = "PODRES_TOP_"  # the variables of top's own flags
EXPORTER = Option(
    "--exporter", "exporter", parse_text, None, "Read a podres exporter's /metrics.",
    metavar="URL", env_prefix=_TOP,
)  # fmt: skip
PROMETHEUS = Option(
    "--prometheus", "prometheus", parse_text, None,
    "Read every node from Prometheus' HTTP API.", metavar="URL", env_prefix=_TOP,
)  # fmt: skip
NODE = Option(
    "--node", "node", parse_text, None,
    "With --prometheus: only the node whose node or instance label is NAME.",
    metavar="NAME", env_prefix=_TOP,
)  # fmt: skip
INTERVAL = Option(
    "--interval", "interval_s", duration(max_s=3600.0), 2.0,
    "Time between refreshes. At most 1h: a refresh rarer than that shows nothing live.",
    env_prefix=_TOP,
)  # fmt: skip
TIMEOUT = Option(
    "--timeout", "timeout_s", duration(max_s=600.0, min_s=0.1), HTTP_TIMEOUT_S,
    "With --exporter or --prometheus: the whole time one request may take (connecting, "
    "the headers and the body), however slowly the peer answers.",
    env_prefix=_TOP,
)  # fmt: skip
MAX_ANSWER_SIZE = Option(
    "--max-answer-size", "max_bytes", size(max_bytes=2**30), MAX_ANSWER_BYTES,
    "With --exporter or --prometheus: the largest answer read; a larger one is refused "
    "as it arrives (a 5,000-pod node's /metrics is about 7Mi).",
    env_prefix=_TOP,
)  # fmt: skip
AUTH_USER = Option(
    "--auth-user", "username", parse_text, None,
    "Basic auth user for a locked exporter or Prometheus (or user:password@ in the URL).",
    metavar="USER", env_prefix=_TOP,
)  # fmt: skip
AUTH_PASSWORD_FILE = Option(
    "--auth-password-file", "password_file", parse_path, None,
    "The file holding --auth-user's password (one line); never a flag, which ps shows.",
    env_prefix=_TOP,
)  # fmt: skip
CA_FILE = Option(
    "--ca-file", "ca_file", parse_path, None,
    "With an https:// URL: trust only the CA certificates in this PEM file; without it, "
    "the system's.",
    env_prefix=_TOP,
)  # fmt: skip
TLS_SERVER_NAME = Option(
    "--tls-server-name", "server_name", parse_text, None,
    "With an https:// URL: the name the server's certificate must carry, when the URL's "
    "host is not it (an address, say).",
    metavar="NAME", env_prefix=_TOP,
)  # fmt: skip
HTTP_OPTIONS: tuple[Option, ...] = (
    TIMEOUT, MAX_ANSWER_SIZE, AUTH_USER, AUTH_PASSWORD_FILE, CA_FILE, TLS_SERVER_NAME,
)  # fmt: skip
"""How top reaches an exporter or Prometheus."""
LOCAL_OPTIONS: tuple[Option, ...] = (KUBELET_SOCKET, PATH_SYSFS, PATH_PROCFS)
"""The exporter's flags of the local source, shared with it (its variables too)."""
SOURCE_OPTIONS: tuple[Option, ...] = (EXPORTER, PROMETHEUS, NODE, *HTTP_OPTIONS, *LOCAL_OPTIONS)


def add_top_parser(subparsers: Any) -> None:
    """Add ``top`` to the ``podres`` subcommands (an ``argparse`` subparsers action)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "top",
        help="show who holds which CPUs, devices and memory, live",
        description=(
            "A terminal view of the node: free shared CPUs, devices and memory per NUMA "
            "node, and per container its exclusive CPUs, their busy share, its devices and "
            "GPU use. Reads the local kubelet, or with --exporter or --prometheus an "
            "exporter or Prometheus."
        ),
    )
    src = p.add_argument_group("source (without --exporter or --prometheus: the local node)")
    for opt in SOURCE_OPTIONS:
        opt.add_to(src)
    show = p.add_argument_group("what to show")
    show.add_argument(
        "--view", choices=VIEWS, default="containers", help="the starting view (key v switches)"
    )
    show.add_argument(
        "--sort",
        choices=ALL_SORT_KEYS,
        default="",
        metavar="COLUMN",
        help="sort column: containers view "
        + ", ".join(SORT_KEYS["containers"])
        + "; devices view "
        + ", ".join(SORT_KEYS["devices"])
        + " (key s cycles)",
    )
    show.add_argument("--namespace", default="", help="only these namespaces (substring or glob)")
    show.add_argument("--pod", default="", help="only these pods (substring or glob)")
    show.add_argument(
        "--resource", default="", help="only these device resources (substring or glob)"
    )
    show.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default="table",
        help="table, wide (more columns) or json",
    )
    show.add_argument(
        "--once",
        action="store_true",
        help="print one frame and exit, as off a terminal; BUSY is measured over "
        f"{BUSY_SAMPLE_S:g} s locally, or over the exporter's next poll with --exporter "
        f"(waited for up to {EXPORTER_WAIT_S:g} s, or --interval if longer)",
    )
    INTERVAL.add_to(show)


@dataclass(frozen=True, slots=True)
class TopConfig:
    """What ``podres top`` was asked for, validated."""

    exporter: str
    prometheus: str
    node: str
    http: HttpSettings
    interval_s: float
    options: Options
    output: str
    once: bool


def config_from(ns: argparse.Namespace, env: Mapping[str, str]) -> TopConfig:
    """The command line and ``PODRES_TOP_*`` variables (flags win); ConfigError naming a flag."""
    flags = given(ns, (*SOURCE_OPTIONS, INTERVAL))
    raw = {o.attr: resolve(o, flags, env) or "" for o in (EXPORTER, PROMETHEUS, NODE)}
    if flags.get(EXPORTER.flag) and flags.get(PROMETHEUS.flag):
        raise ConfigError("--exporter and --prometheus are two sources: give one")
    # A variable for one source never fights a flag for the other.
    exporter = "" if flags.get(PROMETHEUS.flag) else raw["exporter"]
    prometheus = "" if flags.get(EXPORTER.flag) else raw["prometheus"]
    if exporter and prometheus:
        raise ConfigError(f"{EXPORTER.env} and {PROMETHEUS.env} are both set: unset one")
    if flags.get(NODE.flag) and not prometheus:
        raise ConfigError("--node picks a node of Prometheus: give --prometheus URL too")
    if exporter or prometheus:
        for opt in LOCAL_OPTIONS:
            if flags.get(opt.flag):
                other = "--exporter" if exporter else "--prometheus"
                raise ConfigError(f"{opt.flag} reads the local node; it does nothing with {other}")
    interval = resolve(INTERVAL, flags, env)
    http = http_settings(flags, env, remote=bool(exporter or prometheus))
    options = Options(
        view=ns.view,
        sort=ns.sort,
        namespace=ns.namespace,
        pod=ns.pod,
        resource=ns.resource,
        wide=ns.output == "wide",
    )
    return TopConfig(
        exporter=exporter,
        prometheus=prometheus,
        node=raw["node"] if prometheus else "",
        http=http,
        interval_s=interval,
        options=options,
        output=ns.output,
        once=ns.once,
    )


def http_settings(
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    remote: bool,
    options: tuple[Option, ...] = HTTP_OPTIONS,
) -> HttpSettings:
    """The settings of the network sources (``options``: the flags and variables that set
    them, :data:`HTTP_OPTIONS` or a command's own copies); ConfigError naming a flag."""
    if not remote:
        for opt in options:
            if flags.get(opt.flag):
                raise ConfigError(f"{opt.flag} is for --exporter or --prometheus: give one")
        return HttpSettings()
    v = {opt.attr: resolve(opt, flags, env) for opt in options}
    user, password_file = v["username"] or "", v["password_file"]
    if bool(user) != bool(password_file):
        raise ConfigError("--auth-user and --auth-password-file go together: give both")
    return HttpSettings(
        timeout_s=v["timeout_s"],
        max_bytes=v["max_bytes"],
        ca_file=v["ca_file"] or "",
        server_name=v["server_name"] or "",
        username=user,
        password=read_password(password_file) if password_file else "",
    )


def open_source(
    cfg: TopConfig, ns: argparse.Namespace, env: Mapping[str, str], *, live: bool
) -> Source:
    """The source the configuration names; raises ConfigError or FetchError."""
    if cfg.exporter:
        return ExporterSource(cfg.exporter, http=cfg.http)
    if cfg.prometheus:
        return PrometheusSource(cfg.prometheus, node=cfg.node, http=cfg.http)
    return local_source(ns, env, live=live)


def local_source(ns: argparse.Namespace, env: Mapping[str, str], *, live: bool) -> LocalSource:
    """The local node, read with :data:`LOCAL_OPTIONS` (flags, then their variables);
    ``live``: the exporter's machinery logs nowhere (a line would tear a frame), else
    errors only, to stderr. Raises ConfigError or FetchError."""
    # Deferred, as the local source's own machinery is: another source never needs them.
    from podres_exporter import collectors
    from podres_exporter.exporter.settings import build as build_settings

    flags = given(ns, LOCAL_OPTIONS)
    # Only top's own variables: the exporter's others (PODRES_CONFIG, PODRES_KUBELET_TIMEOUT...)
    # are not top's settings, and one variable means one thing in every command.
    own = {opt.env for opt in LOCAL_OPTIONS}
    local_env = {key: value for key, value in env.items() if key in own}
    settings = build_settings(flags, local_env, collector_names=tuple(collectors.BY_NAME))
    # The exporter's machinery logs; a log line would tear a live frame, and once only
    # errors go to stderr.
    logconf.configure("error", stream=io.StringIO() if live else sys.stderr, json=False)
    node = env.get("NODE_NAME") or socket.gethostname()
    return LocalSource(settings, node_name=node)


def read_once(
    source: Source,
    interval_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> TopData:
    """The rows of one frame, busy shares measured when the source allows.

    The local source measures busy shares itself over ``BUSY_SAMPLE_S`` (one reading).
    An exporter's busy counters move only when it polls: its rows are built from a
    first scrape while top waits for its next view (up to ``EXPORTER_WAIT_S``, or
    ``interval_s`` if longer), of which only the busy counters are read; an exporter
    that polls less often than that shows busy as unknown. Any other source is read
    again after ``BUSY_SAMPLE_S`` (at most ``interval_s``), until it has read CPU times
    again, for at most ``interval_s``.
    """
    what = source.description
    if isinstance(source, LocalSource):
        reading = source.read_with_busy(min(BUSY_SAMPLE_S, interval_s), sleep=sleep, clock=clock)
        return build(reading, source=what)
    first = source.read()
    if isinstance(source, ExporterSource):
        data = build(first, source=what)
        if not needs_second_reading(first):
            return data
        wait = max(EXPORTER_WAIT_S, interval_s)
        second = source.read_after_poll(first, wait, wanted=BUSY_ONLY, sleep=sleep, clock=clock)
        return add_busy(data, second, first)
    if not needs_second_reading(first):
        return build(first, source=what)
    deadline = clock() + max(interval_s, BUSY_SAMPLE_S)
    sleep(min(BUSY_SAMPLE_S, interval_s))
    second = source.read()
    while not cpu_times_advanced(first, second) and clock() < deadline:
        sleep(min(0.25, interval_s))
        second = source.read()
    return build(second, first, source=what)


def _width(env: Mapping[str, str], output: str, stream: Any) -> int:
    columns = env.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if stream.isatty():
        try:
            return os.get_terminal_size(stream.fileno()).columns
        except OSError:
            pass
    return PIPE_WIDTH.get(output, 160)


def run_top(ns: argparse.Namespace, env: Mapping[str, str], *, exit_when_done: bool = False) -> int:
    """Run ``podres top``; returns the exit status (see the module docstring).

    ``exit_when_done``: a one-shot run ends the process as soon as its frame is written
    and flushed (``os._exit``), the way the program's entry points run it: freeing a
    large node's objects one by one takes longer than some of the reading (about half a
    second of a 5,000-pod frame), and nothing is left to clean up. A caller in-process
    (the tests) leaves it off.
    """
    out, err = sys.stdout, sys.stderr
    collecting = gc.isenabled()
    try:
        cfg = config_from(ns, env)
        live = not cfg.once and cfg.output != "json" and sys.stdin.isatty() and out.isatty()
        if not live:
            # One frame, then exit: what it allocates is freed by reference counts, and the
            # cyclic collector's passes over a large node's objects would cost a fifth of
            # the run.
            gc.disable()
        source = open_source(cfg, ns, env, live=live)
        try:
            if live:
                from podres_exporter.top.live import run_live

                return run_live(source, source.read(), cfg.options, interval_s=cfg.interval_s)
            data = read_once(source, cfg.interval_s)
            if cfg.output == "json":
                text = json.dumps(to_json(data, cfg.options), indent=2) + "\n"
            else:
                text = render(data, cfg.options, _width(env, cfg.output, out))
            try:
                out.write(text)
                out.flush()
            except OSError as e:  # `| head` left, or a full disk: said once, no traceback
                return logconf.output_failed(out, err, "podres top", e)
            if exit_when_done:
                err.flush()
                os._exit(0)
            return 0
        finally:
            source.close()
    except ConfigError as e:
        logconf.say(err, f"podres top: error: {e}")
        return 2
    except FetchError as e:
        logconf.say(err, f"podres top: error: {e}")
        return e.exit_code
    except KeyboardInterrupt:  # Ctrl-C before the live loop, or during --once
        return 130
    finally:
        if collecting:
            gc.enable()
