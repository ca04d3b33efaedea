"""Generate the Prometheus rule files and their PrometheusRule component from the mixin's templates.

Usage: python tools/rules.py [--config FILE] [--out DIR] [--check]

The sources are the templates in tools/mixin/ (``alerts.yaml``, ``recording.yaml``): plain
Prometheus rule files (``groups:``) with placeholders for the settings of
tools/mixin_config.py. Written, with the defaults (or the settings of ``--config FILE``):

- deploy/prometheus/podres-alerts.yaml and deploy/prometheus/podres-recording.yaml, plain rule
  files for ``rule_files:``;
- deploy/components/prometheus-rules/: the same as two PrometheusRule objects (their ``spec`` is
  each file's content, indented as it stands, comments included) and the component's
  kustomization.yaml;
- deploy/helm/podres-exporter/files/: the Helm chart's copies of the two plain files.

``--out DIR`` writes the two rule files to DIR and the component to DIR/prometheus-rules/
instead (and no chart copies). ``--check`` writes nothing and exits 1 when the files differ
from what would be written; tests/rules runs it, so the committed files cannot drift from the
templates.

Placeholders (``string.Template``; ``$$`` is a dollar sign, ``$labels`` and ``$value`` are
Prometheus's own and left alone):

``$cluster``, ``$node``
    the names of the cluster and node labels;
``$exporter_selector``, ``$plugin_selector``
    the matchers of the agents' targets, e.g. ``up{$exporter_selector}``;
``$node_join``
    ``* on ($cluster, job, instance) group_left ($node) podres_node_info{...}``: gives each
    series of the exporter the node it runs on, whatever the scrape set-up;
``$recording_interval``
    the recording group's interval;
``$fit_recording_rules``, ``$fit_fragmented_expr``
    the rules and the alert expression of the pod shapes ``fit_shapes`` (tools/fit_rules.py);
``$runbook_url``
    in an alert, the URL of that alert's runbook.

An alert that a setting turns off (``target_down_alert``) is left out with its comment.
"""

from __future__ import annotations

import argparse
import re
import string
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fit_rules import fragmented_expr, recording_rules
from mixin_config import ConfigFileError, MixinConfig, load

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "tools" / "mixin"
PLAIN_DIR = ROOT / "deploy" / "prometheus"
COMPONENT = ROOT / "deploy" / "components" / "prometheus-rules"
COMPONENT_DIR_NAME = "prometheus-rules"
# The Helm chart loads the plain rule files from its own files/ (a chart holds no file outside
# its directory); they are written there too when writing into the repository.
CHART_FILES = ROOT / "deploy" / "helm" / "podres-exporter" / "files"
CHART_DIR_NAME = "chart"
KUSTOMIZATION_FILE = "kustomization.yaml"

NAMESPACE = "podres-system"
LABELS = {
    "app.kubernetes.io/name": "podres-exporter",
    "app.kubernetes.io/part-of": "podres-exporter",
    "app.kubernetes.io/managed-by": "kustomize",
}


@dataclass(frozen=True)
class RuleFile:
    """One generated rule file: its template, its plain name, its PrometheusRule."""

    template: str
    plain: str
    component: str
    object_name: str


RULE_FILES = (
    RuleFile("alerts.yaml", "podres-alerts.yaml", "prometheus-rules.yaml", "podres-exporter"),
    RuleFile(
        "recording.yaml",
        "podres-recording.yaml",
        "recording-rules.yaml",
        "podres-exporter-recording",
    ),
)
# Prometheus's own template variables (alert annotations), which are no settings of ours.
_PROMETHEUS_VARIABLES = r"(?:labels|value|externalLabels|externalURL)\b"
_ALERT = re.compile(r"^(\s*)- alert: *(\S+)\s*$")
_RUNBOOK = re.compile(r"\$runbook_url\b")


class SourceError(ValueError):
    """A template is not shaped as this generator needs."""


_PLACEHOLDER = rf"""
    \$(?:
        (?P<escaped>\$)
      | (?!{_PROMETHEUS_VARIABLES})(?P<named>[_a-z][_a-z0-9]*)
      | {{(?P<braced>[_a-z][_a-z0-9]*)}}
      | (?!{_PROMETHEUS_VARIABLES})(?P<invalid>)
    )
    """
_PLACEHOLDERS = re.compile(_PLACEHOLDER, re.VERBOSE | re.IGNORECASE)


class RuleTemplate(string.Template):
    """``string.Template`` that leaves Prometheus's ``$labels`` and ``$value`` alone."""

    # A string, as string.Template takes it (it compiles it with its flags); typeshed types
    # the attribute as the compiled pattern it becomes.
    pattern = _PLACEHOLDER  # type: ignore[assignment]


