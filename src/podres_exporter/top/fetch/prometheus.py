"""A Prometheus server as the source of ``podres top`` (``--prometheus URL``).

``/api/v1/query`` for each metric top needs, all at one evaluation time; the busy
counter as ``rate()``. Every node Prometheus scrapes, or the one ``--node`` names.

The node of a series is its ``node`` label where the scrape adds one (our ServiceMonitor, a
pod job that keeps the pod's node name); else the node the exporter names itself on
``podres_node_info{node}``, joined on the target (``job``, ``instance``), as the recording
rules join; else its ``instance``. A scrape with ``honor_labels`` false renames the holders'
``namespace`` and ``pod`` labels to ``exported_*``: refused, with what to change.
"""

from __future__ import annotations

import json
import math
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from podres_exporter.top.fetch.http import HttpSettings, open_client
from podres_exporter.top.fetch.source import fetch_error
from podres_exporter.top.rows import (
    BUSY_COUNTER,
    BUSY_RATIO,
    CPU_SOURCE_STAMP,
    METRICS,
    Reading,
    Sample,
)

# scrapes fit in it at scrape intervals up to a minute.
RATE_WINDOW = "2m"
# The exporter's own name for its node (one series per target).
NODE_INFO = "podres_node_info"
RENAMED = "exported_namespace"


def vector(data: dict[str, Any]) -> list[tuple[dict[str, str], float]]:
    """The label sets and values of an instant query's answer (``data.result``: a list of
    ``{"metric": {...}, "value": [time, "text"]}``); TypeError, ValueError, KeyError or
    IndexError when it has another shape."""
    found = data.get("data", {})
    result = found.get("result", []) if isinstance(found, dict) else None
    if not isinstance(result, list):
        raise TypeError("data.result is not a list")
    out: list[tuple[dict[str, str], float]] = []
    for item in result:
        metric, value = item.get("metric", {}), item["value"][1]
        if not isinstance(metric, dict) or not all(isinstance(v, str) for v in metric.values()):
            raise TypeError("a result's metric is no set of labels")
        if not isinstance(value, str):
            raise TypeError(f"a result's value is {type(value).__name__}, not a string")
        labels = {k: v for k, v in metric.items() if k != "__name__"}
        out.append((labels, float(value)))
    return out


def node_names(
    info: list[tuple[dict[str, str], float]],
) -> dict[tuple[str, str], str]:
    """Each target's (``job``, ``instance``) node from ``podres_node_info``; targets that
    name the same node (two exporters on one host, one exporter in two jobs) are left out,
    and keep their instances apart."""
    by_target = {
        (labels.get("job", ""), labels.get("instance", "")): labels.get("node", "")
        for labels, _ in info
    }
    counts: dict[str, int] = {}
    for node in by_target.values():
        counts[node] = counts.get(node, 0) + 1
    return {target: node for target, node in by_target.items() if node and counts[node] == 1}


def with_node(labels: dict[str, str], names: dict[tuple[str, str], str]) -> dict[str, str]:
    """``labels`` with the node its target names itself, where the scrape added none."""
    if RENAMED in labels:
        raise fetch_error(
            f"--prometheus: the series carry {RENAMED}: the scrape job renamed the "
            "exporter's namespace and pod labels (honor_labels: false), so the holders cannot "
            "be told; set honor_labels: true on the job (docs/deploy.md)",
            exit_code=2,
        )
    if labels.get("node"):
        return labels
    named = names.get((labels.get("job", ""), labels.get("instance", "")))
    return {**labels, "node": named} if named else labels


class PrometheusSource:
    """Every node a Prometheus server scrapes (``--prometheus URL [--node NAME]``).

    Nodes are told apart by the ``node`` label when the scrape config adds one, else by
    ``instance``; ``node`` filters on either (an ``instance`` also matches by its host).
    """

    def __init__(
        self,
        url: str,
        *,
        node: str = "",
        http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen: one shared default is safe
        clock: Callable[[], float] = time.time,
    ) -> None:
        parts, self._client = open_client(url, "--prometheus", http)
        path = parts.path.rstrip("/")
        for suffix in ("/api/v1/query", "/graph"):
            path = path.removesuffix(suffix)
        self.base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        self.node = node
        self.origin = parts.netloc
        self.description = f"prometheus {self.base}" + (f" node {node}" if node else "")
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="podres-top-query")

    def query(self, promql: str, at: float) -> list[tuple[dict[str, str], float]]:
        """One instant query at ``at`` (Unix seconds): each series' labels and value;
        FetchError (exit status 1) when Prometheus rejects it or answers another shape."""
        q = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        what = f"Prometheus at {self.base} (--prometheus)"
        body = self._client.get(f"{self.base}/api/v1/query?{q}", what)
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as err:  # RecursionError: nested too deep
            raise fetch_error(f"{what} answered no JSON to {promql!r}", exit_code=1) from err
        if not isinstance(data, dict):
            raise fetch_error(f"{what} answered no query result to {promql!r}", exit_code=1)
        if data.get("status") != "success":
            error = str(data.get("error"))[:300]  # as much of an HTTP error's body
            raise fetch_error(f"{what} rejected {promql!r}: {error}", exit_code=1)
        try:
            return vector(data)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as err:
            raise fetch_error(
                f"{what} answered {promql!r} with a result of another shape: {str(err)[:200]}",
                exit_code=1,
            ) from None

    def wanted(self, labels: dict[str, str]) -> bool:
        """Whether a series (its labels, node named) is of the node ``--node`` picks."""
        if not self.node:
            return True
        instance = labels.get("instance", "")
        return self.node in (labels.get("node"), instance, instance.rpartition(":")[0])

    def read(self) -> Reading:
        at = self._clock()
        queries = {name: name for name in METRICS if name not in (BUSY_COUNTER, CPU_SOURCE_STAMP)}
        queries[BUSY_RATIO] = f"rate({BUSY_COUNTER}[{RATE_WINDOW}])"
        queries[NODE_INFO] = NODE_INFO
        results = dict(
            zip(queries, self._pool.map(partial(self.query, at=at), queries.values()), strict=True)
        )
        names = node_names(results.pop(NODE_INFO))
        samples: list[Sample] = []
        seen: set[str] = set()
        unnamed = False
        for name, result in results.items():
            for scraped, value in result:
                labels = with_node(scraped, names)
                unnamed = unnamed or not labels.get("node")
                seen.add(labels.get("node") or labels.get("instance", ""))
                if self.wanted(labels) and math.isfinite(value):  # NaN, ±Inf: no figure
                    samples.append(Sample(name, labels, value))
        if not seen:
            raise fetch_error(
                f"Prometheus at {self.base} (--prometheus) has no podres metrics: "
                "does it scrape a podres exporter?",
                exit_code=1,
            )
        if not samples:
            why = (
                "series have no node label and no podres_node_info names their node: add a "
                "target label node with the node's name to the scrape (docs/deploy.md), or run "
                "an exporter that serves podres_node_info; "
                if unnamed
                else ""
            )
            raise fetch_error(
                f"--node {self.node!r}: no such node in Prometheus at {self.base} "
                f"({why}nodes: {', '.join(sorted(seen))})",
                exit_code=2,
            )
        return Reading(tuple(samples), at, self.origin)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
