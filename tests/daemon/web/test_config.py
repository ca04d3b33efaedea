"""``--web.config.file``: loading (every refusal names the file and the key), the TLS
context it builds (real handshakes), basic auth, and reloading with real files."""

from __future__ import annotations

import base64
import os
import re
import ssl
import threading
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon.web.config import (
    WebConfig,
    WebConfigWatcher,
    load_web_config,
    reload,
    tls,
)
from tests.daemon.web.tlsutil import Issued, client_context, handshake, issue, make_ca, pooled_key
from tests.support import wait_until

REPO = Path(__file__).resolve().parents[3]
PASSWORD = b"s3cret-scraper"
HASH = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(rounds=4)).decode()


@dataclass(frozen=True)
class Pki:
    ca: Issued
    server: Issued
    client: Issued  # issued by ca
    other_ca: Issued
    stranger: Issued  # a client certificate of other_ca


@pytest.fixture(scope="session")
def pki() -> Pki:
    ca = make_ca()
    other_ca = make_ca("another CA", key=pooled_key(1))
    return Pki(
        ca=ca,
        server=issue(ca, "localhost"),
        client=issue(ca, "prometheus", dns=(), ips=()),
        other_ca=other_ca,
        stranger=issue(other_ca, "stranger", dns=(), ips=()),
    )


@pytest.fixture
def tls_dir(tmp_path: Path, pki: Pki) -> Path:
    """A directory with server.crt, server.key and ca.crt."""
    pki.server.write(tmp_path, "server")
    (tmp_path / "ca.crt").write_bytes(pki.ca.cert_pem)
    return tmp_path


def write_config(directory: Path, document: object, name: str = "web-config.yml") -> Path:
    path = directory / name
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    replace(path, text.encode())
    return path


