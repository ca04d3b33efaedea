"""``podres fit``'s answer as a table (rich, at a fixed width, no colour) or as JSON. Pure.

The table has a line on the pod and the source, a line on the scheduler's check (made,
or why not), one row per node (whether the pod fits, on which NUMA nodes, how many more,
and when it does not, why), a line with the fleet's totals, and the notes the answer
rests on (policies assumed, a kubelet not answering), each once with the nodes it
concerns. The JSON schema is in docs/fit.md; :data:`SCHEMA_VERSION` is its version.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from podres_exporter.core.printable import printable
from podres_exporter.core.topology import CPU, Decision, Placement, Pod, qos
from podres_exporter.fit.answer import FleetAnswer, NodeAnswer, SchedulerVerdict, pod_requests
from podres_exporter.top.cells import fmt_bytes

__all__ = ["NO_SCHEDULER", "SCHEMA_VERSION", "render", "to_json"]

SCHEMA_VERSION = 1
_NAMED = 3  # nodes a note names before it counts the rest
NO_SCHEDULER = (
    "kube-state-metrics is not in this source (kube_node_status_allocatable): the answer "
    "covers the kubelet's admission only, not the scheduler's check of requests against "
    "allocatable"
)


def _amount(resource: str, value: int) -> str:
    if resource == CPU:
        return f"{value // 1000}" if value % 1000 == 0 else f"{value}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return fmt_bytes(value)
    return str(value)


def pod_text(pod: Pod) -> str:
    """``Guaranteed; cpu 8, memory 64Gi, nvidia.com/gpu 4``: the QoS class and the requests."""
    wants = ", ".join(f"{r} {_amount(r, a)}" for r, a in sorted(pod_requests(pod).items()) if a)
    return f"{qos(pod).value}; {wants or 'no requests'}"


def _affinity(p: Placement) -> str:
    return "any" if p.affinity is None else ",".join(str(n) for n in p.affinity)


def numa_text(decision: Decision) -> str:
    """Where the pod goes: ``0`` when every placement is on NUMA node 0, ``any`` when none
    has a preference, else each container's (``app=0 side=1``)."""
    if not decision.admitted:
        return "-"
    shown = {_affinity(p) for p in decision.placements}
    if len(shown) <= 1:
        return shown.pop() if shown else "any"
    return " ".join(f"{p.container or 'pod'}={_affinity(p)}" for p in decision.placements)


def why_text(a: NodeAnswer) -> str:
    """Why the pod does not fit (empty when it does)."""
    d = a.decision
    if not d.admitted:
        s = d.shortage
        if s is not None:
            where = ",".join(str(n) for n in s.numa_nodes) or "any"
            return (
                f"{d.reason.value}: {s.resource} short on NUMA {where} under "
                f"{s.policy.value}: {_amount(s.resource, s.requested)} wanted, "
                f"{_amount(s.resource, s.available)} free"
            )
        return f"{d.reason.value}: {d.message}" if d.message else d.reason.value
    if a.scheduler is not None and not a.scheduler.fits:
        return f"scheduler: {', '.join(a.scheduler.short)} short of allocatable"
    return ""


def _notes(fleet: FleetAnswer, pod: Pod) -> list[str]:
    by_note: dict[str, list[str]] = defaultdict(list)
    extended = [r for r, n in pod_requests(pod).items() if n and "/" in r]
    for a in fleet.nodes:
        for note in a.facts.notes:
            by_note[note].append(a.node)
        for r in extended:
            if r not in a.facts.state.devices:
                note = f"no device plugin serves {r}: the kubelet leaves it to the scheduler"
                by_note[note].append(a.node)
        if fleet.scheduler_checked and a.scheduler is None:
            by_note["kube-state-metrics has no allocatable for it: no scheduler check"].append(
                a.node
            )
    out = []
    for note, nodes in by_note.items():
        shown = nodes[:_NAMED]
        rest = len(nodes) - len(shown)
        who = ", ".join(shown) + (f" and {rest} more" if rest else "")
        out.append(f"{who}: {note}")
    return out


def _more_text(a: NodeAnswer) -> str:
    return f"{a.more}+" if a.capped else str(a.more)


def summary(fleet: FleetAnswer) -> str:
    """``fits on 3 of 10 nodes; 17 more in all`` or ``fits on no node of 10``."""
    total = len(fleet.nodes)
    fitting = len(fleet.fitting)
    if not fitting:
        return f"fits on no node of {total}"
    more = f"{fleet.more}+" if fleet.capped else str(fleet.more)
    return f"fits on {fitting} of {total} node{'s' if total != 1 else ''}; {more} more in all"


