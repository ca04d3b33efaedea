"""TLS from the web-config provider, over real sockets, with certificates made in the
test (tests/daemon/web/tlsutil.py: no openssl run)."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
import structlog

from podres_exporter.daemon.web import Index, Limits, Site, WebServer
from podres_exporter.daemon.web.config import WebConfig, WebConfigProvider, load_web_config
from podres_exporter.daemon.web.config.tls import _CIPHERS
from tests.daemon.web import spies
from tests.daemon.web.spies import record_bcrypt
from tests.daemon.web.tlsutil import Issued, handshake, issue, make_ca
from tests.daemon.web.tlsutil import client_context as trusting

SITE = Site(
    metrics=lambda *, openmetrics, gz: b"up 1\n",
    health=lambda: (True, "ok"),
    readiness=lambda: (True, "ready"),
    index=Index("t", "0", "s", "h", "r"),
)


@dataclass(frozen=True)
class Pki:
    """A test CA, two server certificates for 127.0.0.1 it signed, and a client's."""

    ca: Issued
    server_a: Issued
    server_b: Issued
    client: Issued
    directory: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    ca = make_ca()
    return Pki(
        ca=ca,
        server_a=issue(ca, "server-a"),
        server_b=issue(ca, "server-b"),
        client=issue(ca, "scraper", dns=(), ips=()),
        directory=tmp_path_factory.mktemp("pki"),
    )


def server_context(pki: Pki, cert: Issued, *, client_ca: bool = False) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*cert.write(pki.directory, cert.common_name))
    if client_ca:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cadata=pki.ca.cert_pem.decode())
    return ctx


def client_context(pki: Pki, cert: Issued | None = None) -> ssl.SSLContext:
    return trusting(pki.ca, cert)


@pytest.fixture
def serve() -> Iterator[Callable[..., WebServer]]:
    servers: list[WebServer] = []

    def start(provider: WebConfigProvider, limits: Limits | None = None) -> WebServer:
        server = WebServer(("127.0.0.1", 0), SITE, web_config=provider, limits=limits or Limits())
        server.start("tls-http")
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


def https_get(server: WebServer, ctx: ssl.SSLContext, path: str = "/metrics") -> tuple[int, bytes]:
    return spies.https_get(server.port, ctx, path)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def served_certificate(server: WebServer, ctx: ssl.SSLContext) -> bytes:
    """The certificate (DER) the server presents to a new connection."""
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        cert = tls.getpeercert(binary_form=True)
    assert cert is not None
    return cert


def test_https_scrape_with_the_configured_certificate(
    serve: Callable[..., WebServer], pki: Pki
) -> None:
    """TLS from the provider: a client trusting the CA scrapes over HTTPS, keep-alive."""
    config = WebConfig(tls=server_context(pki, pki.server_a))
    server = serve(lambda: config)
    conn = http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=client_context(pki), timeout=10
    )
    try:
        for path, body in (("/metrics", b"up 1\n"), ("/healthz", b"ok\n")):
            conn.request("GET", path)
            resp = conn.getresponse()
            assert (resp.status, resp.read(), resp.will_close) == (200, body, False)
    finally:
        conn.close()


def test_the_url_says_https_when_tls_is_in_force(serve: Callable[..., WebServer], pki: Pki) -> None:
    """The URL the daemons log at start: https:// with TLS configured, http:// without."""
    config = WebConfig(tls=server_context(pki, pki.server_a))
    assert serve(lambda: config).url.startswith("https://127.0.0.1:")
    assert serve(lambda: None).url.startswith("http://127.0.0.1:")
    assert serve(WebConfig).url.startswith("http://127.0.0.1:")


def test_a_new_certificate_is_served_to_the_next_connection(
    serve: Callable[..., WebServer], pki: Pki
) -> None:
    """The provider is asked at each connection: a swapped config (a renewed
    certificate) is what the next connection gets."""
    current = [WebConfig(tls=server_context(pki, pki.server_a))]
    server = serve(lambda: current[0])
    ctx = client_context(pki)
    assert served_certificate(server, ctx) == pki.server_a.der
    current[0] = WebConfig(tls=server_context(pki, pki.server_b))
    assert served_certificate(server, ctx) == pki.server_b.der


def required_cert_config(pki: Pki, **more: object) -> WebConfig:
    """A web-config file with RequireAndVerifyClientCert (and ``more`` keys), loaded."""
    cert, key = pki.server_a.write(pki.directory, "required-server")
    ca = pki.directory / "required-ca.crt"
    ca.write_bytes(pki.ca.cert_pem)
    tls = {
        "cert_file": str(cert),
        "key_file": str(key),
        "client_ca_file": str(ca),
        "client_auth_type": "RequireAndVerifyClientCert",
    }
    path = pki.directory / "required-web-config.yml"
    path.write_text(json.dumps({"tls_server_config": tls, **more}))
    return load_web_config(str(path))


def test_required_client_certificates_leave_the_probes_open(
    serve: Callable[..., WebServer], pki: Pki
) -> None:
    """RequireAndVerifyClientCert: /healthz and /readyz answer a client without a
    certificate (the kubelet's probes); every other path answers it 403; a client
    with a certificate of the CA is served everywhere."""
    server = serve(lambda: required_cert_config(pki))
    bare, certified = client_context(pki), client_context(pki, pki.client)
    assert https_get(server, bare, "/healthz") == (200, b"ok\n")
    assert https_get(server, bare, "/readyz") == (200, b"ready\n")
    for path in ("/metrics", "/", "/nope"):
        assert https_get(server, bare, path) == (403, b"a client certificate is required\n")
        assert https_get(server, certified, path)[0] in (200, 404)
    assert https_get(server, certified) == (200, b"up 1\n")


