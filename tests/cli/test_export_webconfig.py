"""``--web.config.file`` in the daemons: TLS and basic auth on what they serve, probes
open, a bad file refused at start-up (exit 2 naming the key), SIGHUP re-reading it."""

from __future__ import annotations

import base64
import http.client
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest

from podres_exporter.cli import main
from podres_exporter.cli.export import Exporter
from podres_exporter.core.errors import ConfigError
from podres_sim import SimKubelet
from tests.daemon.web.tlsutil import Issued, client_context, issue, make_ca
from tests.support import exporter_settings, parse_samples, wait_until

MakeSim = Callable[..., SimKubelet]


@pytest.fixture(scope="module")
def ca() -> Issued:
    return make_ca()


def _hash(password: bytes) -> str:
    return bcrypt.hashpw(password, bcrypt.gensalt(rounds=4)).decode()


def _write_config(directory: Path, ca: Issued, users: dict[str, bytes]) -> Path:
    cert, key = issue(ca).write(directory, "server")
    config = directory / "web-config.yml"
    lines = [
        "tls_server_config:",
        f"  cert_file: {cert.name}",
        f"  key_file: {key.name}",
        "http_server_config:",
        "  headers:",
        "    X-Content-Type-Options: nosniff",
        "basic_auth_users:",
        *(f"  {user}: '{_hash(password)}'" for user, password in users.items()),
    ]
    config.write_text("\n".join(lines) + "\n")
    return config


def _get(
    port: int, path: str, context: ssl.SSLContext, user: bytes | None = None, pw: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(user + b":" + pw).decode()
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


@pytest.fixture
def exporter(make_sim: MakeSim, tmp_path: Path, ca: Issued) -> Iterator[Exporter]:
    sim = make_sim("minimal")
    config = _write_config(tmp_path, ca, {"prometheus": b"s3cret"})
    exp = Exporter(
        exporter_settings(sim, web_config_file=str(config)),
        gpu_backend=sim.host.gpu_backend(),  # type: ignore[attr-defined]
    )
    exp.start()
    yield exp
    exp.stop("test teardown")


def test_metrics_need_tls_and_credentials_probes_need_neither(
    exporter: Exporter, ca: Issued
) -> None:
    context = client_context(ca)
    port = exporter.server.port
    wait_until(lambda: _get(port, "/readyz", context)[0] == 200)  # a first reading
    status, headers, body = _get(port, "/metrics", context, b"prometheus", b"s3cret")
    assert status == 200, body
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert any(name == "podres_pods" for name, _ in parse_samples(body.decode()))

    for user, pw in ((None, b""), (b"prometheus", b"wrong"), (b"nobody", b"s3cret")):
        status, headers, body = _get(port, "/metrics", context, user, pw)
        assert status == 401, (user, pw)
        assert headers["WWW-Authenticate"].startswith("Basic")
        assert b"podres_" not in body
    assert _get(port, "/", context)[0] == 401
    assert _get(port, "/healthz", context)[:1] == (200,)
    assert _get(port, "/readyz", context)[:1] == (200,)

    # Plain HTTP on the TLS port gets no metrics.
    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        plain.request("GET", "/metrics")
        assert plain.getresponse().status != 200
    except (ConnectionError, http.client.HTTPException):
        pass
    finally:
        plain.close()


def test_sighup_reload_takes_a_new_user(exporter: Exporter, ca: Issued, tmp_path: Path) -> None:
    context = client_context(ca)
    port = exporter.server.port
    assert _get(port, "/metrics", context, b"grafana", b"other")[0] == 401
    _write_config(tmp_path, ca, {"prometheus": b"s3cret", "grafana": b"other"})
    for reload in exporter.reloads:  # what SIGHUP runs
        reload()
    assert _get(port, "/metrics", context, b"grafana", b"other")[0] == 200
    assert _get(port, "/metrics", context, b"prometheus", b"s3cret")[0] == 200


def test_a_bad_file_stops_the_exporter_at_start(make_sim: MakeSim, tmp_path: Path) -> None:
    sim = make_sim("minimal")
    bad = tmp_path / "web-config.yml"
    bad.write_text("http_server_config:\n  headers:\n    X-Powered-By: podres\n")
    with pytest.raises(ConfigError, match=r"http_server_config\.headers.*X-Powered-By"):
        Exporter(exporter_settings(sim, web_config_file=str(bad)))


@pytest.mark.parametrize("command", ["export", "plugin"])
def test_a_bad_file_exits_2_naming_the_key(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "web-config.yml"
    bad.write_text("basic_auth_users:\n  alice: not-a-bcrypt-hash\n")
    resources = tmp_path / "resources.toml"
    resources.write_text(
        '[[resource]]\nname = "example.com/nic"\n[resource.discover]\nkind = "pci"\n'
        'vendor = "0x8086"\n'
    )
    argv = [
        command,
        "--web.config.file",
        str(bad),
        "--listen-address",
        "127.0.0.1:0",
        "--kubelet-socket" if command == "export" else "--device-plugin-dir",
        str(tmp_path / "absent"),
    ]
    if command == "plugin":
        argv += ["--resources", str(resources)]
    assert main(argv, {}) == 2
    err = capsys.readouterr().err
    assert "basic_auth_users" in err and "alice" in err, err
    assert "Traceback" not in err
