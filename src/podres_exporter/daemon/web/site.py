"""What a daemon serves, and who may see it: ``/metrics``, ``/healthz``, ``/readyz``,
``/`` and 404, the format negotiation, and the basic-auth decision.

A daemon plugs in a :class:`Site`: the ``/metrics`` body for a format and an encoding,
a health check and a readiness check (each ``(ok, text)``: 200 or 503 with the text as
the body) and the details of its index page. No access log.

``/metrics`` negotiation: OpenMetrics when the ``Accept`` header asks for it (as
prometheus_client decides), the Prometheus text format otherwise; gzip when
``Accept-Encoding`` allows it (:func:`accepts_gzip`).
"""

from __future__ import annotations

import gzip
import html
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Protocol

import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics import exposition as om

from podres_exporter.daemon.web.config import WebConfig
from podres_exporter.daemon.web.http import Body, Request, Response, text

__all__ = [
    "INTERNAL_ERROR",
    "PROBES",
    "Check",
    "Index",
    "MetricsBody",
    "PasswordCheck",
    "Site",
    "accepts_gzip",
    "denial",
    "ready",
    "registry_metrics",
    "render_registry",
    "route",
]

log = structlog.get_logger(__name__)

PROBES = frozenset({"/healthz", "/readyz"})
"""The kubelet's probes: open to all, answered from their own pool."""

