"""``podres fit``: the command line, its settings, and the run.

Exit status: 0 when the pod fits on some node (the kubelet admits it there, and the
scheduler's check passes where it is made); 1 when it fits nowhere; 2 on every error:
a bad flag, manifest or quantity (the message names the flag, or the file and key), and
a source that cannot be read, whether it cannot be reached or its answer is unusable
(``podres top`` exits 1 for the latter; here 1 means "fits nowhere" only, so that a
script can trust it); 130 for Ctrl-C. Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podres_exporter.core.errors import ConfigError, FetchError
from podres_exporter.daemon import logconf
from podres_exporter.daemon.options import Option, given, resolve
from podres_exporter.daemon.values import parse_text
from podres_exporter.fit.answer import answer
from podres_exporter.fit.manifest import (
    GPU_RESOURCE,
    KINDS,
    MAX_MANIFEST_BYTES,
    Shape,
    pod_from_flags,
    pod_from_manifest,
)
from podres_exporter.fit.output import render, to_json
from podres_exporter.fit.source import (
    Snapshot,
    check_selector,
    read_exporter,
    read_prometheus,
    read_single,
)
from podres_exporter.fit.state import node_facts
from podres_exporter.top.fetch import HttpSettings
from podres_exporter.top.main import (
    EXPORTER,
    HTTP_OPTIONS,
    LOCAL_OPTIONS,
    NODE,
    PROMETHEUS,
    http_settings,
    local_source,
)

__all__ = ["FitConfig", "add_fit_parser", "config_from", "run_fit"]

_FIT = "PODRES_FIT_"  # the variables of fit's own flags
FIT_EXPORTER = dataclasses.replace(EXPORTER, env_prefix=_FIT)
FIT_PROMETHEUS = dataclasses.replace(PROMETHEUS, env_prefix=_FIT)
FIT_NODE = dataclasses.replace(NODE, env_prefix=_FIT)
SELECTOR = Option(
    "--selector", "selector", parse_text, None,
    'With --prometheus: only the series these label matchers pick (cluster="a",zone=~"eu-.*"); '
    "kube-state-metrics' too.",
    metavar="MATCHERS", env_prefix=_FIT,
)  # fmt: skip
FIT_HTTP_OPTIONS = tuple(dataclasses.replace(o, env_prefix=_FIT) for o in HTTP_OPTIONS)
REMOTE_OPTIONS: tuple[Option, ...] = (FIT_EXPORTER, FIT_PROMETHEUS, FIT_NODE, SELECTOR)
OUTPUTS = ("table", "json")
DEFAULT_LIMIT = 64
MAX_LIMIT = 10_000
# Width of the table printed off a terminal (no COLUMNS).
PIPE_WIDTH = 160


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"expected 1 to {MAX_LIMIT}, got {value}")
    return value


def add_fit_parser(subparsers: Any) -> None:
    """Add ``fit`` to the ``podres`` subcommands (an ``argparse`` subparsers action)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "fit",
        help="which nodes would admit a pod, on which NUMA nodes, and how many more",
        description=(
            "Answers, per node, whether the kubelet's Topology, CPU, memory and device "
            "managers would admit a pod now, on which NUMA nodes, why not, and how many "
            "more of it fit. Reads the local kubelet, or with --exporter or --prometheus "
            "an exporter or a fleet."
        ),
    )
    pod = p.add_argument_group("the pod (a manifest, or a shape)")
    pod.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        help=f"a manifest (- for stdin): a {', '.join(KINDS)}; the first, or --name",
    )
    pod.add_argument("--name", default="", help="with -f: the workload of this metadata.name")
    pod.add_argument("--cpu", metavar="QUANTITY", help="CPUs the pod requests (8, 500m)")
    pod.add_argument("--memory", metavar="QUANTITY", help="memory the pod requests (64Gi)")
    pod.add_argument("--gpu", metavar="N", help=f"{GPU_RESOURCE} devices the pod requests")
    pod.add_argument(
        "--resource",
        action="append",
        default=[],
        metavar="NAME=QUANTITY",
        help="another resource (example.com/nic=2, hugepages-1Gi=4Gi); repeatable",
    )
    pod.add_argument(
        "--container",
        action="append",
        default=[],
        metavar="SPEC",
        help="one more container: cpu=4,memory=8Gi,nvidia.com/gpu=1; repeatable",
    )
    src = p.add_argument_group("source (without --exporter or --prometheus: the local node)")
    for opt in (*REMOTE_OPTIONS, *FIT_HTTP_OPTIONS, *LOCAL_OPTIONS):
        opt.add_to(src)
    show = p.add_argument_group("the answer")
    show.add_argument("-o", "--output", choices=OUTPUTS, default="table", help="table or json")
    show.add_argument(
        "--limit",
        type=_limit,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"count at most N more pods per node [default {DEFAULT_LIMIT}]",
    )


@dataclass(frozen=True, slots=True)
class FitConfig:
    """What ``podres fit`` was asked, validated (the pod read later: stdin may hold it)."""

    exporter: str
    prometheus: str
    node: str
    selector: str
    http: HttpSettings
    output: str
    limit: int