def settings(config: MixinConfig) -> dict[str, str]:
    """The placeholders' values for ``config`` (``$runbook_url`` is per alert, see below)."""
    node_info = f"podres_node_info{{{config.exporter_selector}}}"
    if config.node_label != "node":
        node_info = f'label_replace({node_info}, "{config.node_label}", "$1", "node", "(.*)")'
    node_join = (
        f"* on ({config.cluster_label}, job, instance) group_left ({config.node_label}) {node_info}"
    )
    cluster, node, selector = config.cluster_label, config.node_label, config.exporter_selector
    shapes = config.shapes()
    return {
        "cluster": cluster,
        "node": node,
        "exporter_selector": selector,
        "plugin_selector": config.plugin_selector,
        "recording_interval": config.recording_interval,
        "node_join": node_join,
        "fit_recording_rules": recording_rules(shapes, cluster, node, node_join, selector),
        "fit_fragmented_expr": fragmented_expr(shapes, cluster, selector),
    }


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _with_runbooks(name: str, text: str, config: MixinConfig) -> str:
    """``text`` with each ``$runbook_url`` replaced by the URL of the alert it is in."""
    lines = text.splitlines(keepends=True)
    alert = None
    for number, line in enumerate(lines):
        found = _ALERT.match(line)
        if found:
            alert = found.group(2)
        if _RUNBOOK.search(line):
            if alert is None:
                raise SourceError(f"{name}:{number + 1}: $runbook_url outside an alert")
            url = config.runbook(alert).replace("$", "$$")
            lines[number] = line.replace("$runbook_url", url)
    return "".join(lines)


def substitute(name: str, text: str, values: Mapping[str, str]) -> str:
    """``text`` with its placeholders replaced; an unknown or malformed one names its line."""
    template = RuleTemplate(text)
    for found in _PLACEHOLDERS.finditer(text):
        key = found.group("named") or found.group("braced")
        if found.group("invalid") is not None:
            raise SourceError(f"{name}:{_line_of(text, found.start())}: a lone `$` (write `$$`)")
        if key is not None and key not in values:
            raise SourceError(f"{name}:{_line_of(text, found.start())}: unknown setting ${key}")
    return template.substitute(values)


def drop_alert(text: str, alert: str) -> str:
    """``text`` without the rule ``alert``: its lines, the comment just above, the blank after."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if (m := _ALERT.match(line)) and m[2] == alert]
    if len(starts) != 1:
        raise SourceError(f"alert {alert} is not in the rules once")
    start = end = starts[0]
    indent = len(lines[start]) - len(lines[start].lstrip())
    end += 1
    while end < len(lines) and (
        not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent
    ):
        end += 1
    while start > 0 and lines[start - 1].strip().startswith("#"):
        start -= 1
    return "".join(lines[:start] + lines[end:])


def disabled_alerts(config: MixinConfig) -> list[str]:
    """The alerts the settings leave out."""
    return [] if config.target_down_alert == "true" else ["PodresTargetDown"]


def render_rule_file(rule_file: RuleFile, text: str, config: MixinConfig) -> str:
    """The plain rule file for the template ``text``."""
    name = f"tools/mixin/{rule_file.template}"
    rendered = substitute(name, _with_runbooks(name, text, config), settings(config))
    present = {m[2] for line in rendered.splitlines() if (m := _ALERT.match(line))}
    for alert in disabled_alerts(config):
        if alert in present:
            rendered = drop_alert(rendered, alert)
    header = (
        f"# Generated by tools/rules.py from {name}: do not edit.\n"
        "# Edit the template, then run `make rules` (a test fails while the two differ).\n"
        "#\n"
    )
    spec_lines(rule_file.plain, rendered)
    return header + rendered


def spec_lines(name: str, source: str) -> list[str]:
    """The rule file from its ``groups:`` line on, each line indented by two spaces.

    The leading comment block (which speaks of the file itself) is left out. The file must
    hold one YAML document whose only top-level key is ``groups``: indenting it under
    ``spec:`` is then exact, block scalars included.
    """
    lines = source.splitlines()
    starts = [i for i, line in enumerate(lines) if line.rstrip() == "groups:"]
    if len(starts) != 1:
        raise SourceError(f"{name}: expected one top-level `groups:` line")
    start = starts[0]
    if any(line.strip() and not line.startswith("#") for line in lines[:start]):
        raise SourceError(f"{name}: only comments may come before `groups:`")
    for number, line in enumerate(lines, start=1):
        if line.rstrip() in ("---", "..."):
            raise SourceError(f"{name}:{number}: one YAML document only")
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise SourceError(f"{name}:{number}: indent with spaces")
        top_level = line[:1] not in ("", " ", "#")
        if top_level and number - 1 != start:
            raise SourceError(f"{name}:{number}: `groups` must be the only top-level key")
    return [f"  {line}" if line.strip() else "" for line in lines[start:]]


def _header(source: str) -> str:
    return (
        f"# Generated by tools/rules.py from {source}: do not edit.\n"
        "# Edit the template, then run `make rules` (a test fails while the two differ).\n"
    )


def prometheus_rule(rule_file: RuleFile, plain: str) -> str:
    """The PrometheusRule whose spec is the plain rule file ``plain``."""
    labels = "".join(f"    {key}: {value}\n" for key, value in LABELS.items())
    return (
        _header(f"tools/mixin/{rule_file.template}")
        + "apiVersion: monitoring.coreos.com/v1\n"
        + "kind: PrometheusRule\n"
        + "metadata:\n"
        + f"  name: {rule_file.object_name}\n"
        + f"  namespace: {NAMESPACE}\n"
        + "  labels:\n"
        + labels
        + "spec:\n"
        + "\n".join(spec_lines(rule_file.plain, plain))
        + "\n"
    )


def kustomization() -> str:
    """The component's kustomization.yaml."""
    resources = "".join(f"  - {rule_file.component}\n" for rule_file in RULE_FILES)
    return (
        _header("tools/mixin/")
        + "#\n"
        + "# Component: the alert and recording rules as Prometheus Operator PrometheusRules.\n"
        + "# Needs the monitoring.coreos.com CRDs in the cluster; the Prometheus must select the\n"
        + "# rules (ruleSelector, ruleNamespaceSelector).\n"
        + "apiVersion: kustomize.config.k8s.io/v1alpha1\n"
        + "kind: Component\n"
        + "\n"
        + "resources:\n"
        + resources
    )


