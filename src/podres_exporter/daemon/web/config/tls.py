"""``tls_server_config``: the section checked against what Python's ``ssl`` can do the way
Go's ``crypto/tls`` does (what it cannot is refused by name, never approximated), and the
server's SSL context built from it (certificate, key and CA read once, in memory)."""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from podres_exporter.daemon.web.config.source import Source

TLS_KEYS = (
    "cert",
    "key",
    "client_ca",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
)

# The keys whose value enables TLS, as the toolkit's TLSConfig.IsEnabled has them.
_TLS_ENABLING = ("cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file")

_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

# Go's tls.CipherSuites() (the ones it calls secure), by IANA name, to OpenSSL's names.
# TLS 1.3 suites map to None: neither Go nor OpenSSL through Python lets them be chosen.
_CIPHERS: dict[str, str | None] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}

# The TLS 1.2 suites served when the file names none: forward secret and AEAD, each one
# that the file may name (OpenSSL's own default adds CBC suites with SHA-2 MACs, such as
# ECDHE-RSA-AES256-SHA384, that are none of Go's names and that the file cannot name).
DEFAULT_CIPHERS = (
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
)

# Go's curve names (the toolkit's table) to OpenSSL's.
_CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}

# client_auth_type: Go's name -> what Python's ssl does for it, or why it cannot.
_CLIENT_AUTH: dict[str, ssl.VerifyMode | str] = {
    "NoClientCert": ssl.CERT_NONE,
    # Go asks for a certificate and never looks at it: the same clients get in as with
    # NoClientCert, which is what Python's ssl can do (it verifies whatever it asks for).
    "RequestClientCert": ssl.CERT_NONE,
    "RequireAnyClientCert": "needs a client certificate without verifying it, which "
    "Python's ssl cannot do; use RequireAndVerifyClientCert with client_ca_file",
    "RequireClientCert": "(RequireAnyClientCert's old name) needs a client certificate "
    "without verifying it, which Python's ssl cannot do; use RequireAndVerifyClientCert "
    "with client_ca_file",
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


@dataclass(frozen=True, slots=True)
class Pem:
    """PEM text, from a file or inline, and the key that gave it."""

    key: str  # tls_server_config.cert_file, or .cert when inline
    path: str | None  # None: inline
    inline: str | None


@dataclass(frozen=True, slots=True)
class TlsSpec:
    cert: Pem
    key: Pem
    client_ca: Pem | None
    verify: ssl.VerifyMode
    min_version: ssl.TLSVersion
    max_version: ssl.TLSVersion
    ciphers: tuple[str, ...]  # OpenSSL names; empty: OpenSSL's defaults
    prefer_server: bool
    curve: str | None  # OpenSSL name


_TLS = "tls_server_config"


def parse_tls(source: Source, value: object) -> TlsSpec | None:
    tls = source.mapping(value, _TLS, TLS_KEYS)
    texts = {name: _text(source, tls, name) for name in (*_TLS_ENABLING, "client_auth_type")}
    if not any(texts.values()):
        if tls:
            given = ", ".join(sorted(tls))
            source.fail(_TLS, f"sets {given} but no certificate: add cert_file and key_file")
        return None
    cert = _pem(source, texts, "cert_file", "cert")
    key = _pem(source, texts, "key_file", "key")
    client_ca = _pem(source, texts, "client_ca_file", "client_ca")
    if cert is None:
        source.fail(f"{_TLS}.cert_file", "is missing: TLS needs a certificate (or cert)")
    if key is None:
        source.fail(f"{_TLS}.key_file", "is missing: TLS needs a private key (or key)")
    if tls.get("client_allowed_sans") is not None:
        source.fail(
            f"{_TLS}.client_allowed_sans",
            "is not supported by podres (Python's ssl cannot check a client certificate's "
            "names during the handshake): have the client CA issue only to allowed clients",
        )
    min_version = _version(source, tls, "min_version", "TLS12")
    max_version = _version(source, tls, "max_version", "TLS13")
    if min_version > max_version:
        source.fail(f"{_TLS}.min_version", "is above max_version")
    prefer = tls.get("prefer_server_cipher_suites", True)
    return TlsSpec(
        cert=cert,
        key=key,
        client_ca=client_ca,
        verify=_client_auth(source, texts["client_auth_type"], client_ca),
        min_version=min_version,
        max_version=max_version,
        ciphers=_ciphers(source, tls.get("cipher_suites"), min_version),
        prefer_server=source.boolean(prefer, f"{_TLS}.prefer_server_cipher_suites"),
        curve=_curve(source, tls.get("curve_preferences")),
    )


def _text(source: Source, tls: dict[str, object], name: str) -> str | None:
    """A string key of tls_server_config; "" is unset, as in the toolkit."""
    if tls.get(name) is None:
        return None
    return source.string(tls[name], f"{_TLS}.{name}") or None


def _pem(
    source: Source, texts: dict[str, str | None], file_key: str, inline_key: str
) -> Pem | None:
    """A PEM given by file or inline (not both); a relative path is relative to the
    web-config file's directory, as in the toolkit."""
    path, inline = texts[file_key], texts[inline_key]
    if path and inline:
        source.fail(f"{_TLS}.{inline_key}", f"is given with {file_key}: give one of the two")
    if path:
        if not os.path.isabs(path):
            path = os.path.join(os.path.dirname(source.path), path)
        return Pem(f"{_TLS}.{file_key}", path, None)
    if inline:
        return Pem(f"{_TLS}.{inline_key}", None, inline)
    return None


def _client_auth(source: Source, given: str | None, client_ca: Pem | None) -> ssl.VerifyMode:
    key = f"{_TLS}.client_auth_type"
    auth = given or "NoClientCert"
    verify = _CLIENT_AUTH.get(auth)
    if verify is None:
        source.fail(key, f"{auth!r} is not one of {', '.join(_CLIENT_AUTH)}")
    if isinstance(verify, str):
        source.fail(key, f"{auth} {verify}")
    if verify != ssl.CERT_NONE and client_ca is None:
        source.fail(f"{_TLS}.client_ca_file", f"is needed with client_auth_type {auth}")
    if verify == ssl.CERT_NONE and client_ca is not None:
        source.fail(
            client_ca.key,
            f"is given but client_auth_type {auth} checks no client certificate: set "
            "client_auth_type: RequireAndVerifyClientCert (or VerifyClientCertIfGiven)",
        )
    return verify


def _version(source: Source, tls: dict[str, object], name: str, default: str) -> ssl.TLSVersion:
    given = tls.get(name)
    label = default if given is None else source.string(given, f"{_TLS}.{name}")
    if label not in _VERSIONS:
        source.fail(f"{_TLS}.{name}", f"{label!r} is not one of {', '.join(_VERSIONS)}")
    return _VERSIONS[label]


def _ciphers(source: Source, value: object, min_version: ssl.TLSVersion) -> tuple[str, ...]:
    """OpenSSL's names of the TLS 1.2 suites named (Go's names; TLS 1.3's are accepted
    and have no effect, as in Go)."""
    key = f"{_TLS}.cipher_suites"
    named = source.strings(value, key)
    ciphers: list[str] = []
    for i, name in enumerate(named):
        if name not in _CIPHERS:
            source.fail(
                f"{key}[{i}]", f"{name!r} is not one of Go's cipher suites: {', '.join(_CIPHERS)}"
            )
        openssl = _CIPHERS[name]
        if openssl is not None:
            ciphers.append(openssl)
    if named and not ciphers and min_version < ssl.TLSVersion.TLSv1_3:
        source.fail(
            key,
            "names TLS 1.3 suites only, which cannot be chosen: add TLS 1.2 suites, or "
            "set min_version: TLS13",
        )
    return tuple(ciphers)


def _curve(source: Source, value: object) -> str | None:
    """OpenSSL's name of the one curve named, if any."""
    key = f"{_TLS}.curve_preferences"
    curves = source.strings(value, key)
    for i, name in enumerate(curves):
        if name not in _CURVES:
            source.fail(f"{key}[{i}]", f"{name!r} is not one of {', '.join(_CURVES)}")
    if len(curves) > 1:
        source.fail(
            key,
            "lists several curves, but Python's ssl can set only one: list one, or "
            "leave the key out for OpenSSL's defaults",
        )
    return _CURVES[curves[0]] if curves else None


def _pem_bytes(source: Source, pem: Pem) -> bytes:
    if pem.path is not None:
        return source.read(pem.path, pem.key)
    assert pem.inline is not None
    return pem.inline.encode("utf-8")


def context(source: Source, spec: TlsSpec) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():
        # TLS10 and TLS11 are deprecated in Python; the file may still name them.
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = spec.min_version
        context.maximum_version = spec.max_version
    _load_chain(source, context, spec.cert, spec.key)
    if spec.client_ca is not None:
        _load_ca(source, context, spec.client_ca)
    # A certificate is asked for at the handshake and verified when given, but never
    # required there: the kubelet's HTTPS probes send none. RequireAndVerifyClientCert
    # is enforced per request instead (WebConfig.client_cert_required), outside the
    # probes.
    context.verify_mode = ssl.CERT_OPTIONAL if spec.verify == ssl.CERT_REQUIRED else spec.verify
    try:
        context.set_ciphers(":".join(spec.ciphers or DEFAULT_CIPHERS))
    except ssl.SSLError:
        source.fail(f"{_TLS}.cipher_suites", "none of them is available in this OpenSSL")
    if spec.prefer_server:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if spec.curve is not None:
        try:
            context.set_ecdh_curve(spec.curve)
        except (ssl.SSLError, ValueError):
            source.fail(f"{_TLS}.curve_preferences", f"this OpenSSL has no {spec.curve}")
    # The server speaks HTTP/1.1 only: say so to clients that offer HTTP/2.
    context.set_alpn_protocols(["http/1.1"])
    return context


def _load_chain(source: Source, context: ssl.SSLContext, cert_pem: Pem, key_pem: Pem) -> None:
    """The certificate (chain) and its key, each read once, checked as a pair."""
    cert = _pem_bytes(source, cert_pem)
    key = _pem_bytes(source, key_pem)
    if b"-----BEGIN CERTIFICATE-----" not in cert:
        source.fail(cert_pem.key, _where(cert_pem) + "holds no PEM certificate")
    if b"PRIVATE KEY-----" not in key:
        source.fail(key_pem.key, _where(key_pem) + "holds no PEM private key")
    encrypted = _where(key_pem) + "is encrypted: give an unencrypted key"
    if b"ENCRYPTED" in key:
        source.fail(key_pem.key, encrypted)
    try:
        with _memory_files(cert, key) as (cert_path, key_path):
            context.load_cert_chain(cert_path, key_path, password=_no_password)
    except _PasswordAsked:
        source.fail(key_pem.key, encrypted)
    except ssl.SSLError as err:
        if err.reason == "KEY_VALUES_MISMATCH":
            mismatch = f"does not match the certificate of {cert_pem.key}"
            source.fail(key_pem.key, _where(key_pem) + mismatch)
        problem = f"cannot be loaded with its key: {err.reason or err}"
        source.fail(cert_pem.key, _where(cert_pem) + problem)


def _load_ca(source: Source, context: ssl.SSLContext, ca_pem: Pem) -> None:
    ca = _pem_bytes(source, ca_pem)
    if b"-----BEGIN CERTIFICATE-----" not in ca:
        source.fail(ca_pem.key, _where(ca_pem) + "holds no PEM certificate")
    try:
        context.load_verify_locations(cadata=ca.decode("utf-8", errors="replace"))
    except (ssl.SSLError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        source.fail(ca_pem.key, _where(ca_pem) + f"cannot be loaded: {reason}")


def _where(pem: Pem) -> str:
    return f"{pem.path} " if pem.path is not None else ""


class _PasswordAsked(Exception):
    """OpenSSL asked for a passphrase: the key is encrypted."""


def _no_password() -> bytes:
    raise _PasswordAsked


@contextlib.contextmanager
def _memory_files(*contents: bytes) -> Iterator[list[str]]:
    """Paths that read ``contents`` (``load_cert_chain`` takes paths only): memory files
    on Linux, so that neither an inline key nor a copy ever reaches a disk and a
    read-only root filesystem is no obstacle; else a private temporary directory."""
    if hasattr(os, "memfd_create"):
        fds: list[int] = []
        try:
            for i, data in enumerate(contents):
                fd = os.memfd_create(f"podres-web-config-{i}", os.MFD_CLOEXEC)
                fds.append(fd)
                os.write(fd, data)
            yield [f"/proc/self/fd/{fd}" for fd in fds]
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="podres-web-config-") as directory:
        paths = []
        for i, data in enumerate(contents):
            path = os.path.join(directory, str(i))
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
            paths.append(path)
        yield paths
