"""``--web.config.file``: TLS, basic auth and response headers for the HTTP endpoints.

The file has the format every Prometheus exporter reads (the exporter-toolkit's
web-config): ``tls_server_config``, ``basic_auth_users`` (bcrypt hashes) and
``http_server_config``. :class:`WebConfig` is one loaded file; the web server asks its
provider for the current one at each connection (TLS) and request (auth, headers), so a
file re-read takes effect without a restart. :func:`load_web_config` reads a file;
:class:`WebConfigWatcher` keeps the last good one in force and re-reads the file (and the
certificate, key and CA files it names) when they change.

What Python's ``ssl`` cannot do the way Go's ``crypto/tls`` does is refused by name,
never approximated: ``client_auth_type: RequireAnyClientCert`` (a certificate required
but not verified), ``client_allowed_sans``, more than one ``curve_preferences`` entry and
``rate_limit``. docs/security.md has the whole table.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import functools
import hashlib
import hmac
import os
import re
import ssl
import stat
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

import bcrypt
import structlog
import yaml

from podres_exporter.core.errors import ConfigError

__all__ = [
    "BCRYPT_MAX_PASSWORD_BYTES",
    "WebConfig",
    "WebConfigProvider",
    "WebConfigWatcher",
    "load_web_config",
]

log = structlog.get_logger(__name__)

BCRYPT_MAX_PASSWORD_BYTES = 72
"""bcrypt reads at most 72 bytes; a longer password is refused (401), never truncated."""


@functools.cache
def _dummy_hash(cost: int) -> bytes:
    """Checked against when the user is unknown, so that an unknown user costs what a
    known one does and the timing does not tell which names exist (the cost of the
    configured hashes). Made on first use: loading a file costs no bcrypt."""
    return bcrypt.hashpw(b"podres-no-such-user", bcrypt.gensalt(rounds=cost))


_CACHE_SIZE = 64  # successful checks remembered: a scrape every 15 s must not cost a bcrypt
_DEFAULT_COST = 10


@dataclass(frozen=True, slots=True, eq=False)
class WebConfig:
    """One loaded web-config file.

    ``tls``: the server context (None: plain HTTP). ``users``: user name to bcrypt
    hash (empty: no authentication). ``headers``: added to every response.
    """

    tls: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict, repr=False)  # no hash in a log
    headers: tuple[tuple[str, str], ...] = ()
    header_bytes: bytes = field(init=False, repr=False)
    """``headers`` as they go on the wire (``Name: value\\r\\n`` each), encoded once here:
    a value that cannot be sent (not printable ASCII) fails the construction
    (ValueError), never every response."""
    _ok: OrderedDict[bytes, None] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # One bcrypt at a time, as the exporter-toolkit does: a flood of wrong passwords costs
    # one core at most (the remembered good ones do not wait for it).
    _work: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        lines = []
        for name, value in self.headers:
            if not _TOKEN.fullmatch(name) or _UNPRINTABLE.search(value):
                raise ValueError(f"header {name!r} is not a token with a printable ASCII value")
            lines.append(f"{name}: {value}\r\n")
        object.__setattr__(self, "header_bytes", "".join(lines).encode("ascii"))

    @property
    def auth_required(self) -> bool:
        return bool(self.users)

    def cached(self, authorization: str | None) -> bool:
        """Whether ``authorization`` passed a bcrypt check lately (or no user is
        configured): a parse, one sha256 and one lookup, cheap enough for the event
        loop, so that a remembered scraper never waits behind bcrypt checks."""
        if not self.users:
            return True
        credentials = _basic_credentials(authorization)
        if credentials is None:
            return False
        key = self._key(*credentials)
        with self._lock:
            if key in self._ok:
                self._ok.move_to_end(key)
                return True
        return False

    @staticmethod
    def well_formed(authorization: str | None) -> bool:
        """Whether ``authorization`` is ``Basic`` base64 ``user:password``. One that is
        not is refused without a bcrypt check, as the exporter-toolkit does: the timing
        then tells only what the sender knows already, the header's syntax."""
        return _basic_credentials(authorization) is not None

    def authorized(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value lets the request in.

        True when no user is configured. Otherwise only ``Basic`` credentials of a
        configured user whose password matches its bcrypt hash pass. A malformed
        header is refused at once (see :meth:`well_formed`); an unknown user and a
        password over 72 bytes are refused after the same bcrypt work as a wrong
        password, so the answer's timing says nothing about names or passwords.
        Successful checks are remembered (a digest of user, password and hash), so a
        scraper does not pay a bcrypt per scrape. Never raises.
        """
        if not self.users:
            return True
        credentials = _basic_credentials(authorization)
        if credentials is None:
            return False
        if self.cached(authorization):
            return True
        user, password = credentials
        hashed = self._hash_of(user)
        key = self._key(user, password)
        with self._work:
            ok = _check(password, hashed if hashed is not None else _dummy_hash(self._cost()))
        ok = ok and hashed is not None
        if ok:
            with self._lock:
                self._ok[key] = None
                while len(self._ok) > _CACHE_SIZE:
                    self._ok.popitem(last=False)
        return ok

    def _key(self, user: str, password: bytes) -> bytes:
        """What a successful check is remembered by: a digest of user, password and hash
        (a changed hash is a different key)."""
        hashed = self.users.get(user, b"")
        return hashlib.sha256(b"\0".join((user.encode(), password, hashed))).digest()

    def _hash_of(self, user: str) -> bytes | None:
        """The hash of ``user``, comparing every configured name in constant time."""
        found: bytes | None = None
        wanted = user.encode()
        for name, hashed in self.users.items():
            if hmac.compare_digest(name.encode(), wanted):
                found = hashed
        return found

    def _cost(self) -> int:
        """The cost of the first configured hash (``$2b$NN$...``), for the dummy check."""
        for hashed in self.users.values():
            with contextlib.suppress(ValueError):
                return int(hashed[4:6])
        return _DEFAULT_COST


WebConfigProvider = Callable[[], WebConfig | None]
"""What the web server calls for the configuration in force (None: plain, open)."""


def _basic_credentials(header: str | None) -> tuple[str, bytes] | None:
    """``(user, password)`` of a ``Basic`` Authorization header; None when malformed."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


def _check(password: bytes, hashed: bytes) -> bool:
    """bcrypt's verdict; False (after the same work) for a password bcrypt refuses."""
    too_long = len(password) > BCRYPT_MAX_PASSWORD_BYTES
    try:
        ok = bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD_BYTES], hashed)
    except ValueError:  # a malformed hash: load refuses those, this is a last guard
        return False
    return ok and not too_long