def replace(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file and rename it onto ``path``, as tools that rotate
    certificates do (a new inode: a change is seen whatever the clock's grain)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


TLS = {"cert_file": "server.crt", "key_file": "server.key"}


def basic(user: str, password: bytes) -> str:
    return "Basic " + base64.b64encode(user.encode() + b":" + password).decode()


def context_of(config: WebConfig) -> ssl.SSLContext:
    assert config.tls is not None
    return config.tls


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_web_config(str(path))
    message = str(caught.value)
    assert message.startswith(f"web config {path}: "), message
    return message


# ------------------------------------------------------------------------------- loading


def test_a_complete_file_loads(tls_dir: Path, pki: Pki) -> None:
    """TLS from files named relative to the web-config, users and headers: the server
    presents the certificate over a real handshake, speaks HTTP/1.1 (ALPN) and TLS 1.2+."""
    path = write_config(
        tls_dir,
        {
            "tls_server_config": TLS,
            "basic_auth_users": {"prometheus": HASH},
            "http_server_config": {
                "http2": True,
                "headers": {
                    "X-Frame-Options": "deny",
                    "Strict-Transport-Security": "max-age=31536000",
                    "X-XSS-Protection": "",
                },
            },
        },
    )
    config = load_web_config(str(path))
    context = context_of(config)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.maximum_version == ssl.TLSVersion.TLSv1_3
    assert context.verify_mode == ssl.CERT_NONE
    client = client_context(pki.ca)
    client.set_alpn_protocols(["h2", "http/1.1"])
    result = handshake(context, client)
    assert result.ok, result
    assert result.server_cert == pki.server.der
    assert result.alpn == "http/1.1"
    assert config.users == {"prometheus": HASH.encode()}
    assert config.auth_required
    # In the file's order; a blank value is unset.
    assert config.headers == (
        ("X-Frame-Options", "deny"),
        ("Strict-Transport-Security", "max-age=31536000"),
    )


def test_users_alone_serve_plain_http(tmp_path: Path) -> None:
    """Without tls_server_config the endpoints stay plain HTTP, with basic auth."""
    config = load_web_config(str(write_config(tmp_path, {"basic_auth_users": {"a": HASH}})))
    assert config.tls is None
    assert config.auth_required
    assert config.headers == ()


def test_inline_certificate_key_and_client_ca(tmp_path: Path, pki: Pki) -> None:
    """cert, key and client_ca may be given inline (PEM text in the file)."""
    path = write_config(
        tmp_path,
        {
            "tls_server_config": {
                "cert": pki.server.cert_pem.decode(),
                "key": pki.server.key_pem.decode(),
                "client_ca": pki.ca.cert_pem.decode(),
                "client_auth_type": "RequireAndVerifyClientCert",
            }
        },
    )
    config = load_web_config(str(path))
    context = context_of(config)
    result = handshake(context, client_context(pki.ca, pki.client))
    assert result.ok, result
    assert result.server_cert == pki.server.der
    assert result.client_cert
    assert config.client_cert_required
    assert handshake(context, client_context(pki.ca, pki.stranger)).server_error is not None


def test_the_documented_example_loads(tmp_path: Path, pki: Pki) -> None:
    """docs/security.md's web-config example loads as it stands, beside a certificate and
    key of the names it gives, and its example hash is a bcrypt hash."""
    text = (REPO / "docs" / "security.md").read_text()
    examples = [
        block
        for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
        if block.startswith("tls_server_config:")
    ]
    assert len(examples) == 1
    pki.server.write(tmp_path, "tls")
    config = load_web_config(str(write_config(tmp_path, examples[0])))
    assert handshake(context_of(config), client_context(pki.ca)).ok
    assert set(config.users) == {"prometheus"}
    assert config.headers == (("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "deny"))


def test_the_repr_shows_no_hash() -> None:
    """A WebConfig in a log line shows no password hash."""
    assert HASH not in repr(WebConfig(users={"p": HASH.encode()}))


def test_the_error_message_names_file_key_and_choices(tls_dir: Path) -> None:
    """A bad value reads as the file, the dotted key, and what would be accepted."""
    path = write_config(tls_dir, {"tls_server_config": {**TLS, "min_version": "TLS14"}})
    assert refusal(path) == (
        f"web config {path}: tls_server_config.min_version: 'TLS14' is not one of "
        "TLS10, TLS11, TLS12, TLS13"
    )


TLS_BASE = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"

REFUSED = {
    "unknown top-level key": ("tls_config: {}\n", "tls_config: unknown key"),
    "unknown tls key": (TLS_BASE + "  certfile: x\n", "tls_server_config.certfile: unknown key"),
    "unknown http key": ("http_server_config: {gzip: true}\n", "http_server_config.gzip: unknown"),
    "top level is a list": ("- a\n", "is a list, not a mapping"),
    "a section is a string": ("tls_server_config: yes-please\n", "tls_server_config: is a string"),
    "a list for a string": (
        "tls_server_config:\n  cert_file: [a, b]\n  key_file: k\n",
        "tls_server_config.cert_file: is a list, not a string",
    ),
    "a number for a string": (TLS_BASE + "  min_version: 1.2\n", "min_version: is a number"),
    "no key": ("tls_server_config:\n  cert_file: c\n", "tls_server_config.key_file: is missing"),
    "no certificate": ("tls_server_config:\n  key_file: k\n", "tls_server_config.cert_file: is"),
    "settings but no certificate": (
        "tls_server_config:\n  min_version: TLS13\n",
        "tls_server_config: sets min_version but no certificate",
    ),
    "file and inline": (TLS_BASE + "  cert: abc\n", "tls_server_config.cert: is given with"),
    "any client cert": (
        TLS_BASE + "  client_auth_type: RequireAnyClientCert\n  client_ca_file: ca.crt\n",
        "tls_server_config.client_auth_type: RequireAnyClientCert needs a client "
        "certificate without verifying it, which Python's ssl cannot do",
    ),
    "any client cert, old name": (
        TLS_BASE + "  client_auth_type: RequireClientCert\n",
        "tls_server_config.client_auth_type: RequireClientCert (RequireAnyClientCert's",
    ),
    "unknown client auth": (
        TLS_BASE + "  client_auth_type: Always\n",
        "tls_server_config.client_auth_type: 'Always' is not one of NoClientCert,",
    ),
    "verify without a CA": (
        TLS_BASE + "  client_auth_type: RequireAndVerifyClientCert\n",
        "tls_server_config.client_ca_file: is needed with client_auth_type "
        "RequireAndVerifyClientCert",
    ),
    "a CA that checks nothing": (
        TLS_BASE + "  client_ca_file: ca.crt\n",
        "tls_server_config.client_ca_file: is given but client_auth_type NoClientCert",
    ),
    "allowed SANs": (
        TLS_BASE + "  client_allowed_sans: [prometheus]\n",
        "tls_server_config.client_allowed_sans: is not supported",
    ),
    "min above max": (
        TLS_BASE + "  min_version: TLS13\n  max_version: TLS12\n",
        "tls_server_config.min_version: is above max_version",
    ),
    "an insecure cipher": (
        TLS_BASE + "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, "
        "TLS_RSA_WITH_RC4_128_SHA]\n",
        "tls_server_config.cipher_suites[1]: 'TLS_RSA_WITH_RC4_128_SHA' is not one of Go's",
    ),
    "an OpenSSL cipher name": (
        TLS_BASE + "  cipher_suites: [ECDHE-RSA-AES128-GCM-SHA256]\n",
        "tls_server_config.cipher_suites[0]: 'ECDHE-RSA-AES128-GCM-SHA256' is not one",
    ),
    "TLS 1.3 suites only": (
        TLS_BASE + "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
        "tls_server_config.cipher_suites: names TLS 1.3 suites only",
    ),
    "cipher suites as a string": (
        TLS_BASE + "  cipher_suites: TLS_AES_128_GCM_SHA256\n",
        "tls_server_config.cipher_suites: is a string, not a list of strings",
    ),
    "an unknown curve": (
        TLS_BASE + "  curve_preferences: [P256]\n",
        "tls_server_config.curve_preferences[0]: 'P256' is not one of CurveP256,",
    ),
    "several curves": (
        TLS_BASE + "  curve_preferences: [X25519, CurveP256]\n",
        "tls_server_config.curve_preferences: lists several curves",
    ),
    "prefer as a string": (
        TLS_BASE + "  prefer_server_cipher_suites: 'false'\n",
        "tls_server_config.prefer_server_cipher_suites: is a string, not true or false",
    ),
    "rate limit": ("rate_limit: {interval: 1s, burst: 5}\n", "rate_limit: is not supported"),
    "http2 as a string": (
        "http_server_config: {http2: 'on'}\n",
        "http_server_config.http2: is a string, not true or false",
    ),
    "a header of its own": (
        "http_server_config:\n  headers: {X-Powered-By: podres}\n",
        "http_server_config.headers.X-Powered-By: cannot be set (only Strict-Transport-Security,",
    ),
    "a header in lower case": (
        "http_server_config:\n  headers: {x-frame-options: deny}\n",
        "http_server_config.headers.x-frame-options: cannot be set",
    ),
    "a bad X-Frame-Options": (
        "http_server_config:\n  headers: {X-Frame-Options: allow}\n",
        "http_server_config.headers.X-Frame-Options: 'allow' is not one of deny, sameorigin",
    ),
    "a bad X-Content-Type-Options": (
        "http_server_config:\n  headers: {X-Content-Type-Options: sniff}\n",
        "X-Content-Type-Options: 'sniff' is not one of nosniff",
    ),
    "a header with a line break": (
        'http_server_config:\n  headers: {Content-Security-Policy: "a\\r\\nSet-Cookie: x"}\n',
        "http_server_config.headers.Content-Security-Policy: holds '\\r' (U+000D): a header "
        "value must be printable ASCII",
    ),
    "a header beyond Latin-1": (
        'http_server_config:\n  headers: {Content-Security-Policy: "\u00e9\u4e2d"}\n',
        "http_server_config.headers.Content-Security-Policy: holds 'é' (U+00E9)",
    ),
    "a header with a line separator": (
        'http_server_config:\n  headers: {X-XSS-Protection: "1\u2028x"}\n',
        "http_server_config.headers.X-XSS-Protection: holds '\\u2028' (U+2028)",
    ),
    "a header as a number": (
        "http_server_config:\n  headers: {Strict-Transport-Security: 300}\n",
        "headers.Strict-Transport-Security: is a number, not a string",
    ),
    "users as a list": ("basic_auth_users: [alice]\n", "basic_auth_users: is a list"),
    "a number as a user name": (
        f"basic_auth_users:\n  123: '{HASH}'\n",
        "basic_auth_users: the user name 123 is a number, not a string: quote it",
    ),
    "a boolean as a user name": (
        f"basic_auth_users:\n  yes: '{HASH}'\n",
        "basic_auth_users: the user name True is a boolean",
    ),
    "a colon in a user name": (
        f"basic_auth_users:\n  'a:b': '{HASH}'\n",
        "basic_auth_users.a:b: a user name cannot hold ':'",
    ),
    "a plain password": (
        "basic_auth_users:\n  alice: hunter2\n",
        "basic_auth_users.alice: is not a bcrypt hash",
    ),
    "a truncated hash": (
        f"basic_auth_users:\n  alice: '{HASH[:-1]}'\n",
        "basic_auth_users.alice: is not a bcrypt hash",
    ),
    "a bcrypt cost out of range": (
        f"basic_auth_users:\n  alice: '{HASH[:4]}03{HASH[6:]}'\n",
        "basic_auth_users.alice: is not a bcrypt hash",
    ),
    "a number as a hash": (
        "basic_auth_users:\n  alice: 12\n",
        "basic_auth_users.alice: is a number, not a bcrypt hash",
    ),
    "no hash": ("basic_auth_users:\n  alice:\n", "basic_auth_users.alice: is empty"),
    "a user twice": (
        f"basic_auth_users:\n  alice: '{HASH}'\n  alice: '{HASH}'\n",
        "found the key 'alice' twice",
    ),
    "a date for a path": (
        "tls_server_config:\n  cert_file: 2024-01-01\n  key_file: k\n",
        "tls_server_config.cert_file: is a date, not a string",
    ),
}


@pytest.mark.parametrize(("text", "expected"), REFUSED.values(), ids=list(REFUSED))
def test_bad_values_are_refused_by_key(tls_dir: Path, text: str, expected: str) -> None:
    """Each bad value, unknown key or unsupported setting is a ConfigError naming the file
    and the key; the key's password hashes never appear in the message."""
    message = refusal(write_config(tls_dir, text))
    assert expected in message
    assert HASH not in message


def test_the_plain_password_is_not_echoed(tmp_path: Path) -> None:
    """A value that is not a bcrypt hash may be a password: the message never shows it."""
    message = refusal(write_config(tmp_path, "basic_auth_users:\n  alice: hunter2\n"))
    assert "hunter2" not in message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "is empty"),
        (b"# only a comment\n", "is empty"),
        (b"basic_auth_users: {a: '\xff'}\n", "is not UTF-8 text (byte 0xff at offset 23)"),
        (b"tls_server_config: [unclosed\n", "is not valid YAML: line 2, column 1: while parsing"),
        (b"a: b\n  c: d\n", "is not valid YAML"),
        (b"basic_auth_users: !!python/object:os.system {}\n", "is not valid YAML"),
    ],
    ids=["empty", "comment only", "not UTF-8", "unclosed list", "bad indent", "python tag"],
)
def test_unreadable_files_are_refused(tmp_path: Path, content: bytes, expected: str) -> None:
    """Empty, not UTF-8, not YAML (nor an arbitrary Python object): a ConfigError each."""
    path = tmp_path / "web-config.yml"
    path.write_bytes(content)
    assert expected in refusal(path)


def test_a_yaml_error_does_not_echo_the_line(tmp_path: Path, pki: Pki) -> None:
    """A YAML error says where, but never shows the line: it may be part of a key."""
    key_lines = pki.server.key_pem.decode().splitlines()
    text = "tls_server_config:\n  key: |\n" + "".join(f"    {line}\n" for line in key_lines)
    text += "  cert_file: [x\n"
    message = refusal(write_config(tmp_path, text))
    assert "is not valid YAML: line " in message
    assert not any(line in message for line in key_lines[1:-1])


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    """A file that is not there, or a directory, cannot be read: the message says why."""
    assert "cannot be read: No such file or directory" in refusal(tmp_path / "absent.yml")
    assert "cannot be read: not a regular file" in refusal(tmp_path)


def test_files_that_are_not_regular_files_are_refused(tmp_path: Path) -> None:
    """A FIFO (which would block the start), /dev/zero (endless) and a directory, as the
    web-config file or as a file it names: refused at once, naming the key."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        assert "cannot be read: not a regular file" in refusal(path)
        tls = {"cert_file": str(path), "key_file": str(path)}
        message = refusal(write_config(tmp_path, {"tls_server_config": tls}))
        assert f"tls_server_config.cert_file: cannot read {path}: not a regular file" in message


def test_a_file_over_1_mib_is_refused(tmp_path: Path) -> None:
    """The web-config or a certificate file over 1 MiB is refused naming its key; one of
    exactly 1 MiB is read."""
    big = tmp_path / "big.yml"
    big.write_bytes(b"#" * (1 << 20) + b"\n")
    assert "cannot be read: larger than 1048576 bytes" in refusal(big)
    (tmp_path / "big.crt").write_bytes(b"#" * ((1 << 20) + 1))
    tls = {"cert_file": "big.crt", "key_file": "big.crt"}
    message = refusal(write_config(tmp_path, {"tls_server_config": tls}))
    assert "tls_server_config.cert_file: cannot read " in message
    assert "larger than 1048576 bytes" in message
    exact = tmp_path / "exact.yml"
    exact.write_bytes(b"basic_auth_users: {}\n" + b"#" * ((1 << 20) - 21))
    assert exact.stat().st_size == 1 << 20
    assert not load_web_config(str(exact)).auth_required


def test_a_nul_byte_in_a_path_is_refused_by_key(tmp_path: Path) -> None:
    """A NUL byte in cert_file is a ConfigError naming the key (no ValueError), and the
    watcher's check of such a path raises nothing either."""
    path = write_config(tmp_path, {"tls_server_config": {"cert_file": "a\0b", "key_file": "k"}})
    message = refusal(path)
    assert f"tls_server_config.cert_file: cannot read {str(tmp_path / 'a')!r}"[:-1] in message
    assert "\\x00b': embedded null byte" in message
    assert "\0" not in message
    assert reload.file_stat("a\0b") is None


def test_deeply_nested_yaml_is_refused(tmp_path: Path) -> None:
    """5,000 nested lists: a ConfigError, not a RecursionError."""
    path = tmp_path / "deep.yml"
    path.write_text("[" * 5000 + "]" * 5000 + "\n")
    assert "nests too deeply" in refusal(path)


def test_missing_certificate_files_name_the_key_and_path(tls_dir: Path) -> None:
    """A certificate, key or CA file that is not there names its key and its path."""
    for key in ("cert_file", "key_file"):
        tls = {**TLS, key: "absent.pem"}
        message = refusal(write_config(tls_dir, {"tls_server_config": tls}))
        assert f"tls_server_config.{key}: cannot read {tls_dir / 'absent.pem'}: No such" in message
    tls = {**TLS, "client_auth_type": "VerifyClientCertIfGiven", "client_ca_file": "/nope/ca.pem"}
    message = refusal(write_config(tls_dir, {"tls_server_config": tls}))
    assert "tls_server_config.client_ca_file: cannot read /nope/ca.pem: No such file" in message


def test_a_key_of_another_certificate_is_refused(tls_dir: Path, pki: Pki) -> None:
    """A key that does not match the certificate is refused naming key_file."""
    (tls_dir / "other.key").write_bytes(pki.ca.key_pem)
    path = write_config(tls_dir, {"tls_server_config": {**TLS, "key_file": "other.key"}})
    message = refusal(path)
    assert f"tls_server_config.key_file: {tls_dir / 'other.key'} does not match the " in message
    assert "certificate of tls_server_config.cert_file" in message


@pytest.mark.parametrize(
    ("target", "content", "expected"),
    [
        ("server.crt", b"not a certificate\n", "tls_server_config.cert_file: {} holds no PEM"),
        ("server.key", b"", "tls_server_config.key_file: {} holds no PEM private key"),
        ("ca.crt", b"garbage", "tls_server_config.client_ca_file: {} holds no PEM certificate"),
        (
            "server.key",
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
            "tls_server_config.key_file: {} is encrypted",
        ),
        (
            "ca.crt",
            b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
            "tls_server_config.client_ca_file: {} cannot be loaded",
        ),
    ],
    ids=["certificate", "key", "CA", "encrypted key", "CA not DER"],
)
def test_files_without_what_they_should_hold_are_refused(
    tls_dir: Path, target: str, content: bytes, expected: str
) -> None:
    """A certificate, key or CA file with the wrong content names its key and path."""
    (tls_dir / target).write_bytes(content)
    tls = {**TLS, "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "ca.crt"}
    assert expected.format(tls_dir / target) in refusal(
        write_config(tls_dir, {"tls_server_config": tls})
    )


def test_a_half_written_certificate_is_refused(tls_dir: Path, pki: Pki) -> None:
    """A certificate cut short (caught mid-write) is refused naming cert_file."""
    (tls_dir / "server.crt").write_bytes(pki.server.cert_pem[: len(pki.server.cert_pem) // 2])
    message = refusal(write_config(tls_dir, {"tls_server_config": TLS}))
    assert "tls_server_config.cert_file" in message


def _values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=3)
        ),
        max_leaves=8,
    )


_SECTIONS = st.sampled_from(
    [None, "tls_server_config", "http_server_config", "basic_auth_users", "headers"]
)
_KEYS = st.sampled_from([*tls.TLS_KEYS, "http2", "headers", "alice", "X-Frame-Options"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(section=_SECTIONS, key=_KEYS, value=_values())
def test_any_document_is_a_config_or_a_config_error(
    tmp_path_factory: pytest.TempPathFactory, section: str | None, key: str, value: Any
) -> None:
    """Whatever types a file holds where, loading gives a WebConfig or a ConfigError that
    names the file, never another exception."""
    document: Any
    if section is None:
        document = value
    elif section == "headers":
        document = {"http_server_config": {"headers": {key: value}}}
    else:
        document = {section: {key: value}}
    path = tmp_path_factory.mktemp("fuzz") / "web-config.yml"
    path.write_text(yaml.safe_dump(document))
    try:
        load_web_config(str(path))
    except ConfigError as err:
        assert str(err).startswith(f"web config {path}: ")


@settings(max_examples=100, deadline=None)
@given(content=st.binary(max_size=64))
def test_any_bytes_are_a_config_or_a_config_error(
    tmp_path_factory: pytest.TempPathFactory, content: bytes
) -> None:
    """Arbitrary bytes load or are refused with a ConfigError, never a traceback."""
    path = tmp_path_factory.mktemp("bytes") / "web-config.yml"
    path.write_bytes(content)
    try:
        load_web_config(str(path))
    except ConfigError as err:
        assert str(err).startswith(f"web config {path}: ")


# ------------------------------------------------------------------------------ the TLS


def _load_tls(directory: Path, **tls: object) -> ssl.SSLContext:
    path = write_config(directory, {"tls_server_config": {**TLS, **tls}})
    return context_of(load_web_config(str(path)))


def test_require_and_verify_client_cert(tls_dir: Path, pki: Pki) -> None:
    """RequireAndVerifyClientCert verifies a certificate at the handshake and refuses one
    the CA did not issue; a client without one completes the handshake (the kubelet's
    probes), and the config says that every other path needs one."""
    path = write_config(
        tls_dir,
        {
            "tls_server_config": {
                **TLS,
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": "ca.crt",
            }
        },
    )
    config = load_web_config(str(path))
    assert config.client_cert_required
    context = context_of(config)
    assert context.verify_mode == ssl.CERT_OPTIONAL
    admitted = handshake(context, client_context(pki.ca, pki.client))
    assert admitted.ok, admitted
    assert admitted.client_cert is not None
    assert admitted.client_cert["subject"] == ((("commonName", "prometheus"),),)
    without = handshake(context, client_context(pki.ca))
    assert without.ok, without
    assert not without.client_cert
    stranger = handshake(context, client_context(pki.ca, pki.stranger))
    assert isinstance(stranger.server_error, ssl.SSLCertVerificationError)


def test_verify_client_cert_if_given(tls_dir: Path, pki: Pki) -> None:
    """VerifyClientCertIfGiven admits clients without a certificate, and refuses a
    certificate the CA did not issue."""
    context = _load_tls(
        tls_dir, client_auth_type="VerifyClientCertIfGiven", client_ca_file="ca.crt"
    )
    assert context.verify_mode == ssl.CERT_OPTIONAL
    assert handshake(context, client_context(pki.ca)).ok
    assert handshake(context, client_context(pki.ca, pki.client)).ok
    stranger = handshake(context, client_context(pki.ca, pki.stranger))
    assert isinstance(stranger.server_error, ssl.SSLCertVerificationError)


def test_request_client_cert_admits_as_go_does(tls_dir: Path, pki: Pki) -> None:
    """RequestClientCert (Go asks, never checks) admits every client, as NoClientCert."""
    context = _load_tls(tls_dir, client_auth_type="RequestClientCert")
    assert context.verify_mode == ssl.CERT_NONE
    assert handshake(context, client_context(pki.ca)).ok
    assert handshake(context, client_context(pki.ca, pki.stranger)).ok


def test_versions(tls_dir: Path, pki: Pki) -> None:
    """min_version and max_version bound what is negotiated."""
    only13 = _load_tls(tls_dir, min_version="TLS13")
    old_client = client_context(pki.ca)
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    assert handshake(only13, old_client).server_error is not None
    assert handshake(_load_tls(tls_dir), old_client).version == "TLSv1.2"
    assert handshake(_load_tls(tls_dir, max_version="TLS12"), client_context(pki.ca)).version == (
        "TLSv1.2"
    )


def test_old_versions_are_accepted_without_a_warning(tls_dir: Path) -> None:
    """TLS10 is accepted as the toolkit accepts it, without Python's deprecation warning
    escaping (warnings are errors in the tests)."""
    assert _load_tls(tls_dir, min_version="TLS10").minimum_version == ssl.TLSVersion.TLSv1


def test_cipher_suites_by_go_name(tls_dir: Path, pki: Pki) -> None:
    """Go's IANA names choose the TLS 1.2 suite; TLS 1.3 names are accepted and change
    nothing; a client with none of the listed suites is refused."""
    context = _load_tls(
        tls_dir,
        max_version="TLS12",
        cipher_suites=["TLS_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"],
    )
    result = handshake(context, client_context(pki.ca))
    assert result.cipher == "ECDHE-RSA-AES256-GCM-SHA384"
    client = client_context(pki.ca)
    client.set_ciphers("ECDHE-RSA-AES128-GCM-SHA256")
    assert handshake(context, client).server_error is not None
    # TLS 1.3 keeps OpenSSL's suites.
    assert handshake(_load_tls(tls_dir, cipher_suites=["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]),
                     client_context(pki.ca)).version == "TLSv1.3"  # fmt: skip


@pytest.mark.parametrize(
    ("prefer", "expected"),
    [(True, "ECDHE-RSA-AES128-GCM-SHA256"), (False, "ECDHE-RSA-AES256-GCM-SHA384")],
)
def test_prefer_server_cipher_suites(tls_dir: Path, pki: Pki, prefer: bool, expected: str) -> None:
    """With prefer_server_cipher_suites the server's order wins, without it the client's."""
    context = _load_tls(
        tls_dir,
        max_version="TLS12",
        prefer_server_cipher_suites=prefer,
        cipher_suites=[
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        ],
    )
    client = client_context(pki.ca)
    client.set_ciphers("ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256")
    assert handshake(context, client).cipher == expected


def test_one_curve(tls_dir: Path, pki: Pki) -> None:
    """curve_preferences with one curve: a client without that curve is refused."""
    context = _load_tls(tls_dir, curve_preferences=["X25519"])
    assert handshake(context, client_context(pki.ca)).ok
    client = client_context(pki.ca)
    client.set_ecdh_curve("prime256v1")
    assert handshake(context, client).server_error is not None
    assert handshake(_load_tls(tls_dir, curve_preferences=["CurveP256"]), client).ok


# -------------------------------------------------------------------------- basic auth


def _users(**users: bytes) -> WebConfig:
    return WebConfig(users={name: hashed for name, hashed in users.items()})


class CountingCheckpw:
    """bcrypt.checkpw, counted, with the hashes it was given."""

    def __init__(self) -> None:
        self.hashes: list[bytes] = []
        self._real = bcrypt.checkpw

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.hashes.append(hashed)
        return self._real(password, hashed)


@pytest.fixture
def checkpw(monkeypatch: pytest.MonkeyPatch) -> CountingCheckpw:
    counting = CountingCheckpw()
    monkeypatch.setattr(bcrypt, "checkpw", counting)
    return counting


def test_no_users_let_everyone_in() -> None:
    """Without basic_auth_users every request is authorized, with or without a header."""
    config = WebConfig()
    assert not config.auth_required
    assert config.authorized(None)
    assert config.authorized(basic("anyone", b"x"))


def test_basic_auth(checkpw: CountingCheckpw) -> None:
    """The right password passes; a wrong password or user costs one bcrypt check; a
    header that is not Basic credentials is refused at once, as the toolkit does (its
    timing tells only its syntax, which the sender knows)."""
    config = _users(prometheus=HASH.encode())
    assert config.authorized(basic("prometheus", PASSWORD))
    for header in (basic("prometheus", b"wrong"), basic("Prometheus", PASSWORD)):
        before = len(checkpw.hashes)
        assert config.well_formed(header)
        assert not config.authorized(header), header
        assert len(checkpw.hashes) == before + 1, header
    malformed: list[str | None] = [
        None,
        "",
        "Bearer " + base64.b64encode(b"prometheus:" + PASSWORD).decode(),
        "Basic not-base64!",
        "Basic " + base64.b64encode(b"prometheus").decode(),  # no colon
        "Basic " + base64.b64encode(b"\xff\xfe:" + PASSWORD).decode(),  # not UTF-8
    ]
    before = len(checkpw.hashes)
    for bad in malformed:
        assert not config.well_formed(bad), bad
        assert not config.authorized(bad), bad
    assert len(checkpw.hashes) == before


def test_cached_knows_only_remembered_logins_and_costs_no_bcrypt(
    checkpw: CountingCheckpw,
) -> None:
    """cached() is true for a login that passed lately (and with no users), false for
    any other, and never runs bcrypt: the server asks it on its event loop."""
    config = _users(prometheus=HASH.encode())
    good = basic("prometheus", PASSWORD)
    assert not config.cached(good)
    assert not config.cached(None) and not config.cached("Basic !!")
    assert checkpw.hashes == []
    assert config.authorized(good)
    assert config.cached(good)
    assert not config.cached(basic("prometheus", b"wrong"))
    assert len(checkpw.hashes) == 1
    assert WebConfig().cached(None)


def test_header_values_are_encoded_once_and_must_be_printable_ascii() -> None:
    """A WebConfig holds its headers as wire bytes; a value that cannot go on the wire
    fails its construction, never a response."""
    config = WebConfig(headers=(("X-Frame-Options", "deny"), ("X-XSS-Protection", "1;\tx")))
    assert config.header_bytes == b"X-Frame-Options: deny\r\nX-XSS-Protection: 1;\tx\r\n"
    for name, value in (
        ("X-A", "\u00e9\u4e2d"),
        ("X-A", "a\u2028b"),
        ("X-A", "a\nb"),
        ("X A", "v"),
    ):
        with pytest.raises(ValueError, match="printable ASCII"):
            WebConfig(headers=((name, value),))


def test_an_unknown_user_costs_a_bcrypt_check_too(checkpw: CountingCheckpw) -> None:
    """An unknown user is checked against a dummy hash of the configured cost, so that
    the timing does not tell which user names exist."""
    config = _users(prometheus=HASH.encode())
    assert not config.authorized(basic("mallory", PASSWORD))
    assert len(checkpw.hashes) == 1
    (dummy,) = checkpw.hashes
    assert dummy != HASH.encode()
    assert dummy.startswith(b"$2b$04$")  # the cost of the configured hash


def test_a_password_over_72_bytes_is_refused(checkpw: CountingCheckpw) -> None:
    """bcrypt reads 72 bytes: a longer password whose first 72 bytes match is refused,
    after the same bcrypt work, and never raises."""
    password = bytes(range(65, 65 + 72))
    config = _users(long=bcrypt.hashpw(password, bcrypt.gensalt(rounds=4)))
    assert config.authorized(basic("long", password))
    assert not config.authorized(basic("long", password + b"!"))
    assert not config.authorized(basic("long", password * 20))
    assert not config.authorized(basic("nobody", password * 20))
    assert len(checkpw.hashes) == 4


def test_good_credentials_are_remembered(checkpw: CountingCheckpw) -> None:
    """A scraper does not pay a bcrypt per scrape: a success is remembered (failures
    are not, so a wrong guess always costs the guesser a bcrypt)."""
    config = _users(prometheus=HASH.encode())
    for _ in range(3):
        assert config.authorized(basic("prometheus", PASSWORD))
        assert not config.authorized(basic("prometheus", b"guess"))
    assert len(checkpw.hashes) == 1 + 3


def test_concurrent_checks_agree() -> None:
    """Checks from several threads at once give each its own right answer."""
    config = _users(a=HASH.encode(), b=bcrypt.hashpw(b"other", bcrypt.gensalt(rounds=4)))
    answers: dict[tuple[str, bytes], list[bool]] = {}
    cases = [("a", PASSWORD), ("b", b"other"), ("a", b"other"), ("c", PASSWORD)]

    def run(user: str, password: bytes) -> None:
        answers.setdefault((user, password), []).append(config.authorized(basic(user, password)))

    threads = [threading.Thread(target=run, args=case) for case in cases * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {k: set(v) for k, v in answers.items()} == {
        ("a", PASSWORD): {True},
        ("b", b"other"): {True},
        ("a", b"other"): {False},
        ("c", PASSWORD): {False},
    }


# ---------------------------------------------------------------------------- reloading


@pytest.fixture
def served(tls_dir: Path) -> tuple[Path, WebConfigWatcher]:
    """A watcher of a TLS web-config with one user."""
    path = write_config(tls_dir, {"tls_server_config": TLS, "basic_auth_users": {"p": HASH}})
    return path, WebConfigWatcher(str(path), interval_s=0.05)


def presented(watcher: WebConfigWatcher, pki: Pki) -> bytes | None:
    """The certificate the configuration in force presents in a real handshake."""
    return handshake(context_of(watcher.current()), client_context(pki.ca)).server_cert


def events(logs: list[MutableMapping[str, Any]], name: str) -> list[MutableMapping[str, Any]]:
    return [entry for entry in logs if entry["event"] == name]


def test_a_bad_file_fails_the_start(tmp_path: Path) -> None:
    """The first load raises ConfigError: the daemon exits 2 before it listens."""
    with pytest.raises(ConfigError, match=r"basic_auth_users\.alice: is not a bcrypt hash"):
        WebConfigWatcher(str(write_config(tmp_path, {"basic_auth_users": {"alice": "pw"}})))
    with pytest.raises(ValueError, match="interval_s"):
        WebConfigWatcher(str(tmp_path / "x.yml"), interval_s=0)


def test_nothing_changed_nothing_read(served: tuple[Path, WebConfigWatcher]) -> None:
    """current() is the loaded configuration, the same object until a change."""
    _, watcher = served
    first = watcher.current()
    assert watcher.check() is None
    assert watcher.current() is first
    assert watcher.last_reload_ok


def test_a_rotated_certificate_is_taken(
    served: tuple[Path, WebConfigWatcher], tls_dir: Path, pki: Pki
) -> None:
    """A new certificate and key in place of the old ones: the next check loads them and
    the next handshake presents the new certificate."""
    _, watcher = served
    assert presented(watcher, pki) == pki.server.der
    renewed = issue(pki.ca, "localhost")
    assert renewed.der != pki.server.der
    with capture_logs() as logs:
        replace(tls_dir / "server.crt", renewed.cert_pem)
        replace(tls_dir / "server.key", renewed.key_pem)
        assert watcher.check() is True
    assert presented(watcher, pki) == renewed.der
    assert [e["file"] for e in events(logs, "web_config_reloaded")] == [watcher.path]
    assert watcher.last_reload_ok


def test_a_half_written_certificate_keeps_the_last_good(
    served: tuple[Path, WebConfigWatcher], tls_dir: Path, pki: Pki
) -> None:
    """A certificate caught mid-write leaves the old one in force and logs one failure
    naming the file and the key, not one per check; the complete file is then taken."""
    _, watcher = served
    renewed = issue(pki.ca, "localhost")
    cert = tls_dir / "server.crt"
    with capture_logs() as logs:
        replace(cert, renewed.cert_pem[:300])
        assert watcher.check() is False
        assert watcher.check() is None  # nothing changed since
        os.utime(cert, ns=(1, 1))  # changed, but fails the same way
        assert watcher.check() is False
        assert presented(watcher, pki) == pki.server.der
        assert not watcher.last_reload_ok
        replace(cert, renewed.cert_pem)
        assert watcher.check() is True
    failures = events(logs, "web_config_reload_failed")
    assert len(failures) == 1
    assert failures[0]["file"] == watcher.path
    assert "tls_server_config.cert_file" in failures[0]["error"]
    assert len(events(logs, "web_config_reloaded")) == 1
    assert presented(watcher, pki) == renewed.der
    assert watcher.last_reload_ok


def test_a_bad_new_file_keeps_the_last_good(served: tuple[Path, WebConfigWatcher]) -> None:
    """A web-config made invalid keeps the last good configuration (users included) in
    force; each distinct failure is logged once; the next good version is taken."""
    path, watcher = served
    good = watcher.current()
    good_at = watcher.last_good_at
    with capture_logs() as logs:
        replace(path, b"tls_server_config: [")
        assert watcher.check() is False
        replace(path, b"basic_auth_users: {p: plain}\n")
        assert watcher.check() is False
        assert watcher.current() is good
        assert watcher.current().authorized(basic("p", PASSWORD))
        assert watcher.last_reload_at >= good_at
        assert watcher.last_good_at == good_at
        other = bcrypt.hashpw(b"new", bcrypt.gensalt(rounds=4)).decode()
        write_config(path.parent, {"basic_auth_users": {"p": other}})
        assert watcher.check() is True
    errors = [e["error"] for e in events(logs, "web_config_reload_failed")]
    assert len(errors) == 2
    assert "is not valid YAML" in errors[0]
    assert "basic_auth_users.p: is not a bcrypt hash" in errors[1]
    assert watcher.current().tls is None
    assert not watcher.current().authorized(basic("p", PASSWORD))
    assert watcher.current().authorized(basic("p", b"new"))
    assert watcher.last_good_at > good_at


def test_a_named_file_that_appears_later_is_taken(
    served: tuple[Path, WebConfigWatcher], tls_dir: Path, pki: Pki
) -> None:
    """A web-config that names a certificate not written yet fails; the certificate's
    arrival is noticed (the files a failed version names are watched too)."""
    _, watcher = served
    write_config(tls_dir, {"tls_server_config": {"cert_file": "next.crt", "key_file": "next.key"}})
    assert watcher.check() is False
    assert watcher.check() is None
    renewed = issue(pki.ca, "localhost")
    renewed.write(tls_dir, "next")
    assert watcher.check() is True
    assert presented(watcher, pki) == renewed.der
    assert not watcher.current().auth_required


def test_a_secret_volume_update_is_taken(tmp_path: Path, pki: Pki) -> None:
    """A Kubernetes Secret volume swaps a ``..data`` link to a new directory: the
    web-config path (a link through it) then reads the new files."""

    def version(name: str, issued: Issued) -> None:
        directory = tmp_path / name
        directory.mkdir()
        issued.write(directory, "tls")
        write_config(
            directory, {"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"}}
        )

    version("..v1", pki.server)
    (tmp_path / "..data").symlink_to("..v1")
    for name in ("web-config.yml", "tls.crt", "tls.key"):
        (tmp_path / name).symlink_to(f"..data/{name}")
    watcher = WebConfigWatcher(str(tmp_path / "web-config.yml"))
    assert presented(watcher, pki) == pki.server.der

    renewed = issue(pki.ca, "localhost")
    version("..v2", renewed)
    (tmp_path / "..data_tmp").symlink_to("..v2")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert watcher.check() is True
    assert presented(watcher, pki) == renewed.der


def test_reload_reads_now(served: tuple[Path, WebConfigWatcher]) -> None:
    """reload() (SIGHUP) reads the file whether or not it changed, and logs each outcome,
    a repeated failure included."""
    path, watcher = served
    first = watcher.current()
    with capture_logs() as logs:
        assert watcher.reload() is True
        assert watcher.current() is first  # the same bytes: the same configuration
        replace(path, path.read_bytes() + b"# a comment\n")
        assert watcher.reload() is True
        assert watcher.current() is not first
        replace(path, b"nonsense: 1\n")
        assert watcher.reload() is False
        assert watcher.reload() is False
    assert len(events(logs, "web_config_unchanged")) == 1
    assert len(events(logs, "web_config_reloaded")) == 1
    assert len(events(logs, "web_config_reload_failed")) == 2
    assert "nonsense: unknown key" in events(logs, "web_config_reload_failed")[0]["error"]


def test_a_reload_that_changes_nothing_keeps_the_remembered_logins(
    served: tuple[Path, WebConfigWatcher], tls_dir: Path, pki: Pki
) -> None:
    """SIGHUP with the same file and certificates: web_config_unchanged, not reloaded,
    and a scraper's remembered login stays remembered; a renewed certificate is a
    change even when the web-config file is the same."""
    _, watcher = served
    login = basic("p", PASSWORD)
    assert watcher.current().authorized(login)
    with capture_logs() as logs:
        watcher.reload()
        assert watcher.current().cached(login)
        renewed = issue(pki.ca, "localhost")
        replace(tls_dir / "server.crt", renewed.cert_pem)
        replace(tls_dir / "server.key", renewed.key_pem)
        watcher.reload()
    assert [e["event"] for e in logs] == ["web_config_unchanged", "web_config_reloaded"]
    assert presented(watcher, pki) == renewed.der


def test_a_header_refused_on_reload_keeps_the_last_good(
    served: tuple[Path, WebConfigWatcher],
) -> None:
    """A header value beyond ASCII in a new version: refused naming the key, and the
    configuration in force stays."""
    path, watcher = served
    first = watcher.current()
    text = path.read_text() + 'http_server_config:\n  headers: {X-XSS-Protection: "\u00e9"}\n'
    replace(path, text.encode())
    with capture_logs() as logs:
        assert watcher.reload() is False
    assert watcher.current() is first
    (failed,) = events(logs, "web_config_reload_failed")
    assert "http_server_config.headers.X-XSS-Protection: holds 'é'" in failed["error"]


def test_the_thread_notices_changes(
    served: tuple[Path, WebConfigWatcher], tls_dir: Path, pki: Pki
) -> None:
    """start() checks in a daemon thread until stop()."""
    _, watcher = served
    watcher.start()
    watcher.start()  # idempotent
    try:
        renewed = issue(pki.ca, "localhost")
        replace(tls_dir / "server.crt", renewed.cert_pem)
        replace(tls_dir / "server.key", renewed.key_pem)
        wait_until(lambda: presented(watcher, pki) == renewed.der)
        threads = [t for t in threading.enumerate() if t.name == "web-config-watcher"]
        assert len(threads) == 1
        assert threads[0].daemon
    finally:
        watcher.stop()
    assert not any(t.name == "web-config-watcher" for t in threading.enumerate())


def test_the_provider_is_the_bound_method(served: tuple[Path, WebConfigWatcher]) -> None:
    """``watcher.current`` is what the web server takes as its WebConfigProvider."""
    _, watcher = served
    provider: Callable[[], WebConfig | None] = watcher.current
    assert provider() is watcher.current()
