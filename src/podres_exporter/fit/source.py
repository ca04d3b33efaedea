"""Where ``podres fit`` reads the nodes: Prometheus (the fleet), one exporter, or the local
kubelet, through ``podres top``'s own sources (:mod:`podres_exporter.top.fetch`).

Prometheus is asked a fixed handful of instant queries for the whole fleet, one per
family of :data:`~podres_exporter.fit.state.FAMILIES`, side by side, at one evaluation
time (never one per node: that is what keeps a thousand nodes fast), each with the
``--selector`` matchers. A series' node is named as ``podres top`` names it
(:func:`~podres_exporter.top.fetch.prometheus.with_node`). When kube-state-metrics is
scraped by the same Prometheus, three more queries give the scheduler's view: each
node's allocatable, and the requests and count of the pods bound to it that are pending
or running (:class:`SchedulerFacts`).

An exporter is read with one GET of ``/metrics``; the local kubelet through the
exporter's own reader, in-process. Their node is the one ``podres_node_info`` names
(else the exporter's ``host:port``, or the local host name).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from podres_exporter.core.errors import ConfigError, FetchError
from podres_exporter.fit.state import FAMILIES, NODE_INFO, SampleLike
from podres_exporter.top.fetch import ExporterSource, PrometheusSource
from podres_exporter.top.fetch.prometheus import node_names, with_node
from podres_exporter.top.rows import Reading

__all__ = [
    "KSM_ALLOCATABLE",
    "SchedulerFacts",
    "Snapshot",
    "check_selector",
    "ksm_name",
    "read_prometheus",
    "read_single",
]

KSM_ALLOCATABLE = "kube_node_status_allocatable"
KSM_REQUESTS = "kube_pod_container_resource_requests"
_LIVE = 'kube_pod_status_phase{{phase=~"Pending|Running"{sel}}} == 1'
_BOUND = 'node!=""'  # a pod the scheduler has placed
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR = re.compile(rf"(?:{_MATCHER})(?:,(?:{_MATCHER}))*,?\s*")


def ksm_name(resource: str) -> str:
    """A resource name as kube-state-metrics writes it in its ``resource`` label
    (``nvidia.com/gpu`` -> ``nvidia_com_gpu``, ``hugepages-2Mi`` -> ``hugepages_2Mi``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", resource)


def check_selector(text: str) -> str:
    """``--selector``'s matchers (``cluster="a",zone=~"eu.*"``), stripped; ConfigError
    naming the flag when it is not a list of label matchers."""
    text = text.strip().removeprefix("{").removesuffix("}").strip()
    if text and not _SELECTOR.fullmatch(text):
        raise ConfigError(
            f'--selector {text!r}: expected label matchers such as cluster="a" or '
            'zone=~"eu-.*", separated by commas'
        )
    return text.rstrip(",").strip()


@dataclass(frozen=True)
class SchedulerFacts:
    """The scheduler's view from kube-state-metrics, per node name: allocatable and the
    requests of its pending and running pods per resource (kube-state-metrics' names and
    units: cores, bytes, whole units) and the count of those pods."""

    allocatable: Mapping[str, Mapping[str, float]]
    requested: Mapping[str, Mapping[str, float]]
    pods: Mapping[str, int]


@dataclass(frozen=True)
class Snapshot:
    """Every node's samples (by node name) from one read, and the scheduler's view
    (None: kube-state-metrics is not where the nodes were read)."""

    nodes: Mapping[str, Sequence[SampleLike]]
    scheduler: SchedulerFacts | None
    description: str
    at: float
    notes: tuple[str, ...] = field(default=())


def _node_of_reading(reading: Reading) -> str:
    for s in reading.samples:
        if s.name == NODE_INFO and s.labels.get("node"):
            return str(s.labels["node"])
    return reading.origin


def read_single(reading: Reading, description: str) -> Snapshot:
    """One node's snapshot from an exporter's or the local kubelet's reading; FetchError
    when it holds no podres facts."""
    wanted = frozenset(FAMILIES)
    samples = [s for s in reading.samples if s.name in wanted]
    if not any(s.name != NODE_INFO for s in samples):
        raise FetchError(
            f"{description} serves none of the podres_node_* families: is it a podres "
            "exporter that has read its kubelet?",
            exit_code=2,
        )
    return Snapshot({_node_of_reading(reading): samples}, None, description, reading.at)


def read_exporter(source: ExporterSource) -> Snapshot:
    """An exporter's ``/metrics`` as one node's snapshot."""
    return read_single(source.read(frozenset(FAMILIES)), source.description)


@dataclass(frozen=True, slots=True)
class _Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def _with(name: str, selector: str, extra: str = "") -> str:
    inner = ",".join(p for p in (extra, selector) if p)
    return f"{name}{{{inner}}}" if inner else name


def _ksm_queries(selector: str) -> dict[str, str]:
    sel = f",{selector}" if selector else ""
    live = _LIVE.format(sel=sel)
    return {
        "allocatable": _with(KSM_ALLOCATABLE, selector),
        "requested": (
            f"sum by (node, resource) ({_with(KSM_REQUESTS, selector)} "
            f"and on (namespace, pod) ({live}))"
        ),
        "pods": (
            f"count by (node) ({_with('kube_pod_info', selector, _BOUND)} "
            f"and on (namespace, pod) ({live}))"
        ),
    }


def _scheduler(results: Mapping[str, list[tuple[dict[str, str], float]]]) -> SchedulerFacts | None:
    if not results["allocatable"]:
        return None
    allocatable: dict[str, dict[str, float]] = defaultdict(dict)
    requested: dict[str, dict[str, float]] = defaultdict(dict)
    for labels, value in results["allocatable"]:
        allocatable[labels.get("node", "")][labels.get("resource", "")] = value
    for labels, value in results["requested"]:
        requested[labels.get("node", "")][labels.get("resource", "")] = value
    pods = {labels.get("node", ""): int(value) for labels, value in results["pods"]}
    return SchedulerFacts(dict(allocatable), dict(requested), pods)


def read_prometheus(
    source: PrometheusSource,
    selector: str,
    *,
    clock: Callable[[], float] = time.time,
) -> Snapshot:
    """Every node Prometheus has (those ``--node`` and ``--selector`` pick), in
    ``len(FAMILIES) + 3`` instant queries side by side; FetchError when none is there."""
    at = clock()
    queries = {name: _with(name, selector) for name in FAMILIES}
    queries.update({f"ksm:{k}": q for k, q in _ksm_queries(selector).items()})
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="podres-fit-query") as pool:
        answers = dict(
            zip(queries, pool.map(lambda q: source.query(q, at), queries.values()), strict=True)
        )
    names = node_names(answers[NODE_INFO])
    nodes: dict[str, list[SampleLike]] = defaultdict(list)
    seen: set[str] = set()
    for family in FAMILIES:
        for scraped, value in answers[family]:
            labels = with_node(scraped, names)
            node = labels.get("node") or labels.get("instance", "")
            seen.add(node)
            if source.wanted(labels):
                nodes[node].append(_Sample(family, labels, value))
    where = f"Prometheus at {source.base} (--prometheus)"
    if not seen:
        what = f" matching --selector {selector!r}" if selector else ""
        raise FetchError(
            f"{where} has no podres metrics{what}: does it scrape a podres exporter?",
            exit_code=2,
        )
    if not nodes:
        raise FetchError(
            f"--node {source.node!r}: no such node in {where} (nodes: {', '.join(sorted(seen))})",
            exit_code=2,
        )
    ksm = {k.removeprefix("ksm:"): v for k, v in answers.items() if k.startswith("ksm:")}
    return Snapshot(dict(nodes), _scheduler(ksm), source.description, at)