# ------------------------------------------------------------------------ the file format

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_TLS_KEYS = (
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
_HTTP_KEYS = ("http2", "headers")

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

# The response headers the toolkit lets a web-config set, with their allowed values
# (None: any). Its list is closed on purpose, for the same headers across exporters.
_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}

# A header value goes on the wire as it is: printable ASCII and tab only (no line break
# to inject a header, nothing a latin-1 or ASCII encoding could fail on).
_UNPRINTABLE = re.compile(r"[^\t\x20-\x7e]")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 5.6.2
_BCRYPT = re.compile(rb"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


class _Loader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses a key given twice in one mapping, as the toolkit's
    strict unmarshal does (the second ``alice:`` would silently replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            with contextlib.suppress(TypeError):  # unhashable: the constructor says so
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found the key {key!r} twice",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "a boolean"),  # before int: a bool is an int
    ((int, float), "a number"),
    (str, "a string"),
    (list, "a list"),
    (dict, "a mapping"),
    (dt.date, "a date"),
)


def _kind(value: object) -> str:
    """What a YAML value is, in the words of an error message."""
    if value is None:
        return "empty"
    for types, words in _KINDS:
        if isinstance(value, types):
            return words
    return type(value).__name__


_MAX_FILE_BYTES = 1 << 20  # a web-config, certificate, key or CA file: 1 MiB at most


@dataclass(frozen=True, slots=True)
class _Source:
    """The file being read, for error messages that name it and the key; ``digest``
    takes in every file read, so that a re-read that changed nothing is told apart."""

    path: str
    digest: Any = field(default_factory=hashlib.sha256, compare=False, repr=False)

    def fail(self, key: str, problem: str) -> NoReturn:
        where = f"{key}: " if key else ""
        raise ConfigError(f"web config {self.path}: {where}{problem}")

    def mapping(self, value: object, key: str, allowed: tuple[str, ...]) -> dict[str, object]:
        """``value`` as a mapping with only ``allowed`` keys (null: empty)."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(key, f"is {_kind(value)}, not a mapping")
        out: dict[str, object] = {}
        for name, item in value.items():
            if not isinstance(name, str):
                self.fail(key, f"the key {name!r} is {_kind(name)}, not a string")
            if name not in allowed:
                inside = f"{key}.{name}" if key else name
                self.fail(inside, f"unknown key (known: {', '.join(allowed)})")
            out[name] = item
        return out

    def string(self, value: object, key: str) -> str:
        if not isinstance(value, str):
            self.fail(key, f"is {_kind(value)}, not a string")
        return value

    def boolean(self, value: object, key: str) -> bool:
        if not isinstance(value, bool):
            self.fail(key, f"is {_kind(value)}, not true or false")
        return value

    def strings(self, value: object, key: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(key, f"is {_kind(value)}, not a list of strings")
        return [self.string(item, f"{key}[{i}]") for i, item in enumerate(value)]

    def read(self, path: str, key: str) -> bytes:
        """The bytes of the regular file ``path`` (1 MiB at most). Opened without
        blocking, so that a FIFO or a device named by mistake is refused, not waited on
        or read forever."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            self._unreadable(path, key, err.strerror or str(err))
        except ValueError as err:  # a NUL byte in the path
            self._unreadable(path, key, str(err))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                self._unreadable(path, key, "not a regular file")
            chunks: list[bytes] = []
            size = 0
            while size <= _MAX_FILE_BYTES:
                chunk = os.read(fd, _MAX_FILE_BYTES + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
        except OSError as err:
            self._unreadable(path, key, err.strerror or str(err))
        finally:
            os.close(fd)
        if len(data) > _MAX_FILE_BYTES:
            self._unreadable(path, key, f"larger than {_MAX_FILE_BYTES} bytes")
        self.digest.update(b"%d:%s\0%d:" % (len(path), path.encode("utf-8", "replace"), len(data)))
        self.digest.update(data)
        return data

    def _unreadable(self, path: str, key: str, reason: str) -> NoReturn:
        shown = path if path.isprintable() else repr(path)  # a NUL byte, a line break
        self.fail(key, f"cannot read {shown}: {reason}" if key else f"cannot be read: {reason}")


@dataclass(frozen=True, slots=True)
class _Pem:
    """PEM text, from a file or inline, and the key that gave it."""

    key: str  # tls_server_config.cert_file, or .cert when inline
    path: str | None  # None: inline
    inline: str | None


@dataclass(frozen=True, slots=True)
class _TlsSpec:
    cert: _Pem
    key: _Pem
    client_ca: _Pem | None
    verify: ssl.VerifyMode
    min_version: ssl.TLSVersion
    max_version: ssl.TLSVersion
    ciphers: tuple[str, ...]  # OpenSSL names; empty: OpenSSL's defaults
    prefer_server: bool
    curve: str | None  # OpenSSL name


@dataclass(frozen=True, slots=True)
class _Spec:
    """A parsed file before any certificate is read: what it says, checked."""

    tls: _TlsSpec | None
    users: dict[str, bytes]
    headers: tuple[tuple[str, str], ...]

    @property
    def files(self) -> tuple[str, ...]:
        """The files it refers to (certificate, key, CA), watched for changes."""
        if self.tls is None:
            return ()
        pems = (self.tls.cert, self.tls.key, self.tls.client_ca)
        return tuple(p.path for p in pems if p is not None and p.path is not None)


def load_web_config(path: str) -> WebConfig:
    """Read a web-config file and everything it names.

    Raises :class:`ConfigError` naming the file and the key for anything wrong: the file
    unreadable, not UTF-8, not YAML, empty; an unknown key or a value of the wrong type;
    a value Python's ``ssl`` cannot honour; a missing or unreadable certificate, key or
    CA file; a key that does not match its certificate; a password that is not a bcrypt
    hash.
    """
    source = _Source(path)
    return _build(source, _parse(source))


def _parse(source: _Source) -> _Spec:
    """The file's content, checked; reads no certificate."""
    raw = source.read(source.path, "")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        source.fail("", f"is not UTF-8 text (byte {raw[err.start]:#04x} at offset {err.start})")
    try:
        document = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as err:
        source.fail("", "is not valid YAML: " + _yaml_problem(err))
    except RecursionError:
        source.fail("", "nests too deeply to be a web config")
    if document is None:
        source.fail(
            "",
            "is empty: give it tls_server_config or basic_auth_users, or leave out "
            "--web.config.file for plain, open HTTP",
        )
    top = source.mapping(document, "", _TOP_KEYS)
    if "rate_limit" in top:
        source.fail("rate_limit", "is not supported by podres: remove it")
    return _Spec(
        tls=_parse_tls(source, top.get("tls_server_config")),
        users=_parse_users(source, top.get("basic_auth_users")),
        headers=_parse_http(source, top.get("http_server_config")),
    )


def _yaml_problem(err: yaml.YAMLError) -> str:
    """Where and what, without pyyaml's snippet of the line: that line may hold a secret
    (an inline key, a hash)."""
    if not isinstance(err, yaml.MarkedYAMLError):
        return " ".join(str(err).split())
    mark = err.problem_mark or err.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = ", ".join(part for part in (err.context, err.problem) if part)
    return where + (what or "cannot be parsed")


_TLS = "tls_server_config"


def _parse_tls(source: _Source, value: object) -> _TlsSpec | None:
    tls = source.mapping(value, _TLS, _TLS_KEYS)
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
    return _TlsSpec(
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


def _text(source: _Source, tls: dict[str, object], name: str) -> str | None:
    """A string key of tls_server_config; "" is unset, as in the toolkit."""
    if tls.get(name) is None:
        return None
    return source.string(tls[name], f"{_TLS}.{name}") or None


def _pem(
    source: _Source, texts: dict[str, str | None], file_key: str, inline_key: str
) -> _Pem | None:
    """A PEM given by file or inline (not both); a relative path is relative to the
    web-config file's directory, as in the toolkit."""
    path, inline = texts[file_key], texts[inline_key]
    if path and inline:
        source.fail(f"{_TLS}.{inline_key}", f"is given with {file_key}: give one of the two")
    if path:
        if not os.path.isabs(path):
            path = os.path.join(os.path.dirname(source.path), path)
        return _Pem(f"{_TLS}.{file_key}", path, None)
    if inline:
        return _Pem(f"{_TLS}.{inline_key}", None, inline)
    return None


def _client_auth(source: _Source, given: str | None, client_ca: _Pem | None) -> ssl.VerifyMode:
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


def _version(source: _Source, tls: dict[str, object], name: str, default: str) -> ssl.TLSVersion:
    given = tls.get(name)
    label = default if given is None else source.string(given, f"{_TLS}.{name}")
    if label not in _VERSIONS:
        source.fail(f"{_TLS}.{name}", f"{label!r} is not one of {', '.join(_VERSIONS)}")
    return _VERSIONS[label]


def _ciphers(source: _Source, value: object, min_version: ssl.TLSVersion) -> tuple[str, ...]:
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


def _curve(source: _Source, value: object) -> str | None:
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


def _parse_users(source: _Source, value: object) -> dict[str, bytes]:
    where = "basic_auth_users"
    if value is None:
        return {}
    if not isinstance(value, dict):
        source.fail(where, f"is {_kind(value)}, not a mapping of user names to bcrypt hashes")
    users: dict[str, bytes] = {}
    for user, hashed in value.items():
        if not isinstance(user, str):
            source.fail(
                where,
                f"the user name {user!r} is {_kind(user)}, not a string: quote it",
            )
        if ":" in user:
            source.fail(f"{where}.{user}", "a user name cannot hold ':' (RFC 7617)")
        if not isinstance(hashed, str):
            source.fail(f"{where}.{user}", f"is {_kind(hashed)}, not a bcrypt hash")
        encoded = hashed.strip().encode("utf-8")
        if not _BCRYPT.fullmatch(encoded):
            source.fail(
                f"{where}.{user}",
                "is not a bcrypt hash ($2a$, $2b$ or $2y$, cost 04 to 31, 60 characters): "
                "make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`",
            )
        users[user] = encoded
    return users


def _parse_http(source: _Source, value: object) -> tuple[tuple[str, str], ...]:
    where = "http_server_config"
    http = source.mapping(value, where, _HTTP_KEYS)
    if "http2" in http:
        # Accepted for files shared with other exporters; podres speaks HTTP/1.1 only,
        # which every HTTP/2 client falls back to (ALPN offers http/1.1 alone).
        source.boolean(http["http2"], f"{where}.http2")
    headers = http.get("headers")
    if headers is None:
        return ()
    if not isinstance(headers, dict):
        source.fail(f"{where}.headers", f"is {_kind(headers)}, not a mapping")
    out: list[tuple[str, str]] = []
    for name, item in headers.items():
        key = f"{where}.headers.{name}"
        if not isinstance(name, str) or name not in _HEADERS:
            source.fail(key, f"cannot be set (only {', '.join(_HEADERS)})")
        text = source.string(item, key) if item is not None else ""
        bad = _UNPRINTABLE.search(text)
        if bad:
            source.fail(
                key,
                f"holds {bad.group()!r} (U+{ord(bad.group()):04X}): a header value must be "
                "printable ASCII",
            )
        allowed = _HEADERS[name]
        if text and allowed is not None and text not in allowed:
            source.fail(key, f"{text!r} is not one of {', '.join(allowed)}")
        if text:  # blank: unset, as the toolkit documents
            out.append((name, text))
    return tuple(out)


# ------------------------------------------------------------------------ certificates


def _build(source: _Source, spec: _Spec) -> WebConfig:
    """The :class:`WebConfig` of a parsed file: reads the certificate, key and CA."""
    tls = _context(source, spec.tls) if spec.tls is not None else None
    return WebConfig(tls=tls, users=spec.users, headers=spec.headers)


def _pem_bytes(source: _Source, pem: _Pem) -> bytes:
    if pem.path is not None:
        return source.read(pem.path, pem.key)
    assert pem.inline is not None
    return pem.inline.encode("utf-8")


def _context(source: _Source, spec: _TlsSpec) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():
        # TLS10 and TLS11 are deprecated in Python; the file may still name them.
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = spec.min_version
        context.maximum_version = spec.max_version
    _load_chain(source, context, spec.cert, spec.key)
    if spec.client_ca is not None:
        _load_ca(source, context, spec.client_ca)
    context.verify_mode = spec.verify
    if spec.ciphers:
        try:
            context.set_ciphers(":".join(spec.ciphers))
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


def _load_chain(source: _Source, context: ssl.SSLContext, cert_pem: _Pem, key_pem: _Pem) -> None:
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


def _load_ca(source: _Source, context: ssl.SSLContext, ca_pem: _Pem) -> None:
    ca = _pem_bytes(source, ca_pem)
    if b"-----BEGIN CERTIFICATE-----" not in ca:
        source.fail(ca_pem.key, _where(ca_pem) + "holds no PEM certificate")
    try:
        context.load_verify_locations(cadata=ca.decode("utf-8", errors="replace"))
    except (ssl.SSLError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        source.fail(ca_pem.key, _where(ca_pem) + f"cannot be loaded: {reason}")


def _where(pem: _Pem) -> str:
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


# ------------------------------------------------------------------------------ reloading

_Stat = tuple[int, int, int, int] | None  # (device, inode, size, mtime_ns); None: missing
_Fingerprint = tuple[tuple[str, _Stat], ...]


def _stat(path: str) -> _Stat:
    """What tells a new version of ``path``: a rename onto it (a new inode, as kubelet's
    Secret volumes do through their ``..data`` link, which ``stat`` follows), a
    rewrite in place (size, mtime)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class WebConfigWatcher:
    """The web-config in force, re-read when its file or a file it names changes.

    Loads at construction (a :class:`ConfigError` then means start-up fails).
    :meth:`current` is the server's :data:`WebConfigProvider`: an attribute read, no
    file I/O. A bad new version (or a certificate caught half-written) leaves the last
    good configuration in force and logs one ``web_config_reload_failed`` (once per
    distinct failure); the next good version is taken and logs ``web_config_reloaded``.
    """

    def __init__(self, path: str, *, interval_s: float = 5.0) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.path = path
        self.interval_s = interval_s
        # Reentrant: reload() may be called from a signal handler that interrupted the
        # main thread inside reload().
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: _Fingerprint = ()
        self._failure: str | None = None
        self._config, self._digest = self._load()
        now = time.time()
        self.last_reload_ok = True
        """Whether the last attempt to read the file succeeded."""
        self.last_reload_at = now
        """When the file was last read (Unix time), whether or not that succeeded."""
        self.last_good_at = now
        """When the configuration in force was read (Unix time)."""
        tls = self._config.tls is not None
        log.info("web_config_loaded", file=path, tls=tls, users=len(self._config.users))

    def current(self) -> WebConfig:
        """The configuration in force."""
        return self._config

    def reload(self) -> bool:
        """Read the file now (SIGHUP); whether the new version is in force. Never raises:
        a failure keeps the last good configuration and is logged."""
        return self._reload(quiet_repeat=False)

    def check(self) -> bool | None:
        """Re-read if the file or a file it names changed: None when nothing changed,
        else whether the new version is in force. What the thread does every tick."""
        with self._lock:
            if all(_stat(path) == seen for path, seen in self._seen):
                return None
            return self._reload(quiet_repeat=True)

    def start(self) -> None:
        """Check every ``interval_s`` in a daemon thread, until :meth:`stop`."""
        with self._lock:
            if self._thread is not None:
                return
            self._stopping.clear()
            self._thread = threading.Thread(
                target=self._run, name="web-config-watcher", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (at most ``timeout`` seconds)."""
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        failing = False
        while not self._stopping.wait(self.interval_s):
            try:
                self.check()
                failing = False
            except Exception as err:  # noqa: BLE001 - the watcher outlives a bug in a check
                if not failing:
                    log.error("web_config_watch_failed", file=self.path, error=repr(err))
                failing = True

    def _load(self) -> tuple[WebConfig, bytes]:
        """Read the file and what it names, noting their identities first (so that a
        change during the read is seen at the next check); the configuration and a
        digest of every byte read."""
        source = _Source(self.path)
        seen: list[tuple[str, _Stat]] = [(self.path, _stat(self.path))]
        self._seen = tuple(seen)
        spec = _parse(source)
        seen += [(path, _stat(path)) for path in spec.files]
        self._seen = tuple(seen)
        config = _build(source, spec)
        return config, source.digest.digest()

    def _reload(self, *, quiet_repeat: bool) -> bool:
        with self._lock:
            self.last_reload_at = time.time()
            try:
                config, digest = self._load()
            except ConfigError as err:
                message = str(err)
                self.last_reload_ok = False
                if not (quiet_repeat and message == self._failure):
                    log.warning("web_config_reload_failed", file=self.path, error=message)
                self._failure = message
                return False
            recovered = self._failure is not None
            self._failure = None
            self.last_reload_ok = True
            self.last_good_at = self.last_reload_at
            if digest == self._digest:
                # The same bytes: the configuration in force stays (and with it the
                # remembered logins); nothing changed, so nothing to announce.
                log.info("web_config_unchanged", file=self.path, recovered=recovered)
                return True
            self._config, self._digest = config, digest
            log.info(
                "web_config_reloaded",
                file=self.path,
                tls=config.tls is not None,
                users=len(config.users),
            )
            return True