_GZIP = frozenset({"gzip", "x-gzip"})  # RFC 9110 8.4.1.3: x-gzip is gzip
INTERNAL_ERROR = Response(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n")
"""The answer to a request whose answer failed: nothing of the failure is told."""


class MetricsBody(Protocol):
    """The ``/metrics`` body in the Prometheus text format or OpenMetrics, gzipped or not."""

    def __call__(self, *, openmetrics: bool, gz: bool) -> bytes: ...


Check = Callable[[], tuple[bool, str]]
"""A health or readiness check: whether it passes, and the line to answer with."""


@dataclass(frozen=True, slots=True)
class Index:
    """The index page: the daemon, what its checks mean, and a few facts about it."""

    title: str
    version: str
    summary: str
    healthz: str
    readyz: str
    facts: tuple[tuple[str, str], ...] = ()

    def render(self) -> bytes:
        e = html.escape
        facts = "".join(f"<p>{e(k)}: <code>{e(v)}</code></p>\n" for k, v in self.facts)
        return (
            "<!doctype html>\n"
            f"<html><head><title>{e(self.title)}</title></head>\n"
            f"<body><h1>{e(self.title)} {e(self.version)}</h1>\n"
            f"<p>{e(self.summary)}</p>\n"
            "<ul>\n"
            '<li><a href="/metrics">/metrics</a>: Prometheus metrics</li>\n'
            f'<li><a href="/healthz">/healthz</a>: {e(self.healthz)}</li>\n'
            f'<li><a href="/readyz">/readyz</a>: {e(self.readyz)}</li>\n'
            "</ul>\n"
            f"{facts}"
            "</body></html>\n"
        ).encode()


@dataclass(frozen=True, slots=True)
class Site:
    """What a daemon serves.

    ``metrics_ready``, when given, answers ``/metrics`` on the event loop itself when it
    can do so at once (a cached body, as bytes or pieces: no rendering, no waiting on a
    lock) and None otherwise, when ``metrics`` answers it from a worker."""

    metrics: MetricsBody
    health: Check
    readiness: Check
    index: Index
    metrics_ready: Callable[..., Body | None] | None = None


def render_registry(registry: CollectorRegistry, *, openmetrics: bool) -> bytes:
    """``registry``'s exposition: OpenMetrics (ending in ``# EOF``) or the text format."""
    if openmetrics:
        body: bytes = om.generate_latest(registry)  # type: ignore[no-untyped-call]
        return body
    return generate_latest(registry)


def registry_metrics(registry: CollectorRegistry) -> MetricsBody:
    """A :class:`MetricsBody` rendering ``registry`` at every scrape."""

    def body(*, openmetrics: bool, gz: bool) -> bytes:
        plain = render_registry(registry, openmetrics=openmetrics)
        return gzip.compress(plain, compresslevel=6, mtime=0) if gz else plain

    return body


# ------------------------------------------------------------------------- negotiation


def _qvalue(params: list[str]) -> float | None:
    """The ``q`` weight among an element's parameters (1 when absent); None if malformed."""
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return None
            return q if 0.0 <= q <= 1.0 else None
    return 1.0


def accepts_gzip(header: str | None) -> bool:
    """Whether an ``Accept-Encoding`` header lets the response be gzipped (RFC 9110 12.5.3).

    The header is a comma-separated list of codings, each with an optional weight
    (``gzip;q=0.5``); codings are case-insensitive and ``x-gzip`` counts as ``gzip``.
    A weight of 0 means "not acceptable". ``gzip`` named explicitly decides (its
    highest weight); otherwise ``*`` does; otherwise, and for an absent or empty
    header, gzip is not acceptable. Elements with a malformed weight are ignored.
    Whenever gzip is acceptable it is used, whatever weight identity has.
    """
    named: list[float] = []
    wildcard: list[float] = []
    for element in (header or "").split(","):
        coding, *params = element.split(";")
        coding = coding.strip().lower()
        q = _qvalue(params)
        if q is None:
            continue
        if coding in _GZIP:
            named.append(q)
        elif coding == "*":
            wildcard.append(q)
    weights = named or wildcard
    return bool(weights) and max(weights) > 0


def _metrics(request: Request, body: Callable[..., Body | None]) -> Response | None:
    """``/metrics`` in the format and encoding ``request`` asks for, by ``body``; None
    when ``body`` has none (``metrics_ready`` with nothing cached)."""
    _, content_type = choose_encoder(request.headers.get("accept", ""))
    openmetrics = content_type.startswith("application/openmetrics-text")
    gz = accepts_gzip(request.headers.get("accept-encoding"))
    data = body(openmetrics=openmetrics, gz=gz)
    if data is None:
        return None
    encoding = (("Content-Encoding", "gzip"),) if gz else ()
    return Response(HTTPStatus.OK, data, content_type, encoding)


# ------------------------------------------------------------------------------ routes


def ready(site: Site, request: Request) -> Response | None:
    """``/metrics`` from ``metrics_ready``, on the loop; None for another path, or when
    it has no body at once. One that raises is answered 500."""
    if request.path != "/metrics" or site.metrics_ready is None:
        return None
    try:
        return _metrics(request, site.metrics_ready)
    except Exception as err:  # noqa: BLE001 - answer 500, keep serving
        log.error("http_request_failed", path=request.path, error=repr(err))
        return INTERNAL_ERROR


def route(site: Site, request: Request) -> Response:
    """The site's response to ``request``; runs in a pool thread. One that raises is
    answered 500."""
    try:
        return _route(site, request)
    except Exception as err:  # noqa: BLE001 - answer 500, keep serving
        log.error("http_request_failed", path=request.path, error=repr(err))
        return INTERNAL_ERROR


def _route(site: Site, request: Request) -> Response:
    path = request.path
    if path == "/metrics":
        response = _metrics(request, site.metrics)
        assert response is not None  # MetricsBody always answers
        return response
    if path in PROBES:
        ok, line = site.health() if path == "/healthz" else site.readiness()
        return text(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, line)
    if path == "/":
        return Response(HTTPStatus.OK, site.index.render(), "text/html; charset=utf-8")
    return text(HTTPStatus.NOT_FOUND, "not found: try /metrics, /healthz, /readyz or /")


# ------------------------------------------------------------------------------ access

PasswordCheck = Callable[[WebConfig, str | None], Awaitable[bool | None]]
"""A bcrypt check of an Authorization header off the loop: whether it passes; None
when too many checks wait already."""


async def denial(
    config: WebConfig | None, request: Request, check: PasswordCheck
) -> Response | None:
    """None when ``request`` may be served under ``config``, else the answer.

    The probes are open; a login checked lately passes on the loop, waiting for
    nothing; a header that is not well-formed Basic credentials is 401 at once; the
    rest wait for ``check`` (a bcrypt check), or are ``503`` with ``Retry-After`` at
    once when it says too many wait already: not ``401``, which would tell a right
    password that it is wrong."""
    if config is None or not config.auth_required or request.path in PROBES:
        return None
    authorization = request.headers.get("authorization")
    if config.cached(authorization):
        return None
    if config.well_formed(authorization):
        ok = await check(config, authorization)
        if ok is None:
            retry = ("Retry-After", "1")
            return text(
                HTTPStatus.SERVICE_UNAVAILABLE, "too many logins being checked: retry", retry
            )
        if ok:
            return None
    challenge = ("WWW-Authenticate", 'Basic realm="podres"')
    return text(HTTPStatus.UNAUTHORIZED, "unauthorized", challenge)
