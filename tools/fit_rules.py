"""Where a pod shape fits: the recording rules and the fragmentation alert of ``fit_shapes``.

tools/rules.py fills the placeholders ``$fit_recording_rules`` (tools/mixin/recording.yaml)
and ``$fit_fragmented_expr`` (tools/mixin/alerts.yaml) from here. A **shape** is a pod that
needs, on one NUMA node, some devices of one or more resources and some exclusive CPUs
(``gpu4_cpu32=nvidia.com/gpu:4+cpu:32``). The **free block** of a NUMA node for a shape is how
many pods of it that NUMA node's free units hold, each pod wholly on it: the least, over the
shape's terms, of the free units on that NUMA node divided by the pod's need, rounded down
(free devices: ``podres_node_devices{state="free"}``; free CPUs: the free shared pool,
``podres_node_cpus{pool="shared_free"}``).

A node **admits** a shape (the approximation of the kubelet's Topology Manager that a rule can
make): under the Topology Manager policies ``restricted`` and ``single-numa-node``
(``podres_kubelet_config_info``) when one of its NUMA nodes has a free block for it; under the
others (``none``, ``best-effort``, or no configuration read) when the node's totals hold it.
A shape **is fragmented** when no node admits it although a node's totals hold it (the
scheduler, which checks totals, sends the pod there; the kubelet refuses it with
TopologyAffinityError) and one of that node's NUMA nodes could hold it when empty (its
registered devices and allocatable CPUs): the units are there, split across NUMA nodes.
docs/rules.md says what this leaves out; ``podres fit`` is the exact answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mixin_config import Shape

# The policies under which the Topology Manager refuses a pod no NUMA node (set) holds.
STRICT_POLICIES = "restricted|single-numa-node"


@dataclass(frozen=True)
class Sources:
    """Where the free and the whole units come from, grouped by ``by`` (a NUMA node's labels)."""

    by: str  # the labels of one NUMA node, e.g. "cluster, node, numa_node"
    node_by: str  # the labels of one node
    devices: Callable[[str, str], str]  # (resource, "free" | "registered") -> PromQL
    cpus: Callable[[str], str]  # "free" | "allocatable" -> PromQL


def _min_of(terms: list[str], by: str) -> str:
    """The least of ``terms`` per ``by``; 0 where some term has no series (no such device
    on that NUMA node), absent where none has."""
    if len(terms) == 1:
        return f"min by ({by}) (\n  {terms[0]}\n)"
    tagged = " or ".join(f'label_replace({t}, "term", "{i}", "", "")' for i, t in enumerate(terms))
    return (
        f"min by ({by}) (\n  {tagged}\n)\n"
        f"  and on ({by}) (count by ({by}) (\n  {tagged}\n) == {len(terms)})\n"
        f"or on ({by}) 0 * count by ({by}) (\n  {tagged}\n)"
    )


def _terms(shape: Shape, src: Sources, kind: str, by: str) -> list[str]:
    cpu_kind = "free" if kind == "free" else "allocatable"
    terms = [
        f"floor(sum by ({by}) ({src.devices(resource, kind)}) / {count})"
        for resource, count in shape.devices
    ]
    if shape.cpus:
        terms.append(f"floor(sum by ({by}) ({src.cpus(cpu_kind)}) / {shape.cpus})")
    return terms


def per_numa(shape: Shape, src: Sources, kind: str = "free") -> str:
    """Pods of ``shape`` each NUMA node holds: of its free units, or (``registered``) of
    all its units, the node empty."""
    return _min_of(_terms(shape, src, kind, src.by), src.by)


def per_node_totals(shape: Shape, src: Sources) -> str:
    """Pods of ``shape`` each node's free totals hold, NUMA nodes ignored."""
    return _min_of(_terms(shape, src, "free", src.node_by), src.node_by)


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line else line for line in text.splitlines())


