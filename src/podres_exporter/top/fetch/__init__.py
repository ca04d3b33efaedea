"""The three sources of ``podres top``; each read ends as a :class:`~..rows.Reading`.

- :class:`LocalSource` (the default, :mod:`.local`): the local kubelet socket and the
  local telemetry, read through the exporter's own reader in-process.
- :class:`ExporterSource` (``--exporter URL``, :mod:`.exporter`): one GET of the
  exporter's ``/metrics``, parsed by :func:`parse_exposition` (:mod:`.parse`).
- :class:`PrometheusSource` (``--prometheus URL``, :mod:`.prometheus`): one query per
  metric at one evaluation time.

What a source is and how its errors read: :mod:`.source`; the HTTP GET the two network
sources share: :mod:`.http`.
"""

from podres_exporter.top.fetch.exporter import (
    BUSY_ONLY,
    POLL_CHECK_S,
    WANTED,
    ExporterSource,
    metrics_url,
)
from podres_exporter.top.fetch.http import (
    HTTP_TIMEOUT_S,
    MAX_ANSWER_BYTES,
    HttpSettings,
    read_password,
    shown_url,
)
from podres_exporter.top.fetch.local import UNSHOWN_COLLECTORS, LocalSource, check_socket
from podres_exporter.top.fetch.parse import parse_exposition, samples_from_families
from podres_exporter.top.fetch.prometheus import RATE_WINDOW, PrometheusSource
from podres_exporter.top.fetch.source import Source

__all__ = [
    "BUSY_ONLY",
    "HTTP_TIMEOUT_S",
    "MAX_ANSWER_BYTES",
    "POLL_CHECK_S",
    "RATE_WINDOW",
    "UNSHOWN_COLLECTORS",
    "WANTED",
    "ExporterSource",
    "HttpSettings",
    "LocalSource",
    "PrometheusSource",
    "Source",
    "check_socket",
    "metrics_url",
    "parse_exposition",
    "read_password",
    "samples_from_families",
    "shown_url",
]
