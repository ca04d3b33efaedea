"""The settings of the rule and dashboard generators, as a monitoring mixin's ``_config``.

``tools/rules.py`` and ``tools/dashboards.py`` read them: the committed files in
``deploy/prometheus/``, ``deploy/components/prometheus-rules/`` and ``dashboards/`` are written
with the defaults below. A user whose Prometheus labels targets otherwise writes a JSON file
with the keys to change and regenerates into a directory of their own::

    python tools/rules.py --config my-labels.json --out my-rules/
    python tools/dashboards.py --config my-labels.json --out my-boards/

Unknown keys and values of the wrong type are refused with the key named, so a typo does not
silently leave a default in place.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class MixinConfig:
    """What the generated rules and boards assume of the user's Prometheus."""

    # PromQL matchers that pick the exporter's and the plugin's targets (used on `up` and on
    # every series the rules read). The defaults match the jobs our ServiceMonitor, PodMonitor
    # and the plain scrape configuration in docs/deploy.md name.
    exporter_selector: str = 'job=~"podres-exporter|podres-system/podres-exporter"'
    plugin_selector: str = 'job=~"podres-device-plugin|podres-system/podres-exporter"'
    # The label that names the cluster where several clusters' data meet (Thanos, Mimir,
    # federation): rules keep it in every aggregation, boards offer it as a picker.
    cluster_label: str = "cluster"
    # The label that names the Kubernetes node on the boards and in the recording rules'
    # results. The recording rules take its value from podres_node_info (the node the agent
    # runs on), so they need no scrape relabelling.
    node_label: str = "node"
    # Where each alert's runbook is: `{anchor}` becomes the alert name in lower case.
    runbook_url: str = (
        "https://github.com/podres-exporter/podres-exporter/blob/main/docs/runbooks.md#{anchor}"
    )
    # Rule group evaluation interval for the recording rules.
    recording_interval: str = "1m"
    # "false" leaves PodresTargetDown out of the alerts: kube-prometheus's own TargetDown says
    # the same of every job, and a Prometheus that runs it needs ours not.
    target_down_alert: str = "true"
    # The pod shapes whose free blocks the recording rules follow and whose fragmentation the
    # PodresShapeFragmented alert watches (tools/fit_rules.py, docs/rules.md): NAME=TERM[+TERM]
    # joined by ",", each TERM a resource and the count one pod needs on one NUMA node
    # (`cpu`: exclusive CPUs).
    fit_shapes: str = (
        "gpu1=nvidia.com/gpu:1,gpu2=nvidia.com/gpu:2,gpu4=nvidia.com/gpu:4,"
        "gpu8=nvidia.com/gpu:8,cpu16=cpu:16,gpu4_cpu32=nvidia.com/gpu:4+cpu:32"
    )

    def shapes(self) -> list[Shape]:
        """The parsed ``fit_shapes``."""
        return parse_shapes(self.fit_shapes)

    def runbook(self, alert: str) -> str:
        """The runbook URL of ``alert``."""
        return self.runbook_url.format(anchor=alert.lower())


CPU = "cpu"
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_RESOURCE = re.compile(r"[a-z0-9.-]+/[a-zA-Z0-9._-]+")


@dataclass(frozen=True)
class Shape:
    """One pod shape: its name, devices per resource and exclusive CPUs, on one NUMA node."""

    name: str
    devices: tuple[tuple[str, int], ...]
    cpus: int


def parse_shapes(text: str) -> list[Shape]:
    """``name=resource:count+cpu:count,...``; ValueError saying what is wrong."""
    shapes: list[Shape] = []
    for item in text.split(","):
        name, sep, spec = item.strip().partition("=")
        if not sep or not _NAME.fullmatch(name):
            raise ValueError(f"{item.strip()!r}: expected NAME=RESOURCE:COUNT[+...]")
        devices: list[tuple[str, int]] = []
        cpus = 0
        for term in spec.split("+"):
            resource, sep, count = term.strip().rpartition(":")
            if not sep or not count.isdigit() or int(count) < 1:
                raise ValueError(f"{name}: {term.strip()!r}: expected RESOURCE:COUNT, COUNT >= 1")
            if resource == CPU and not cpus:
                cpus = int(count)
            elif _RESOURCE.fullmatch(resource) and resource not in dict(devices):
                devices.append((resource, int(count)))
            else:
                raise ValueError(f"{name}: {resource!r}: expected cpu or a domain/name resource")
        shapes.append(Shape(name, tuple(devices), cpus))
    names = [s.name for s in shapes]
    if len(set(names)) != len(names):
        raise ValueError("a shape name is used twice")
    return shapes


class ConfigFileError(ValueError):
    """The settings file cannot be used; the message names the file and the key."""


# Settings that must be a Prometheus label name, and settings with a fixed set of values.
_LABEL_NAMES = ("cluster_label", "node_label")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_CHOICES = {"target_down_alert": ("true", "false")}


def _check_value(path: Path, key: str, value: str) -> None:
    """Refuse a value the generators would turn into broken rules or boards."""
    if key in _LABEL_NAMES and not _LABEL_NAME.fullmatch(value):
        raise ConfigFileError(f"{path}: key {key!r} must be a label name, not {value!r}")
    if key == "fit_shapes":
        try:
            parse_shapes(value)
        except ValueError as exc:
            raise ConfigFileError(f"{path}: key {key!r}: {exc}") from None
    if key in _CHOICES and value not in _CHOICES[key]:
        choices = " or ".join(repr(choice) for choice in _CHOICES[key])
        raise ConfigFileError(f"{path}: key {key!r} must be {choices}, not {value!r}")


def load(path: Path | None) -> MixinConfig:
    """The defaults, with the keys of the JSON object in ``path`` (when given) in their place."""
    if path is None:
        return MixinConfig()
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ConfigFileError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: expected a JSON object of settings")
    fields = {field.name: field for field in dataclasses.fields(MixinConfig)}
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigFileError(f"{path}: unknown key {key!r}{hint}")
        if not isinstance(value, str) or not value:
            raise ConfigFileError(f"{path}: key {key!r} must be a non-empty string")
        _check_value(path, key, value)
    return dataclasses.replace(MixinConfig(), **data)
