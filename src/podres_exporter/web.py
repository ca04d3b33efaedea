"""The HTTP face of both daemons: ``/metrics``, ``/healthz``, ``/readyz``, ``/`` and 404.

A daemon plugs in a :class:`Site`: the ``/metrics`` body for a format and an encoding,
a health check and a readiness check (each ``(ok, text)``: 200 or 503 with the text as
the body) and the details of its index page. One threaded server, HTTP/1.1 with
keep-alive, one thread per connection (daemon threads); no access log.

``/metrics`` negotiation: OpenMetrics when the ``Accept`` header asks for it (as
prometheus_client decides), the Prometheus text format otherwise; gzip when
``Accept-Encoding`` allows it (:func:`accepts_gzip`).
"""

from __future__ import annotations

import gzip
import html
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics import exposition as om

__all__ = [
    "Check",
    "Index",
    "MetricsBody",
    "Site",
    "WebServer",
    "accepts_gzip",
    "display_url",
    "registry_metrics",
    "render_registry",
]

log = structlog.get_logger(__name__)

_TEXT = "text/plain; charset=utf-8"
_GZIP = frozenset({"gzip", "x-gzip"})  # RFC 9110 8.4.1.3: x-gzip is gzip


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
    """What a daemon serves."""

    metrics: MetricsBody
    health: Check
    readiness: Check
    index: Index


# --------------------------------------------------------------------------- rendering


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


# ------------------------------------------------------------------------------ server


def display_url(host: str, port: int) -> str:
    """The URL a client on this host uses for a server bound to ``host``:``port``.

    The wildcard addresses are shown as the loopback address of their family
    (``0.0.0.0`` as ``127.0.0.1``, ``::`` as ``[::1]``); an IPv6 host is bracketed.
    """
    if host in ("", "0.0.0.0"):  # noqa: S104 - naming the wildcard, not binding it
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: WebServer
    protocol_version = "HTTP/1.1"

    def version_string(self) -> str:
        """The ``Server`` header: the product alone, no version of ours or Python's."""
        return "podres"

    def log_message(self, format: str, *args: Any) -> None:
        return  # access logs are noise for a scrape target

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            status, body, content_type, extra = self._answer(path)
        except Exception as err:  # noqa: BLE001 - answer 500, keep serving
            log.error("http_request_failed", path=path, error=repr(err))
            status, body, content_type, extra = (
                HTTPStatus.INTERNAL_SERVER_ERROR,
                b"internal error\n",
                _TEXT,
                {},
            )
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _answer(self, path: str) -> tuple[HTTPStatus, bytes, str, dict[str, str]]:
        site = self.server.site
        if path == "/metrics":
            _, content_type = choose_encoder(self.headers.get("Accept", ""))
            openmetrics = content_type.startswith("application/openmetrics-text")
            gz = accepts_gzip(self.headers.get("Accept-Encoding"))
            body = site.metrics(openmetrics=openmetrics, gz=gz)
            return HTTPStatus.OK, body, content_type, {"Content-Encoding": "gzip"} if gz else {}
        if path in ("/healthz", "/readyz"):
            ok, text = site.health() if path == "/healthz" else site.readiness()
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            return status, f"{text}\n".encode(), _TEXT, {}
        if path == "/":
            return HTTPStatus.OK, site.index.render(), "text/html; charset=utf-8", {}
        body = b"not found: try /metrics, /healthz, /readyz or /\n"
        return HTTPStatus.NOT_FOUND, body, _TEXT, {}


class WebServer(ThreadingHTTPServer):
    """A daemon's HTTP server on ``address`` (host, port; port 0 picks one).

    An IPv6 host (one with a colon) is served over IPv6. Bound on construction
    (OSError when it cannot be); :meth:`start` serves in a thread, :meth:`stop` ends.
    """

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], site: Site) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.site = site
        self._thread: threading.Thread | None = None
        super().__init__(address, _Handler)

    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        """The base URL clients use (see :func:`display_url`)."""
        host = self.server_address[0]
        return display_url(host if isinstance(host, str) else bytes(host).decode(), self.port)

    def start(self, name: str = "podres-http") -> None:
        """Serve in a daemon thread called ``name``."""
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.1},  # how soon stop() is noticed
            name=name,
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket; open connections end with their clients."""
        if self._thread is not None:  # shutdown() waits for a serve_forever that must run
            self.shutdown()
            self._thread.join(timeout=5)
        self.server_close()