def render(fleet: FleetAnswer, pod: Pod, origin: str, source: str, width: int) -> str:
    """The table of the answer at ``width`` columns."""
    head = [
        f"podres fit: {origin} ({pod_text(pod)}) on {source}",
        "scheduler check: kube-state-metrics' requests against allocatable"
        if fleet.scheduler_checked
        else f"scheduler check: not made: {NO_SCHEDULER}",
    ]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, expand=False)
    for name, kw in (
        ("NODE", {"overflow": "fold"}),
        ("POLICY", {"overflow": "fold"}),
        ("FITS", {}),
        ("NUMA", {"overflow": "fold"}),
        ("MORE", {"justify": "right"}),
        ("WHY NOT", {"overflow": "fold", "ratio": 1}),
    ):
        table.add_column(name, **kw)
    for a in fleet.nodes:
        p = a.facts.state.policies
        policy = f"{p.topology.value}/{p.scope.value}" + ("" if a.facts.policies_known else "?")
        table.add_row(
            *(
                Text(printable(cell))
                for cell in (
                    a.node,
                    policy,
                    "yes" if a.fits else "no",
                    numa_text(a.decision),
                    _more_text(a),
                    why_text(a),
                )
            )
        )
    console = Console(
        file=io.StringIO(), width=width, color_system=None, force_terminal=False, highlight=False
    )
    console.print(table)
    body = console.file.getvalue()  # type: ignore[attr-defined]
    lines = [printable(line) for line in head]
    lines.append(body.rstrip("\n"))
    lines.append(summary(fleet))
    lines.extend(printable(n) for n in _notes(fleet, pod))
    return "\n".join(lines) + "\n"


def _placement_json(p: Placement) -> dict[str, Any]:
    return {
        "container": p.container,
        "init": p.init,
        "numa_nodes": None if p.affinity is None else list(p.affinity),
        "preferred": p.preferred,
    }


def _verdict_json(v: SchedulerVerdict) -> dict[str, Any]:
    return {"fits": v.fits, "short": list(v.short), "count": v.count}


def _node_json(a: NodeAnswer) -> dict[str, Any]:
    d, s, p = a.decision, a.decision.shortage, a.facts.state.policies
    return {
        "node": a.node,
        "fits": a.fits,
        "admitted": d.admitted,
        "reason": d.reason.value,
        "message": d.message,
        "container": d.container,
        "placements": [_placement_json(pl) for pl in d.placements],
        "shortage": None
        if s is None
        else {
            "resource": s.resource,
            "numa_nodes": list(s.numa_nodes),
            "policy": s.policy.value,
            "requested": s.requested,
            "available": s.available,
        },
        "scheduler": None if a.scheduler is None else _verdict_json(a.scheduler),
        "more": a.more,
        "more_capped": a.capped,
        "policies": {
            "known": a.facts.policies_known,
            "topology_manager_policy": p.topology.value,
            "topology_manager_scope": p.scope.value,
            "cpu_manager_policy": p.cpu.value,
            "full_pcpus_only": p.full_pcpus_only,
            "memory_manager_policy": p.memory.value,
        },
        "kubelet_up": a.facts.kubelet_up,
        "notes": list(a.facts.notes),
    }


def _containers_json(pod: Pod) -> list[dict[str, Any]]:
    return [
        {"name": c.name, "init": init, "requests": dict(c.requests), "limits": dict(c.limits)}
        for init, group in ((True, pod.init_containers), (False, pod.containers))
        for c in group
    ]


def to_json(
    fleet: FleetAnswer, pod: Pod, origin: str, source: str, limit: int
) -> Mapping[str, Any]:
    """``-o json`` (docs/fit.md, "JSON")."""
    nodes: Sequence[dict[str, Any]] = [_node_json(a) for a in fleet.nodes]
    return {
        "schema_version": SCHEMA_VERSION,
        "pod": {
            "origin": origin,
            "name": pod.name,
            "qos": qos(pod).value,
            "requests": pod_requests(pod),
            "containers": _containers_json(pod),
        },
        "source": source,
        "scheduler_checked": fleet.scheduler_checked,
        "scheduler_note": None if fleet.scheduler_checked else NO_SCHEDULER,
        "limit": limit,
        "fleet": {
            "nodes": len(fleet.nodes),
            "fitting": [a.node for a in fleet.fitting],
            "more": fleet.more,
            "more_capped": fleet.capped,
        },
        "nodes": nodes,
    }
