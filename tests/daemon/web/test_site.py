"""The web shell over a real socket: routes, negotiation, addresses, the displayed URL."""

from __future__ import annotations

import dataclasses
import gzip
import http.client
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from http import HTTPStatus

import pytest
from prometheus_client import CollectorRegistry, Counter

from podres_exporter.daemon.values import parse_listen_address
from podres_exporter.daemon.web import (
    Index,
    Site,
    WebServer,
    accepts_gzip,
    display_url,
    registry_metrics,
)
from podres_exporter.daemon.web.http import Response, head_bytes

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


@dataclass
class FakeDaemon:
    """A Site whose answers the test sets, recording how /metrics was asked for."""

    healthy: bool = True
    ready: tuple[bool, str] = (False, "not ready: warming up")
    fail: bool = False
    asked: list[tuple[bool, bool]] = field(default_factory=list)

    def metrics(self, *, openmetrics: bool, gz: bool) -> bytes:
        if self.fail:
            raise RuntimeError("rendering failed")
        self.asked.append((openmetrics, gz))
        body = b"# EOF\n" if openmetrics else b"up 1\n"
        return gzip.compress(body) if gz else body

    def site(self) -> Site:
        return Site(
            metrics=self.metrics,
            health=lambda: (self.healthy, "ok" if self.healthy else "stalled"),
            readiness=lambda: self.ready,
            index=Index(
                title="demo daemon",
                version="1.2.3",
                summary="A daemon for the tests.",
                healthz="alive",
                readyz="warmed up",
                facts=(("socket", "/run/<x>.sock"),),
            ),
        )


Serve = Callable[..., tuple[WebServer, FakeDaemon]]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start a WebServer for a FakeDaemon on a listen address; stopped at teardown."""
    servers: list[WebServer] = []

    def start(listen: str = "127.0.0.1:0") -> tuple[WebServer, FakeDaemon]:
        daemon = FakeDaemon()
        server = WebServer(parse_listen_address(listen), daemon.site())
        server.start("test-http")
        servers.append(server)
        return server, daemon

    yield start
    for s in servers:
        s.stop()


def request(
    url: str, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection; status, headers, raw body."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


# ------------------------------------------------------------------------------ routes


def test_metrics_text_by_default_openmetrics_on_request(serve: Serve) -> None:
    """/metrics: the text format unless Accept asks for OpenMetrics; no gzip unasked."""
    server, daemon = serve()
    status, headers, body = request(server.url, "/metrics")
    assert (status, body) == (200, b"up 1\n")
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "Content-Encoding" not in headers
    assert headers["Content-Length"] == str(len(body))
    status, headers, body = request(server.url, "/metrics", {"Accept": OPENMETRICS})
    assert (status, body) == (200, b"# EOF\n")
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert daemon.asked == [(False, False), (True, False)]


def test_metrics_gzip_when_accepted_and_not_when_refused(serve: Serve) -> None:
    """Accept-Encoding gzip: a gzip body and header; gzip;q=0: identity."""
    server, daemon = serve()
    status, headers, body = request(server.url, "/metrics", {"Accept-Encoding": "deflate, GZIP"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(body) == b"up 1\n"
    status, headers, body = request(server.url, "/metrics", {"Accept-Encoding": "gzip;q=0"})
    assert (status, body) == (200, b"up 1\n") and "Content-Encoding" not in headers
    assert daemon.asked == [(False, True), (False, False)]


def test_negotiation_is_per_request_whether_remembered_or_not(serve: Serve) -> None:
    """Requests alternating between formats and encodings on one connection, with short
    headers (their negotiation remembered) and long ones (not), each get theirs."""
    server, daemon = serve()
    padding = ", ".join(f"text/x-{i};q=0.1" for i in range(120))  # some 2 KB
    asks = [
        ({"Accept": OPENMETRICS, "Accept-Encoding": "gzip"}, (True, True)),
        ({"Accept": "text/plain"}, (False, False)),
        ({"Accept": f"{OPENMETRICS}, {padding}"}, (True, False)),
        ({"Accept": OPENMETRICS, "Accept-Encoding": "gzip"}, (True, True)),
        (
            {"Accept": f"text/plain, {padding}", "Accept-Encoding": f"gzip, {padding}"},
            (False, True),
        ),
        ({"Accept": "text/plain"}, (False, False)),
    ]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        for headers, (openmetrics, gz) in asks:
            conn.request("GET", "/metrics", headers=headers)
            response = conn.getresponse()
            body = response.read()
            assert (response.getheader("Content-Encoding") == "gzip") is gz
            assert (gzip.decompress(body) if gz else body) == (
                b"# EOF\n" if openmetrics else b"up 1\n"
            )
    finally:
        conn.close()
    assert daemon.asked == [ask for _, ask in asks]


def test_health_and_readiness_answer_with_their_text(serve: Serve) -> None:
    """/healthz and /readyz: 200 or 503, the check's line as the body."""
    server, daemon = serve()
    assert request(server.url, "/healthz")[::2] == (200, b"ok\n")
    assert request(server.url, "/readyz")[::2] == (503, b"not ready: warming up\n")
    daemon.healthy, daemon.ready = False, (True, "ready")
    assert request(server.url, "/healthz")[::2] == (503, b"stalled\n")
    assert request(server.url, "/readyz")[::2] == (200, b"ready\n")


