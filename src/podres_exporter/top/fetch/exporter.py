"""A running exporter as the source of ``podres top`` (``--exporter URL``).

One GET of the exporter's ``/metrics``, parsed by
:func:`~podres_exporter.top.fetch.parse.parse_exposition` (only the metrics top reads).
"""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Callable, Collection
from math import isfinite

from podres_exporter.top.fetch.http import HttpSettings, open_client
from podres_exporter.top.fetch.parse import parse_exposition
from podres_exporter.top.fetch.source import fetch_error
from podres_exporter.top.rows import (
    BUSY_COUNTER,
    BUSY_RATIO,
    CPU_SOURCE_STAMP,
    METRICS,
    Reading,
    cpu_stamp,
)

# The samples an exporter's /metrics is read for; only the busy counters for a baseline.
WANTED = frozenset({*METRICS, BUSY_RATIO})
BUSY_ONLY = frozenset({BUSY_COUNTER, BUSY_RATIO, CPU_SOURCE_STAMP})
# How often top asks an exporter whether it has polled again (a GET, no parse).
POLL_CHECK_S = 0.25
_CPU_STAMP_LINE = re.compile(
    rb"^" + CPU_SOURCE_STAMP.encode() + rb'\{[^}\n]*source="cpu"[^}\n]*\}[ \t]*(\S+)', re.M
)


def metrics_url(parts: urllib.parse.SplitResult) -> str:
    """``http://host:9842`` or ``.../metrics`` (split) -> the ``/metrics`` URL."""
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


class ExporterSource:
    """A running exporter's ``/metrics`` (``--exporter URL``)."""

    def __init__(
        self,
        url: str,
        *,
        http: HttpSettings = HttpSettings(),  # noqa: B008 - frozen: one shared default is safe
        clock: Callable[[], float] = time.time,
    ) -> None:
        parts, self._client = open_client(url, "--exporter", http)
        self.url = metrics_url(parts)  # no credentials: they are the client's
        self.origin = parts.netloc
        self.description = f"exporter {self.url}"
        self._what = f"the exporter at {self.url} (--exporter)"
        self._clock = clock

    def read(self, wanted: Collection[str] = WANTED) -> Reading:
        """The samples top reads (``wanted``: these only); FetchError when there are none."""
        what = self._what
        body = self._client.get(self.url, what)
        at = self._clock()
        try:
            # NaN and ±Inf are no figure to show: such a sample is left out, as if unserved.
            samples = tuple(s for s in parse_exposition(body.decode(), wanted) if isfinite(s.value))
        except (ValueError, UnicodeDecodeError) as err:
            raise fetch_error(f"{what} served no Prometheus text: {err}", exit_code=1) from err
        if wanted is WANTED and not any(s.name.startswith("podres_") for s in samples):
            raise fetch_error(
                f"{what} serves no podres_ metrics: is it a podres exporter?", exit_code=1
            )
        return Reading(samples, at, self.origin)

    def cpu_stamp(self) -> float | None:
        """When the exporter last read CPU times, from one GET (its body is not parsed)."""
        body = self._client.get(self.url, self._what)
        m = _CPU_STAMP_LINE.search(body)
        try:
            return float(m.group(1)) if m else None
        except ValueError:
            return None

    def read_after_poll(
        self,
        first: Reading,
        wait_s: float,
        *,
        wanted: Collection[str] = WANTED,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Reading:
        """A reading of the exporter's next view (``wanted``: these samples only): taken
        once it has read CPU times since ``first`` (its next poll), or after ``wait_s``
        whatever it serves.

        The exporter's busy counters move only when it polls; two reads of one view say
        nothing about busy shares.
        """
        then = cpu_stamp(first)
        deadline = clock() + wait_s
        while then is not None and clock() < deadline:
            if self.cpu_stamp() != then:
                break
            sleep(min(POLL_CHECK_S, max(0.0, deadline - clock())))
        return self.read(wanted)

    def close(self) -> None:
        pass
