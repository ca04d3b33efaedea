"""`podres top` against an exporter locked by ``--web.config.file`` (TLS and basic auth):
credentials from the URL or from a password file, a CA named with ``--ca-file``, the
certificate's name with ``--tls-server-name``; a refusal exits 2 naming the flags, and no
message ever shows the password."""

from __future__ import annotations

import http.client
import os
import ssl
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from http import HTTPStatus
from pathlib import Path

import bcrypt
import pytest

from podres_exporter.cli.export import Exporter
from podres_sim import SimKubelet
from tests.daemon.web.tlsutil import Issued, client_context, issue, make_ca
from tests.support import exporter_settings, run_in_group, wait_until

MakeSim = Callable[..., SimKubelet]
TOP = [sys.executable, "-m", "podres_exporter.top"]
PASSWORD = "s3cret:with@odd/chars"  # noqa: S105 - the test exporter's, made up here


def top(*args: str) -> tuple[int, str, str]:
    """`podres top --once ARGS` off a terminal, with no PODRES_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
    proc = run_in_group(
        [*TOP, "--once", "--interval", "0.2", *args],
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert PASSWORD not in proc.stderr + proc.stdout
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def ca() -> Issued:
    return make_ca()


@pytest.fixture
def ca_file(tmp_path: Path, ca: Issued) -> Path:
    return ca.write(tmp_path, "ca")[0]


@pytest.fixture
def locked(make_sim: MakeSim, tmp_path: Path, ca: Issued) -> Iterator[Callable[[Issued], str]]:
    """Start an exporter serving TLS with a given certificate and basic auth (user
    ``prometheus``, :data:`PASSWORD`); its ``https://127.0.0.1:PORT`` once it is ready."""
    started: list[Exporter] = []

    def start(server: Issued) -> str:
        cert, key = server.write(tmp_path, "server")
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
        config = tmp_path / "web-config.yml"
        config.write_text(
            f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
            f"basic_auth_users:\n  prometheus: '{hashed}'\n"
        )
        sim = make_sim("minimal")
        exp = Exporter(
            exporter_settings(sim, web_config_file=str(config)),
            gpu_backend=sim.host.gpu_backend(),  # type: ignore[attr-defined]
        )
        started.append(exp)
        exp.start()
        port = exp.server.port
        probe = client_context(ca)
        probe.check_hostname = False  # a certificate for another name: only the probe's ready
        wait_until(lambda: _status(port, probe) == HTTPStatus.OK)
        return f"https://127.0.0.1:{port}"

    yield start
    for exp in started:
        exp.stop("test teardown")


def _status(port: int, context: ssl.SSLContext) -> int:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status
    finally:
        conn.close()


def _password_file(tmp_path: Path) -> Path:
    path = tmp_path / "password"
    path.write_text(PASSWORD + "\n")
    path.chmod(0o600)
    return path


def test_credentials_in_the_url_and_a_ca_file_read_a_locked_exporter(
    locked: Callable[[Issued], str], ca: Issued, ca_file: Path
) -> None:
    """user:password@ in the URL (percent-encoded) and --ca-file: the node is shown."""
    url = locked(issue(ca))
    quoted = urllib.parse.quote(PASSWORD, safe="")
    rc, out, err = top(
        "--exporter", url.replace("//", f"//prometheus:{quoted}@"), "--ca-file", str(ca_file)
    )
    assert rc == 0, err
    assert "example.com/widget" in out


def test_auth_user_and_a_password_file_read_a_locked_exporter(
    locked: Callable[[Issued], str], ca: Issued, ca_file: Path, tmp_path: Path
) -> None:
    """--auth-user and --auth-password-file send basic auth: the node is shown."""
    url = locked(issue(ca))
    rc, out, err = top(
        "--exporter", url, "--ca-file", str(ca_file),
        "--auth-user", "prometheus", "--auth-password-file", str(_password_file(tmp_path)),
    )  # fmt: skip
    assert rc == 0, err
    assert "example.com/widget" in out


@pytest.mark.parametrize("credentials", ["", "prometheus:wrong@", "nobody:s3cret@"])
def test_missing_or_wrong_credentials_exit_2_naming_the_flags(
    locked: Callable[[Issued], str], ca: Issued, ca_file: Path, credentials: str
) -> None:
    """No or wrong credentials: exit 2, one message naming the flags that give them; the
    URL shown without its password."""
    url = locked(issue(ca))
    rc, _, err = top("--exporter", url.replace("//", f"//{credentials}"), "--ca-file", str(ca_file))
    assert rc == 2, err
    assert "HTTP 401" in err and "--auth-user" in err and len(err.strip().splitlines()) == 1
    assert "wrong" not in err


def test_an_untrusted_certificate_exits_2_naming_the_ca_flag(
    locked: Callable[[Issued], str], ca: Issued
) -> None:
    """Without --ca-file the test CA is not trusted: exit 2 naming --ca-file."""
    url = locked(issue(ca))
    rc, _, err = top("--exporter", url.replace("//", "//prometheus:x@"))
    assert rc == 2, err
    assert "certificate verify failed" in err or "--ca-file" in err
    assert "--ca-file" in err and len(err.strip().splitlines()) == 1


def test_tls_server_name_checks_the_name_the_certificate_carries(
    locked: Callable[[Issued], str], ca: Issued, ca_file: Path, tmp_path: Path
) -> None:
    """A certificate for a name, not the address dialled: refused, then accepted with
    --tls-server-name naming it."""
    url = locked(issue(ca, "exporter.example", dns=("exporter.example",), ips=()))
    auth = ["--auth-user", "prometheus", "--auth-password-file", str(_password_file(tmp_path))]
    rc, _, err = top("--exporter", url, "--ca-file", str(ca_file), *auth)
    assert rc == 2, err
    assert "--tls-server-name" in err
    rc, out, err = top(
        "--exporter", url, "--ca-file", str(ca_file), "--tls-server-name", "exporter.example", *auth
    )
    assert rc == 0, err
    assert "example.com/widget" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--auth-user", "a"], "--auth-user and --auth-password-file"),
        (["--auth-password-file", "/nonexistent/pw", "--auth-user", "a"], "--auth-password-file"),
        (["--ca-file", "/nonexistent/ca.pem"], "--ca-file"),
        (["--timeout", "0"], "--timeout"),
        (["--max-answer-size", "lots"], "--max-answer-size"),
    ],
)
def test_bad_http_flags_exit_2_naming_them(args: list[str], needle: str) -> None:
    """A bad value of a network flag: exit 2, one message naming the flag."""
    rc, _, err = top("--exporter", "https://127.0.0.1:1", *args)
    assert rc == 2, err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_network_flags_need_a_network_source() -> None:
    """--ca-file without --exporter or --prometheus: exit 2 naming it."""
    rc, _, err = top("--ca-file", "/x.pem", "--kubelet-socket", "/nonexistent.sock")
    assert rc == 2, err
    assert "--ca-file is for --exporter or --prometheus" in err