def test_a_certificate_the_ca_did_not_issue_fails_the_handshake(
    serve: Callable[..., WebServer], pki: Pki, debug_logs: list[structlog.typing.EventDict]
) -> None:
    """RequireAndVerifyClientCert still verifies a certificate given at the handshake:
    one from another CA is refused there (one debug event), even for the probes."""
    server = serve(lambda: required_cert_config(pki))
    stranger = issue(make_ca("another CA"), "stranger", dns=(), ips=())
    with pytest.raises((ssl.SSLError, ConnectionResetError, http.client.RemoteDisconnected)):
        https_get(server, client_context(pki, stranger), "/healthz")
    deadline = time.monotonic() + 5
    while not any(e["event"] == "http_tls_handshake_failed" for e in debug_logs):
        assert time.monotonic() < deadline, debug_logs
        time.sleep(0.02)


def test_a_required_certificate_is_checked_before_any_bcrypt(
    serve: Callable[..., WebServer], pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With basic auth too, a client without a certificate is 403 at once, its
    credentials never checked (no bcrypt for it); one with a certificate still needs
    the password."""
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()
    config = required_cert_config(pki, basic_auth_users={"prometheus": hashed})
    checked = record_bcrypt(monkeypatch)
    server = serve(lambda: config)
    wrong = {"Authorization": basic("prometheus", "x")}
    answer = spies.https_get(server.port, client_context(pki), "/metrics", wrong)
    assert answer == (403, b"a client certificate is required\n")
    assert checked == []
    certified = client_context(pki, pki.client)
    assert https_get(server, certified)[0] == 401


def test_plain_http_to_a_tls_server_is_one_debug_event_and_no_traceback(
    serve: Callable[..., WebServer],
    pki: Pki,
    debug_logs: list[structlog.typing.EventDict],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A plain-HTTP request on the TLS port fails its handshake: no answer, one debug
    event, nothing on stderr; the server goes on serving."""
    config = WebConfig(tls=server_context(pki, pki.server_a))
    server = serve(lambda: config)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(5)
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(4096):
                received += chunk
    assert not received.startswith(b"HTTP/")  # closed, with at most a TLS alert
    assert https_get(server, client_context(pki), "/healthz") == (200, b"ok\n")
    failed = [e for e in debug_logs if e["event"] == "http_tls_handshake_failed"]
    assert len(failed) == 1 and failed[0]["log_level"] == "debug"
    assert [e for e in debug_logs if e["log_level"] != "debug"] == []
    assert capfd.readouterr().err == ""


def test_a_stalled_handshake_is_closed_at_its_deadline(
    serve: Callable[..., WebServer], pki: Pki
) -> None:
    """A client that connects to the TLS port and says nothing is closed at
    tls_handshake_timeout_s."""
    config = WebConfig(tls=server_context(pki, pki.server_a))
    server = serve(lambda: config, Limits(tls_handshake_timeout_s=0.5))
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        start = time.monotonic()
        assert sock.recv(4096) == b""
        assert time.monotonic() - start >= 0.45


def test_a_tls_client_leaving_mid_response_is_one_debug_event_and_no_stderr(
    pki: Pki,
    debug_logs: list[structlog.typing.EventDict],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A reset in the middle of a large body over TLS: one debug event, no warnings of
    asyncio's on stderr (each write to a lost connection past the fifth would be one)."""
    big = Site(
        metrics=lambda *, openmetrics, gz: b"x" * (32 << 20),
        health=SITE.health,
        readiness=SITE.readiness,
        index=SITE.index,
    )
    config = WebConfig(tls=server_context(pki, pki.server_a))
    server = WebServer(("127.0.0.1", 0), big, web_config=lambda: config)
    server.start("tls-http")
    try:
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        with client_context(pki).wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert tls.recv(1024).startswith(b"HTTP/1.1 200 OK")
            tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        deadline = time.monotonic() + 5
        while not any(e["event"] == "http_client_gone" for e in debug_logs):
            assert time.monotonic() < deadline, debug_logs
            time.sleep(0.02)
        assert https_get(server, client_context(pki), "/healthz") == (200, b"ok\n")
    finally:
        server.stop()
    gone = [e for e in debug_logs if e["event"] == "http_client_gone"]
    assert len(gone) == 1 and gone[0]["log_level"] == "debug"
    assert capfd.readouterr().err == ""


def test_the_default_tls12_suites_are_ones_accepted_by_name(pki: Pki) -> None:
    """With no cipher_suites, every TLS 1.2 suite served is one cipher_suites accepts by
    name: a client offering only OpenSSL's default CBC suites (SHA-2 MACs) is refused."""
    cert, key = pki.server_a.write(pki.directory, "default-suites")
    path = pki.directory / "default-suites.yml"
    path.write_text(
        json.dumps({"tls_server_config": {"cert_file": str(cert), "key_file": str(key)}})
    )
    context = load_web_config(str(path)).tls
    assert context is not None
    served = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    accepted = {name for name in _CIPHERS.values() if name is not None}
    assert served and served <= accepted, served - accepted
    for cbc in ("ECDHE-RSA-AES256-SHA384", "ECDHE-RSA-AES128-SHA256"):
        client = client_context(pki)
        client.maximum_version = ssl.TLSVersion.TLSv1_2
        client.set_ciphers(cbc)
        assert handshake(context, client).server_error is not None, cbc
    client = client_context(pki)
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    done = handshake(context, client)
    assert done.ok and done.cipher in accepted, done