def recording_rules(shapes: list[Shape], cluster: str, node: str, node_join: str, sel: str) -> str:
    """The per-shape recording rules, as YAML list items indented for the rules list (6)."""
    src = Sources(
        by=f"{cluster}, {node}, numa_node",
        node_by=f"{cluster}, {node}",
        devices=lambda resource, _kind: (
            f'node_numa_resource:podres_free_devices:sum{{resource="{resource}"}}'
        ),
        cpus=lambda _kind: "node_numa:podres_shared_free_cpus:sum",
    )
    items = []
    for shape in shapes:
        for record, expr in (
            ("node_numa:podres_shape_fitting_pods:min", per_numa(shape, src)),
            ("node:podres_shape_fitting_pods_by_totals:min", per_node_totals(shape, src)),
        ):
            items.append(
                f"- record: {record}\n  expr: |-\n{_indent(expr, 4)}\n"
                f"  labels:\n    shape: {shape.name}\n"
            )
    strict = (
        f"max by ({cluster}, {node}) (\n"
        f'    podres_kubelet_config_info{{{sel}, topology_manager_policy=~"{STRICT_POLICIES}"}}\n'
        f"      {node_join}\n  )"
    )
    generic = f"""\
- record: node_shape:podres_shape_fitting_pods:max
  expr: |-
    max by ({cluster}, {node}, shape) (node_numa:podres_shape_fitting_pods:min)

- record: node_shape:podres_shape_admittable_pods:sum
  expr: |-
    sum by ({cluster}, {node}, shape) (node_numa:podres_shape_fitting_pods:min)
      and on ({cluster}, {node}) {_indent(strict, 4).lstrip()}
    or
    sum by ({cluster}, {node}, shape) (node:podres_shape_fitting_pods_by_totals:min)
      unless on ({cluster}, {node}) {_indent(strict, 4).lstrip()}

- record: cluster_shape:podres_nodes_admitting_shape:count
  expr: sum by ({cluster}, shape) (node_shape:podres_shape_admittable_pods:sum >= bool 1)

- record: cluster_shape:podres_shape_admittable_pods:sum
  expr: sum by ({cluster}, shape) (node_shape:podres_shape_admittable_pods:sum)

- record: cluster_shape:podres_nodes_fitting_shape_by_totals:count
  expr: sum by ({cluster}, shape) (node:podres_shape_fitting_pods_by_totals:min >= bool 1)
"""
    text = "\n".join(items) + "\n" + generic
    return _indent(text, 6).lstrip()


def fragmented_expr(shapes: list[Shape], cluster: str, sel: str) -> str:
    """The alert's expression: per cluster and shape, the nodes whose totals hold the shape
    and one of whose NUMA nodes could hold it empty, where no node admits it. Per target
    (one node's exporter), so it needs no recording rule; indented for the alert (10)."""
    target = f"{cluster}, job, instance"
    src = Sources(
        by=f"{target}, numa_node",
        node_by=target,
        devices=lambda resource, kind: (
            f'podres_node_devices{{{sel}, resource="{resource}", state="free"}}'
            if kind == "free"
            else f'podres_node_registered_devices{{{sel}, resource="{resource}"}}'
        ),
        cpus=lambda kind: (
            f'podres_node_cpus{{{sel}, pool="shared_free"}}'
            if kind == "free"
            else f"podres_node_allocatable_cpus{{{sel}}}"
        ),
    )
    strict = f'podres_kubelet_config_info{{{sel}, topology_manager_policy=~"{STRICT_POLICIES}"}}'
    parts = []
    for shape in shapes:
        numa = per_numa(shape, src)
        totals = per_node_totals(shape, src)
        empty = per_numa(shape, src, "registered")
        admits = (
            f"(\n  sum by ({target}) (\n{_indent(numa, 4)}\n  ) >= 1\n)"
            f" and on ({target}) {strict}\n"
            f"or (\n{_indent(totals, 2)}\n) >= 1 unless on ({target}) {strict}"
        )
        fragmented = (
            f"(\n{_indent(totals, 2)}\n) >= 1\n"
            f"and on ({target}) (\n  max by ({target}) (\n{_indent(empty, 4)}\n  ) >= 1\n)"
        )
        parts.append(
            f"label_replace(\n  count by ({cluster}) (\n{_indent(fragmented, 4)}\n  )\n"
            f"  unless on ({cluster}) count by ({cluster}) (\n{_indent(admits, 4)}\n  ),\n"
            f'  "shape", "{shape.name}", "", ""\n)'
        )
    return _indent("\nor\n".join(parts), 10).lstrip()