def render(config: MixinConfig, templates: Path = TEMPLATES) -> dict[str, str]:
    """Every generated file (path relative to the output root -> content).

    The plain rule files sit at the root, the component's files under ``prometheus-rules/``,
    the Helm chart's copies of the plain files under ``chart/``.
    """
    files: dict[str, str] = {}
    for rule_file in RULE_FILES:
        text = (templates / rule_file.template).read_text(encoding="utf-8")
        plain = render_rule_file(rule_file, text, config)
        files[rule_file.plain] = plain
        files[f"{COMPONENT_DIR_NAME}/{rule_file.component}"] = prometheus_rule(rule_file, plain)
        files[f"{CHART_DIR_NAME}/{rule_file.plain}"] = plain
    files[f"{COMPONENT_DIR_NAME}/{KUSTOMIZATION_FILE}"] = kustomization()
    return files


def destination(name: str, out: Path | None) -> Path:
    """Where the file ``name`` of :func:`render` goes: under ``out``, or the repository's place."""
    if out is not None:
        return out / name
    if name.startswith(f"{COMPONENT_DIR_NAME}/"):
        return COMPONENT / name.removeprefix(f"{COMPONENT_DIR_NAME}/")
    if name.startswith(f"{CHART_DIR_NAME}/"):
        return CHART_FILES / name.removeprefix(f"{CHART_DIR_NAME}/")
    return PLAIN_DIR / name


def stale(files: dict[str, str], out: Path | None) -> list[str]:
    """The names of ``files`` whose content at their destination differs (or is missing)."""
    differ = []
    for name, content in files.items():
        path = destination(name, out)
        if not path.is_file() or path.read_text(encoding="utf-8") != content:
            differ.append(str(path.relative_to(ROOT) if out is None else path))
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="a JSON file of settings (mixin_config.py)")
    parser.add_argument(
        "--out", type=Path, help="write into this directory, not the repository's deploy/"
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when out of step"
    )
    args = parser.parse_args(argv)
    try:
        files = render(load(args.config))
    except (ConfigFileError, SourceError) as err:
        print(f"rules: {err}", file=sys.stderr)
        return 2
    out: Path | None = args.out
    if out is not None:  # the chart's copies belong to the repository's chart only
        files = {k: v for k, v in files.items() if not k.startswith(f"{CHART_DIR_NAME}/")}
    if args.check:
        differ = stale(files, out)
        if differ:
            print(f"rules: out of step with tools/mixin/: {', '.join(differ)}; run `make rules`")
            return 1
        return 0
    for name, content in files.items():
        path = destination(name, out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        print(f"rules: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