def test_index_page_lists_the_endpoints_and_facts(serve: Serve) -> None:
    """/ is an HTML page naming the daemon, its endpoints and its facts (escaped)."""
    server, _ = serve()
    status, headers, body = request(server.url, "/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    page = body.decode()
    assert "<h1>demo daemon 1.2.3</h1>" in page
    for path, meaning in (("/metrics", "Prometheus metrics"), ("/healthz", "alive")):
        assert f'<a href="{path}">{path}</a>: {meaning}' in page
    assert '<a href="/readyz">/readyz</a>: warmed up' in page
    assert "<p>socket: <code>/run/&lt;x&gt;.sock</code></p>" in page


def test_unknown_path_is_404_and_query_strings_are_ignored(serve: Serve) -> None:
    """Any other path is 404; a query string does not change the route."""
    server, _ = serve()
    status, _, body = request(server.url, "/nope")
    assert status == 404 and b"/metrics" in body
    assert request(server.url, "/metrics?name[]=up")[::2] == (200, b"up 1\n")
    assert request(server.url, "/healthz?verbose=1")[0] == 200


def test_head_sends_the_headers_of_get_without_a_body(serve: Serve) -> None:
    """HEAD: GET's status and Content-Length, no body."""
    server, _ = serve()
    status, headers, body = request(server.url, "/metrics", method="HEAD")
    assert (status, body) == (200, b"")
    assert headers["Content-Length"] == str(len(b"up 1\n"))
    assert request(server.url, "/nope", method="HEAD")[::2] == (404, b"")


def test_server_header_names_no_version(serve: Serve) -> None:
    """Server names the product only: no version of ours, of Python or of the library,
    on any answer (an unauthenticated client learns nothing to target)."""
    server, _ = serve()
    for path in ("/", "/metrics", "/healthz", "/readyz", "/nope"):
        assert request(server.url, path)[1]["Server"] == "podres"


def test_an_answers_head_is_its_status_headers_length_and_date_byte_for_byte() -> None:
    """Status line, Server, Date, Content-Type, Content-Length, the response's own
    headers, the web config's, Connection, in that order; a character Latin-1 lacks is
    a ``?``. Answers that differ in length, connection and extra headers share none of
    them by mistake."""
    response = Response(
        HTTPStatus.UNAUTHORIZED,
        (b"ab", b"cde"),
        "text/plain; charset=utf-8",
        (("WWW-Authenticate", 'Basic realm="podres"'), ("X-Note", "caf\u00e9 \u2192")),
    )
    head = head_bytes(response, connection="close", extra=b"X-Frame-Options: deny\r\n")
    found = re.search(rb"\r\nDate: ([^\r]*)\r\n", head)
    assert found is not None
    date = found.group(1)
    assert abs(parsedate_to_datetime(date.decode()).timestamp() - time.time()) < 5
    assert head == (
        b"HTTP/1.1 401 Unauthorized\r\nServer: podres\r\nDate: " + date + b"\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n"
        b'WWW-Authenticate: Basic realm="podres"\r\nX-Note: caf\xe9 ?\r\n'
        b"X-Frame-Options: deny\r\nConnection: close\r\n\r\n"
    )
    longer = dataclasses.replace(response, status=HTTPStatus.OK, body=b"x" * 12345)
    other = head_bytes(longer, connection=None, extra=b"")
    assert other.startswith(b"HTTP/1.1 200 OK\r\nServer: podres\r\nDate: ")
    assert other.endswith(
        b"Content-Length: 12345\r\n"
        b'WWW-Authenticate: Basic realm="podres"\r\nX-Note: caf\xe9 ?\r\n\r\n'
    )


def test_keep_alive_serves_several_requests_on_one_connection(serve: Serve) -> None:
    """HTTP/1.1: the connection stays open between requests."""
    server, _ = serve()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        for path in ("/metrics", "/healthz", "/nope"):
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            assert resp.version == 11 and not resp.will_close
    finally:
        conn.close()


def test_a_ready_body_is_served_from_the_loop_and_none_falls_back_to_the_worker() -> None:
    """With ``metrics_ready``, /metrics is answered on the event loop when it has a body
    (the worker's ``metrics`` is not called); when it has none, by ``metrics`` in a
    worker thread; in the format and encoding asked for either way."""
    daemon = FakeDaemon()
    ready: list[tuple[bool, bool, str]] = []
    have = [True]

    def metrics_ready(*, openmetrics: bool, gz: bool) -> bytes | None:
        ready.append((openmetrics, gz, threading.current_thread().name))
        if not have[0]:
            return None
        body = b"# from the loop\n# EOF\n" if openmetrics else b"from_loop 1\n"
        return gzip.compress(body) if gz else body

    site = dataclasses.replace(daemon.site(), metrics_ready=metrics_ready)
    server = WebServer(parse_listen_address("127.0.0.1:0"), site)
    server.start("test-http")
    try:
        status, headers, body = request(server.url, "/metrics")
        assert (status, body) == (200, b"from_loop 1\n")
        status, headers, body = request(
            server.url, "/metrics", {"Accept": OPENMETRICS, "Accept-Encoding": "gzip"}
        )
        assert headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(body) == b"# from the loop\n# EOF\n"
        assert daemon.asked == []
        assert [(o, g) for o, g, _ in ready] == [(False, False), (True, True)]
        assert all(name == "test-http" for _, _, name in ready), ready  # the loop's thread
        have[0] = False
        status, _, body = request(server.url, "/metrics")
        assert (status, body) == (200, b"up 1\n")
        assert daemon.asked == [(False, False)]
    finally:
        server.stop()


def test_a_failing_metrics_body_is_500_and_the_server_keeps_serving(serve: Serve) -> None:
    """An exception while rendering answers 500; the next scrape is served."""
    server, daemon = serve()
    daemon.fail = True
    assert request(server.url, "/metrics")[::2] == (500, b"internal error\n")
    daemon.fail = False
    assert request(server.url, "/metrics")[::2] == (200, b"up 1\n")


def test_stop_closes_the_socket_and_needs_no_start() -> None:
    """stop() ends serving and frees the port; a server never started stops at once."""
    server = WebServer(("127.0.0.1", 0), FakeDaemon().site())
    server.stop()
    started = WebServer(("127.0.0.1", 0), FakeDaemon().site())
    port = started.port
    started.start()
    assert request(started.url, "/healthz")[0] == 200
    started.stop()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 2):
        pass


