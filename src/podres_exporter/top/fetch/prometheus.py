"""A Prometheus server as the source of ``podres top`` (``--prometheus URL``).

``/api/v1/query`` for each metric top needs, all at one evaluation time; the busy
counter as ``rate()``. Every node Prometheus scrapes, or the one ``--node`` names.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from podres_exporter.top.fetch.http import HTTP_TIMEOUT_S, http_get, http_url
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
        timeout_s: float = HTTP_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        parts = http_url(url, "--prometheus")
        path = parts.path.rstrip("/")
        for suffix in ("/api/v1/query", "/graph"):
            path = path.removesuffix(suffix)
        self.base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        self.node = node
        self.origin = parts.netloc
        self.description = f"prometheus {self.base}" + (f" node {node}" if node else "")
        self._timeout = timeout_s
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="podres-top-query")

    def _query(self, promql: str, at: float) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        what = f"Prometheus at {self.base} (--prometheus)"
        body = http_get(f"{self.base}/api/v1/query?{q}", what, self._timeout)
        try:
            data = json.loads(body)
        except ValueError as err:
            raise fetch_error(f"{what} answered no JSON to {promql!r}", exit_code=1) from err
        if data.get("status") != "success":
            error = str(data.get("error"))[:300]  # as much of an HTTP error's body
            raise fetch_error(f"{what} rejected {promql!r}: {error}", exit_code=1)
        result = data.get("data", {}).get("result", [])
        return result if isinstance(result, list) else []

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
            for item in result:
                labels = {k: str(v) for k, v in item.get("metric", {}).items() if k != "__name__"}
                seen.add(labels.get("node") or labels.get("instance", ""))
                if self._wanted(labels):
                    samples.append(Sample(name, labels, float(item["value"][1])))
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
