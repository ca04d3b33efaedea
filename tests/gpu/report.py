"""The GPU tier's report: ``report.json`` and ``report.md`` from what the tier recorded.

    python -m tests.gpu.report --out DIR

reads ``DIR/facts.json`` (written by the tier's session: the driver, the devices, each
field read or unsupported, the timings, the notes of each check) and ``DIR/junit.xml``
(pytest's outcomes), and writes the two reports beside them. Without facts (the tier did
not get as far as recording any) the driver is probed again, so the report always says
whether a GPU answered, and why not.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FACTS = "facts.json"
JUNIT = "junit.xml"


def outcomes_from_junit(path: Path) -> list[dict[str, str]]:
    """Each test case: its name, outcome (passed, failed, error, skipped) and message."""
    if not path.is_file():
        return []
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314 - our own file
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = node.get("message") or (node.text or "")
                break
        out.append(
            {
                "test": f"{case.get('classname', '')}::{case.get('name', '')}",
                "outcome": outcome,
                "message": message.strip()[:500],
            }
        )
    return out


def build_report(facts: dict[str, Any], outcomes: list[dict[str, str]]) -> dict[str, Any]:
    """The report as data: the verdict first, then what it rests on."""
    probe = facts.get("probe") or {}
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o["outcome"]] = counts.get(o["outcome"], 0) + 1
    gpu = bool(probe.get("ok"))
    failed = counts.get("failed", 0) + counts.get("error", 0)
    if not gpu:
        summary = f"no GPU: {probe.get('message', 'the driver was not probed')}"
    elif failed:
        summary = f"GPU tier FAILED: {failed} of {len(outcomes)} tests"
    else:
        summary = (
            f"GPU tier passed: {counts.get('passed', 0)} passed, {counts.get('skipped', 0)} skipped"
        )
    return {
        "summary": summary,
        "gpu": gpu,
        "driver_version": probe.get("driver_version"),
        "cuda_version": probe.get("cuda_version"),
        "nvml_version": probe.get("nvml_version"),
        "devices": probe.get("devices", []),
        "fields": facts.get("fields", []),
        "timings": facts.get("timings", {}),
        "checks": facts.get("checks", {}),
        "nvidia_smi": facts.get("nvidia_smi"),
        "outcomes": outcomes,
        "counts": counts,
    }


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        text = ", ".join(map(str, value)) if value else "(none)"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    """The report for a person: verdict, driver, devices, fields, timings, checks, tests."""
    lines = ["# GPU tier report", "", f"**{report['summary']}**", ""]
    if report["gpu"]:
        lines += [
            f"- driver {report['driver_version']}, CUDA {report['cuda_version']}, "
            f"NVML {report['nvml_version']}",
            *(
                f"- GPU {d['index']}: {d['name']} `{d['uuid']}`"
                + (f" (MIG of {d['parent']})" if d.get("parent") else "")
                + (
                    ""
                    if d.get("mig_enabled") is None
                    else f", MIG {'on' if d['mig_enabled'] else 'off'}"
                )
                for d in report["devices"]
            ),
            "",
        ]
    if report["fields"]:
        lines += ["## Fields", "", "| device | field | series | status | value | unit | problem |"]
        lines.append("|---|---|---|---|---|---|---|")
        for f in report["fields"]:
            lines.append(
                "| "
                + " | ".join(
                    _cell(f.get(k))
                    for k in ("uuid", "field", "series", "status", "value", "unit", "problem")
                )
                + " |"
            )
        lines.append("")
    if report["timings"]:
        lines += ["## Cost of one NVML read (NvmlBackend.read)", ""]
        lines += [f"- {name}: {_cell(json.dumps(t))}" for name, t in report["timings"].items()]
        lines.append("")
    if report["checks"]:
        lines += ["## Checks", ""]
        lines += [f"- {name}: {_cell(note)}" for name, note in report["checks"].items()]
        lines.append("")
    lines += ["## Tests", "", "| test | outcome | message |", "|---|---|---|"]
    lines += [
        f"| {_cell(o['test'])} | {o['outcome']} | {_cell(o['message'])} |"
        for o in report["outcomes"]
    ]
    return "\n".join(lines) + "\n"


def write_report(
    out: Path, facts: dict[str, Any], outcomes: list[dict[str, str]]
) -> dict[str, Any]:
    """Write ``report.json`` and ``report.md`` in ``out``; returns the report."""
    report = build_report(facts, outcomes)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out / "report.md").write_text(render_markdown(report))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.gpu.report")
    p.add_argument("--out", type=Path, required=True, help="the report folder")
    ns = p.parse_args(argv)
    facts_path = ns.out / FACTS
    facts: dict[str, Any] = {}
    if facts_path.is_file():
        facts = json.loads(facts_path.read_text())
    if not facts.get("probe"):
        from tests.gpu.probe import probe

        facts["probe"] = probe().as_dict()
    report = write_report(ns.out, facts, outcomes_from_junit(ns.out / JUNIT))
    lines = [report["summary"]]
    lines += [
        f"one NVML read, {name}: median {t.get('median_ms')} ms (min {t.get('min_ms')}, "
        f"max {t.get('max_ms')}, {t.get('reads')} reads)"
        for name, t in report["timings"].items()
    ]
    sys.stdout.write("\n".join([*lines, f"report: {ns.out / 'report.md'}"]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