# ---------------------------------------------------------------------- addresses, URL


def test_ipv4_loopback(serve: Serve) -> None:
    """127.0.0.1:0 binds an IPv4 port and shows it."""
    server, _ = serve("127.0.0.1:0")
    assert server.address_family == socket.AF_INET
    assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}"
    assert request(server.url, "/healthz")[0] == 200


@pytest.mark.skipif(not has_ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_ipv6_loopback(serve: Serve) -> None:
    """[::1]:0 binds an IPv6 port; the URL brackets the host."""
    server, _ = serve("[::1]:0")
    assert server.address_family == socket.AF_INET6
    assert server.url == f"http://[::1]:{server.port}"
    assert request(server.url, "/healthz")[0] == 200


def test_every_interface_is_shown_as_the_loopback(serve: Serve) -> None:
    """:0 binds every IPv4 interface; the URL shown is the reachable 127.0.0.1."""
    server, _ = serve(":0")
    assert server.server_address[0] == "0.0.0.0"
    assert server.url == f"http://127.0.0.1:{server.port}"
    assert request(server.url, "/healthz")[0] == 200


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:9842"),
        ("", "http://127.0.0.1:9842"),
        ("::", "http://[::1]:9842"),
        ("127.0.0.1", "http://127.0.0.1:9842"),
        ("10.1.2.3", "http://10.1.2.3:9842"),
        ("::1", "http://[::1]:9842"),
        ("fd00::5", "http://[fd00::5]:9842"),
        ("node-a", "http://node-a:9842"),
    ],
)
def test_display_url(host: str, url: str) -> None:
    """Wildcards become the loopback of their family; IPv6 hosts are bracketed."""
    assert display_url(host, 9842) == url


# ----------------------------------------------------------------------- negotiation


@pytest.mark.parametrize(
    ("header", "gz"),
    [
        (None, False),
        ("", False),
        ("gzip", True),
        ("GZIP", True),
        (" gzip ; q=1.0 ", True),
        ("gzip;q=0", False),
        ("gzip; Q=0.000", False),
        ("identity, gzip;q=0.5", True),
        ("deflate, br", False),
        ("identity", False),
        ("*", True),
        ("*;q=0", False),
        ("*;q=0, gzip", True),
        ("gzip;q=0, *", False),
        ("x-gzip", True),
        ("x-gzip;q=0", False),
        ("gzipped", False),
        ("br, not-gzip", False),
        ("gzip;q=abc", False),
        ("gzip;q=2", False),
        ("gzip;q=0, gzip;q=0.3", True),
        (",, gzip,", True),
    ],
)
def test_accepts_gzip_parses_tokens(header: str | None, gz: bool) -> None:
    """Codings are tokens with weights; q=0 refuses; * stands for any unnamed coding."""
    assert accepts_gzip(header) is gz


def test_registry_metrics_renders_both_formats_and_gzip() -> None:
    """A registry's body: text, OpenMetrics with # EOF, and gzip of the same."""
    registry = CollectorRegistry(auto_describe=False)
    Counter("demo_events", "Events.", registry=registry).inc(3)
    body = registry_metrics(registry)
    text = body(openmetrics=False, gz=False).decode()
    assert "demo_events_total 3.0" in text and "# EOF" not in text
    om = body(openmetrics=True, gz=False).decode()
    assert "demo_events_total 3.0" in om and om.endswith("# EOF\n")
    assert gzip.decompress(body(openmetrics=True, gz=True)).decode() == om
