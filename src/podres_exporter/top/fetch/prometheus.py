"""A Prometheus server as the source of ``podres top`` (``--prometheus URL``).

``/api/v1/query`` for each metric top needs, all at one evaluation time; the busy
counter as ``rate()``. Every node Prometheus scrapes, or the one ``--node`` names.
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

    def _query(self, promql: str, at: float) -> list[tuple[dict[str, str], float]]:
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

    def _wanted(self, labels: dict[str, str]) -> bool:
        if not self.node:
            return True
        instance = labels.get("instance", "")
        return self.node in (labels.get("node"), instance, instance.rpartition(":")[0])

    def read(self) -> Reading:
        at = self._clock()
        queries = {name: name for name in METRICS if name not in (BUSY_COUNTER, CPU_SOURCE_STAMP)}
        queries[BUSY_RATIO] = f"rate({BUSY_COUNTER}[{RATE_WINDOW}])"
        results = dict(
            zip(queries, self._pool.map(partial(self._query, at=at), queries.values()), strict=True)
        )
        samples: list[Sample] = []
        seen: set[str] = set()
        for name, result in results.items():
            for labels, value in result:
                seen.add(labels.get("node") or labels.get("instance", ""))
                if self._wanted(labels) and math.isfinite(value):  # NaN, ±Inf: no figure
                    samples.append(Sample(name, labels, value))
        if not seen:
            raise fetch_error(
                f"Prometheus at {self.base} (--prometheus) has no podres metrics: "
                "does it scrape a podres exporter?",
                exit_code=1,
            )
        if not samples:
            raise fetch_error(
                f"--node {self.node!r}: no such node in Prometheus at {self.base} "
                f"(nodes: {', '.join(sorted(seen))})",
                exit_code=2,
            )
        return Reading(tuple(samples), at, self.origin)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
