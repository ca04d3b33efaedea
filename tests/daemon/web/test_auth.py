"""Basic auth and configured headers from the web-config provider, over real HTTP."""

from __future__ import annotations

import base64
import dataclasses
import http.client
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import bcrypt
import pytest
from structlog.testing import capture_logs

from podres_exporter.daemon.web import Index, Limits, Site, WebServer
from podres_exporter.daemon.web.config import WebConfig, WebConfigProvider
from tests.daemon.web.spies import hold_bcrypt, record_bcrypt

PASSWORD = b"s3cret"
HASH = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(rounds=4))  # the cheapest cost: a fast test
HEADERS = (("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "deny"))
CHALLENGE = 'Basic realm="podres"'


def basic(user: str, password: bytes) -> dict[str, str]:
    token = base64.b64encode(user.encode() + b":" + password).decode()
    return {"Authorization": f"Basic {token}"}


GOOD = basic("prom", PASSWORD)


@dataclass(frozen=True, eq=False)
class RecordingConfig(WebConfig):
    """A WebConfig that records the thread of each check, and can hold checks back."""

    threads: list[str] = field(default_factory=list)
    gate: threading.Event | None = None

    def authorized(self, authorization: str | None) -> bool:
        self.threads.append(threading.current_thread().name)
        if self.gate is not None:
            self.gate.wait(10)
        return super().authorized(authorization)


def protected(**kwargs: object) -> RecordingConfig:
    return RecordingConfig(users={"prom": HASH}, headers=HEADERS, **kwargs)  # type: ignore[arg-type]


SITE = Site(
    metrics=lambda *, openmetrics, gz: b"up 1\n",
    health=lambda: (True, "ok"),
    readiness=lambda: (False, "not ready"),
    index=Index("t", "0", "s", "h", "r"),
)

Serve = Callable[..., WebServer]


@pytest.fixture
def serve() -> Iterator[Serve]:
    servers: list[WebServer] = []

    def start(provider: WebConfigProvider, limits: Limits | None = None) -> WebServer:
        server = WebServer(("127.0.0.1", 0), SITE, web_config=provider, limits=limits or Limits())
        server.start("auth-http")
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


def request(
    server: WebServer,
    path: str,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    timeout: float = 10,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def wait_for_pending(server: WebServer, count: int) -> None:
    """Until ``count`` bcrypt checks are held (5 s at most)."""
    deadline = time.monotonic() + 5
    while server.pending_auth < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.pending_auth == count


@pytest.mark.parametrize("path", ["/metrics", "/", "/nope"])
def test_protected_paths_need_credentials(serve: Serve, path: str) -> None:
    """/metrics, / and unknown paths: 401 with the Basic challenge and a short body;
    the right credentials let the request through."""
    config = protected()
    server = serve(lambda: config)
    status, headers, body = request(server, path)
    assert (status, headers["WWW-Authenticate"], body) == (401, CHALLENGE, b"unauthorized\n")
    status, _, _ = request(server, path, GOOD)
    assert status == (404 if path == "/nope" else 200)


@pytest.mark.parametrize(
    "headers",
    [
        basic("prom", b"wrong"),
        basic("someone", PASSWORD),
        {"Authorization": "Bearer abc"},
        {"Authorization": "Basic !!!"},
        {"Authorization": ""},
    ],
)
def test_wrong_or_malformed_credentials_are_401(serve: Serve, headers: dict[str, str]) -> None:
    """A wrong password, an unknown user, another scheme, bad base64: all 401."""
    config = protected()
    server = serve(lambda: config)
    assert request(server, "/metrics", headers)[0] == 401


def test_probes_stay_open(serve: Serve) -> None:
    """/healthz and /readyz need no credentials (the kubelet's probes carry none), and
    their answers stay terse."""
    config = protected()
    server = serve(lambda: config)
    assert request(server, "/healthz")[::2] == (200, b"ok\n")
    assert request(server, "/readyz")[::2] == (503, b"not ready\n")
    assert config.threads == []  # not even checked


def test_configured_headers_are_on_every_response(serve: Serve) -> None:
    """The web config's headers: on 200, 401, 404, 503 and the loop's own 405."""
    config = protected()
    server = serve(lambda: config)
    answers = [
        request(server, "/metrics", GOOD),
        request(server, "/metrics"),
        request(server, "/nope", GOOD),
        request(server, "/readyz"),
        request(server, "/metrics", method="POST"),
    ]
    assert [status for status, _, _ in answers] == [200, 401, 404, 503, 405]
    for _, headers, _ in answers:
        assert {k: headers[k] for k, _ in HEADERS} == dict(HEADERS)
        assert headers["Server"] == "podres"


def test_the_password_check_runs_in_the_auth_pool_not_on_the_loop(serve: Serve) -> None:
    """bcrypt takes tens of milliseconds: authorized() is called from the auth pool's
    thread, never from the event loop's; a missing header and a remembered login are
    answered without it."""
    config = protected()
    server = serve(lambda: config)
    for headers in (GOOD, basic("prom", b"wrong"), {}, GOOD):
        request(server, "/metrics", headers)
    assert len(config.threads) == 2
    assert all(name.startswith("auth-http-auth") for name in config.threads), config.threads


def test_a_remembered_login_and_the_probes_do_not_wait_for_bcrypt(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The auth pool stuck in slow bcrypt checks and its queue full (a flood of wrong
    passwords): a remembered login and the probes are answered at once, a malformed
    header is 401 at once, and one more check is 503 with Retry-After at once. The
    requests' 3 s timeout is the pass mark; the stuck checks hold for 10 s."""
    config = protected()
    server = serve(lambda: config, Limits(auth_workers=1, max_pending_auth=2))
    assert request(server, "/metrics", GOOD)[0] == 200  # now remembered
    release = hold_bcrypt(monkeypatch)
    wrong = basic("prom", b"wrong")
    with ThreadPoolExecutor(2) as clients:
        stuck = [clients.submit(request, server, "/metrics", wrong) for _ in range(2)]
        try:
            wait_for_pending(server, 2)
            assert request(server, "/metrics", GOOD, timeout=3)[::2] == (200, b"up 1\n")
            assert request(server, "/healthz", timeout=3)[::2] == (200, b"ok\n")
            assert request(server, "/metrics", {"Authorization": "Basic !!"}, timeout=3)[0] == 401
            assert request(server, "/metrics", timeout=3)[0] == 401
            status, headers, _ = request(server, "/metrics", wrong, timeout=3)
            assert (status, headers["Retry-After"]) == (503, "1")
            assert headers["X-Frame-Options"] == "deny"
            assert not any(f.done() for f in stuck)
        finally:
            release.set()
        assert [f.result()[0] for f in stuck] == [401, 401]


def test_slow_password_checks_do_not_delay_the_probes(serve: Serve) -> None:
    """Every worker busy checking passwords (a flood of wrong ones): /healthz and
    /readyz are still answered, from their own pool."""
    gate = threading.Event()
    config = protected(gate=gate)
    server = serve(lambda: config)
    workers = Limits().workers
    with ThreadPoolExecutor(workers) as clients:
        stuck = [clients.submit(request, server, "/metrics", GOOD) for _ in range(workers)]
        try:
            assert request(server, "/healthz")[::2] == (200, b"ok\n")
            assert request(server, "/readyz")[0] == 503
            assert not any(f.done() for f in stuck)
        finally:
            gate.set()
        assert [f.result()[0] for f in stuck] == [200] * workers


def test_a_new_config_applies_to_the_next_request(serve: Serve) -> None:
    """The provider is asked at each request: auth switched on (a reloaded file) takes
    effect on the next request, on a connection already open."""
    current: list[WebConfig | None] = [None]
    server = serve(lambda: current[0])
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        first = conn.getresponse()
        assert (first.status, first.read()) == (200, b"up 1\n")
        current[0] = protected()
        conn.request("GET", "/metrics")
        second = conn.getresponse()
        second.read()
        assert second.status == 401 and second.getheader("X-Frame-Options") == "deny"
    finally:
        conn.close()


def test_a_failing_provider_closes_connections_and_logs_once(serve: Serve) -> None:
    """A provider that raises: connections close unanswered (never plain HTTP where TLS
    may be configured), one event when it starts failing and one when it recovers."""
    fail = [True]

    def provider() -> WebConfig | None:
        if fail[0]:
            raise OSError("cannot read /etc/podres/web.yml")
        return None

    server = serve(provider)
    with capture_logs() as logs:
        for _ in range(3):
            with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
                request(server, "/metrics")
        fail[0] = False
        assert request(server, "/metrics")[::2] == (200, b"up 1\n")
    assert [e["event"] for e in logs] == ["web_config_failed", "web_config_recovered"]
    assert "/etc/podres/web.yml" in logs[0]["error"]


def test_a_ready_body_on_a_kept_alive_connection_still_needs_credentials() -> None:
    """A body ready on the loop is never answered past the configuration: on one kept-
    alive connection, each scrape's credentials are checked and its headers added."""
    config = protected()
    site = dataclasses.replace(SITE, metrics_ready=lambda *, openmetrics, gz: b"ready 1\n")
    server = WebServer(("127.0.0.1", 0), site, web_config=lambda: config)
    server.start("auth-http")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        for headers, status, body in [
            (GOOD, 200, b"ready 1\n"),
            ({}, 401, b"unauthorized\n"),
            (basic("prom", b"wrong"), 401, b"unauthorized\n"),
            (GOOD, 200, b"ready 1\n"),
        ]:
            conn.request("GET", "/metrics", headers=headers)
            resp = conn.getresponse()
            assert (resp.status, resp.read()) == (status, body)
            assert resp.getheader("X-Frame-Options") == "deny"
            assert not resp.will_close
    finally:
        conn.close()
        server.stop()


def test_every_user_costs_one_bcrypt_at_each_configured_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Users of bcrypt costs 4 and 5, and an unknown user: a wrong password for each goes
    through the same bcrypt costs in the same order, so the timing tells no user (nor its
    cost) apart; right passwords still pass, each for its own user only."""
    users = {
        "cheap": bcrypt.hashpw(b"cheap-pw", bcrypt.gensalt(4)),
        "dear": bcrypt.hashpw(b"dear-pw", bcrypt.gensalt(5)),
    }
    config = WebConfig(users=users)
    checked = record_bcrypt(monkeypatch)
    seen = {}
    for user in ("cheap", "dear", "nobody"):
        checked.clear()
        assert not config.authorized(basic(user, b"wrong")["Authorization"])
        seen[user] = [int(hashed[4:6]) for hashed in checked]
    assert seen == {"cheap": [4, 5], "dear": [4, 5], "nobody": [4, 5]}
    assert config.authorized(basic("cheap", b"cheap-pw")["Authorization"])
    assert config.authorized(basic("dear", b"dear-pw")["Authorization"])
    assert not config.authorized(basic("cheap", b"dear-pw")["Authorization"])
    assert not config.authorized(basic("nobody", b"podres-no-such-user")["Authorization"])


def test_one_cost_configured_is_one_bcrypt_per_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every hash at one cost (the usual file), a check costs one bcrypt, the unknown
    user's included."""
    config = WebConfig(users={"a": HASH, "b": bcrypt.hashpw(b"x", bcrypt.gensalt(4))})
    calls = record_bcrypt(monkeypatch)
    for user in ("a", "b", "nobody"):
        assert not config.authorized(basic(user, b"wrong")["Authorization"])
    assert len(calls) == 3
    assert calls[0] == HASH


def from_address(
    server: WebServer, source: str, headers: dict[str, str], timeout: float = 10
) -> tuple[int, dict[str, str], bytes]:
    """A GET of /metrics from the loopback address ``source``."""
    conn = http.client.HTTPConnection(
        "127.0.0.1", server.port, timeout=timeout, source_address=(source, 0)
    )
    try:
        conn.request("GET", "/metrics", headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_a_flood_of_wrong_passwords_cannot_keep_a_right_one_out(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every bcrypt place held by wrong passwords from one address (after a restart: the
    right password not yet remembered): a right password from another address takes the
    place of the flood's newest check (that one is 503) and is checked after at most
    one more of the flood's, not refused."""
    config = protected()
    server = serve(lambda: config, Limits(auth_workers=1, max_pending_auth=4))
    release = hold_bcrypt(monkeypatch)
    wrong = basic("prom", b"wrong")
    with ThreadPoolExecutor(5) as clients:
        flood = [clients.submit(from_address, server, "127.0.0.1", wrong) for _ in range(4)]
        try:
            wait_for_pending(server, 4)
            right = clients.submit(from_address, server, "127.0.0.2", GOOD)
            deadline = time.monotonic() + 5
            while not any(f.done() for f in flood) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server.pending_auth == 4
        finally:
            release.set()
        assert right.result()[::2] == (200, b"up 1\n")
        assert sorted(f.result()[0] for f in flood) == [401, 401, 401, 503]