def config_from(ns: argparse.Namespace, env: Mapping[str, str]) -> FitConfig:
    """The source flags and ``PODRES_FIT_*`` variables (flags win); ConfigError naming a flag."""
    flags = given(ns, (*REMOTE_OPTIONS, *FIT_HTTP_OPTIONS, *LOCAL_OPTIONS))
    raw = {o.attr: resolve(o, flags, env) or "" for o in REMOTE_OPTIONS}
    if flags.get(FIT_EXPORTER.flag) and flags.get(FIT_PROMETHEUS.flag):
        raise ConfigError("--exporter and --prometheus are two sources: give one")
    exporter = "" if flags.get(FIT_PROMETHEUS.flag) else raw["exporter"]
    prometheus = "" if flags.get(FIT_EXPORTER.flag) else raw["prometheus"]
    if exporter and prometheus:
        raise ConfigError(f"{FIT_EXPORTER.env} and {FIT_PROMETHEUS.env} are both set: unset one")
    for opt in (FIT_NODE, SELECTOR):
        if flags.get(opt.flag) and not prometheus:
            raise ConfigError(f"{opt.flag} picks nodes of Prometheus: give --prometheus URL too")
    if exporter or prometheus:
        for opt in LOCAL_OPTIONS:
            if flags.get(opt.flag):
                other = "--exporter" if exporter else "--prometheus"
                raise ConfigError(f"{opt.flag} reads the local node; it does nothing with {other}")
    http = http_settings(flags, env, remote=bool(exporter or prometheus), options=FIT_HTTP_OPTIONS)
    return FitConfig(
        exporter=exporter,
        prometheus=prometheus,
        node=raw["node"] if prometheus else "",
        selector=check_selector(raw["selector"]) if prometheus else "",
        http=http,
        output=ns.output,
        limit=ns.limit,
    )


def _read_manifest(path: str) -> str:
    """The manifest's text; ConfigError naming ``-f`` and the file."""
    where = "stdin (-f -)" if path == "-" else f"-f {path}"
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(MAX_MANIFEST_BYTES + 1)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the path
        raise ConfigError(f"{where}: {getattr(err, 'strerror', None) or err}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_MANIFEST_BYTES} bytes: no manifest is")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None


def shape_from(ns: argparse.Namespace) -> Shape:
    """The pod the command line names: ``-f`` or the shape flags, not both."""
    shape_flags = [
        flag
        for flag, value in (
            ("--cpu", ns.cpu),
            ("--memory", ns.memory),
            ("--gpu", ns.gpu),
            ("--resource", ns.resource),
            ("--container", ns.container),
        )
        if value
    ]
    if ns.filename is not None:
        if shape_flags:
            raise ConfigError(f"-f and {shape_flags[0]} both name the pod: give one")
        return pod_from_manifest(_read_manifest(ns.filename), ns.filename, name=ns.name)
    if ns.name:
        raise ConfigError("--name picks a workload of a manifest: give -f FILE too")
    return pod_from_flags(
        cpu=ns.cpu, memory=ns.memory, gpu=ns.gpu, resources=ns.resource, containers=ns.container
    )


def read_nodes(cfg: FitConfig, ns: argparse.Namespace, env: Mapping[str, str]) -> Snapshot:
    """Every node the source has; raises ConfigError or FetchError."""
    if cfg.prometheus:
        from podres_exporter.top.fetch import PrometheusSource

        prom = PrometheusSource(cfg.prometheus, node=cfg.node, http=cfg.http)
        try:
            return read_prometheus(prom, cfg.selector)
        finally:
            prom.close()
    if cfg.exporter:
        from podres_exporter.top.fetch import ExporterSource

        return read_exporter(ExporterSource(cfg.exporter, http=cfg.http))
    local = local_source(ns, env, live=False)
    try:
        return read_single(local.read(), local.description)
    finally:
        local.close()


def _width(env: Mapping[str, str]) -> int:
    columns = env.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        try:
            return os.get_terminal_size(sys.stdout.fileno()).columns
        except OSError:
            pass
    return PIPE_WIDTH


def run_fit(ns: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Run ``podres fit``; returns the exit status (see the module docstring)."""
    out, err = sys.stdout, sys.stderr
    try:
        cfg = config_from(ns, env)
        shape = shape_from(ns)
        snap = read_nodes(cfg, ns, env)
        facts = [node_facts(node, samples) for node, samples in snap.nodes.items()]
        fleet = answer(facts, shape.pod, snap.scheduler, limit=cfg.limit)
        if cfg.output == "json":
            doc = to_json(fleet, shape.pod, shape.origin, snap.description, cfg.limit)
            text = json.dumps(doc, indent=2) + "\n"
        else:
            text = render(fleet, shape.pod, shape.origin, snap.description, _width(env))
        try:
            out.write(text)
            out.flush()
        except OSError as e:
            return logconf.output_failed(out, err, "podres fit", e)
        return 0 if fleet.fitting else 1
    except (ConfigError, FetchError) as e:
        logconf.say(err, f"podres fit: error: {e}")
        return 2
    except KeyboardInterrupt:
        return 130
