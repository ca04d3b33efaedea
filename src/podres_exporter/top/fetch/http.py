"""One HTTP GET for the sources that read over the network, and their URL checks.

A GET has a total deadline (:attr:`HttpSettings.timeout_s`: connecting, the headers and
the whole body together, whatever pace the peer keeps) and a size cap on the body
(:attr:`HttpSettings.max_bytes`, checked as it arrives): an answer that trickles or never
ends costs at most that time and that memory. Every failure becomes a FetchError naming
the URL without its password (:func:`shown_url`): exit 2 when nothing usable answers at
the address or a flag must change (refused, unknown host, no answer in time, a TLS
certificate not trusted, credentials refused, HTTP 404 for a path that is not there), 1
when the peer answered and the answer is unusable (another HTTP error, a malformed or
oversized or unfinished answer).

Basic auth comes from ``user:password@`` in the URL or from ``--auth-user`` with
``--auth-password-file``; ``--ca-file`` names the CAs to trust for ``https://`` and
``--tls-server-name`` the name the certificate must carry when the URL's host is not it.
"""

from __future__ import annotations

import base64
import contextlib
import http
import http.client
import re
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from podres_exporter.core.errors import ConfigError, FetchError
from podres_exporter.top.fetch.source import fetch_error

HTTP_TIMEOUT_S = 10.0
"""Default total deadline of one GET (``--timeout``)."""
MAX_ANSWER_BYTES = 32 * 2**20
"""Default cap on one answer's body (``--max-answer-size``): a 5,000-pod node's
``/metrics`` is about 7 MiB; parsing costs a few times the body in memory."""
_CHUNK = 64 * 1024
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")  # spaces and controls: no URL holds them
_CREDENTIALS = " (credentials: user:password@ in the URL, or --auth-user and --auth-password-file)"
# The HTTP statuses that a flag fixes, and the hint naming it: refused credentials, and a
# path that is not there (a URL to fix: a typo, or a prefix the server is not served under).
_FLAG_TO_FIX = {
    401: _CREDENTIALS,
    403: _CREDENTIALS,
    404: " (check the URL's path)",
}
# A host as a URL may name it: a DNS name, an IPv4 address, or an IPv6 one in brackets.
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+(%[A-Za-z0-9._-]+)?\]")


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """How top reaches an exporter or Prometheus (the flags of both network sources)."""

    timeout_s: float = HTTP_TIMEOUT_S
    max_bytes: int = MAX_ANSWER_BYTES
    ca_file: str = ""
    server_name: str = ""
    username: str = ""
    password: str = field(default="", repr=False)


def shown_url(url: str) -> str:
    """``url`` as messages show it: any ``user:password@`` reduced to ``user:***@``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, tail = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}{slash}{tail}"


def http_url(url: str, flag: str) -> tuple[urllib.parse.SplitResult, HttpSettings]:
    """``url`` (``http://`` assumed when it names no scheme) split without its credentials,
    and those credentials (empty when it has none); ConfigError naming ``flag`` and the
    URL (its password hidden) unless it is http(s) with a usable host and port."""
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    bad = ConfigError(f"{flag} {shown_url(url)!r}: expected http(s)://HOST[:PORT][/PATH]")
    if _UNSAFE.search(raw):
        raise bad
    try:
        parts = urllib.parse.urlsplit(raw)
        port = parts.port
    except ValueError:  # an unclosed IPv6 bracket, a port that is no number or out of range
        raise bad from None
    userinfo, _, host = parts.netloc.rpartition("@")
    hostname = host.rsplit(":", 1)[0] if port is not None or host.endswith(":") else host
    if parts.scheme not in ("http", "https") or not _HOST.fullmatch(hostname):
        raise bad
    user, _, password = userinfo.partition(":")
    creds = HttpSettings(
        username=urllib.parse.unquote(user), password=urllib.parse.unquote(password)
    )
    return parts._replace(netloc=host), creds


def tls_context(settings: HttpSettings) -> ssl.SSLContext:
    """The context of ``https://`` GETs: the system's CAs, or only ``--ca-file``'s."""
    try:
        return ssl.create_default_context(cafile=settings.ca_file or None)
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"--ca-file {settings.ca_file!r}: {err}") from None


class _Deadline:
    """Shuts a connection's socket when its time is up, whatever call is blocked on it."""

    def __init__(self, seconds: float) -> None:
        # Kept here: the connection lets go of its socket when the answer says it closes,
        # and the answer still reads from it.
        self.sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._done = False
        self.passed = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` at the deadline (at once if it has passed)."""
        with self._lock:
            self.sock = sock
            if self.passed:
                self._shut()

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.passed = True
            self._shut()

    def _shut(self) -> None:
        if self.sock is not None:
            # The plain socket's shutdown: it ends a TLS read blocked in another thread.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(self.sock, socket.SHUT_RDWR)

    def end(self) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()


class _HttpsConnection(http.client.HTTPSConnection):
    """An HTTPS connection whose certificate must name ``name`` (``--tls-server-name``),
    which it also sends as SNI; the URL's host otherwise."""

    def __init__(
        self, host: str, port: int | None, *, timeout: float, context: ssl.SSLContext, name: str
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls = context
        self._name = name
        self.on_connect: Callable[[socket.socket], None] | None = None

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        if self.on_connect is not None:
            self.on_connect(self.sock)
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._name)


class HttpClient:
    """GETs to one peer, with its deadline, size cap, TLS trust and credentials."""

    def __init__(self, settings: HttpSettings, *, https: bool) -> None:
        self.settings = settings
        self._context = tls_context(settings) if https else None
        auth = None
        if settings.username or settings.password:
            pair = f"{settings.username}:{settings.password}".encode()
            auth = "Basic " + base64.b64encode(pair).decode()
        self._headers = {"Accept": "text/plain, application/json", "Connection": "close"}
        if auth:
            self._headers["Authorization"] = auth

    def _connection(self, parts: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        host, port, timeout = parts.hostname or "", parts.port, self.settings.timeout_s
        if self._context is None:
            return http.client.HTTPConnection(host, port, timeout=timeout)
        name = self.settings.server_name or host
        return _HttpsConnection(host, port, timeout=timeout, context=self._context, name=name)

    def get(self, url: str, what: str) -> bytes:
        """GET ``url`` (no credentials in it); FetchError naming ``what`` (e.g. ``the
        exporter at URL (--exporter)``, its URL shown without password)."""
        parts = urllib.parse.urlsplit(url)
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        conn = self._connection(parts)
        deadline = _Deadline(self.settings.timeout_s)
        answered = False
        resp: http.client.HTTPResponse | None = None
        try:
            if isinstance(conn, _HttpsConnection):
                conn.on_connect = deadline.watch  # the handshake within the deadline too
            conn.connect()
            deadline.watch(conn.sock)
            conn.request("GET", target, headers=self._headers)
            resp = conn.getresponse()
            answered = True
            body = self._body(resp, url, what)
        except (FetchError, http.client.HTTPException, OSError, ValueError) as err:
            if isinstance(err, FetchError) and not deadline.passed:
                raise
            raise self._failure(err, what, answered=answered, passed=deadline.passed) from None
        finally:
            deadline.end()
            if resp is not None:  # an answer refused unread holds the socket open
                resp.close()
            conn.close()
        if deadline.passed:  # the socket shut at the deadline reads as the answer's end
            raise self._failure(TimeoutError(), what, answered=True, passed=True)
        return body

    def _failure(self, err: Exception, what: str, *, answered: bool, passed: bool) -> FetchError:
        limit = f"{self.settings.timeout_s:g} s (--timeout)"
        if passed or isinstance(err, TimeoutError):
            if answered:
                return fetch_error(f"{what} did not finish its answer within {limit}", exit_code=1)
            return fetch_error(f"cannot reach {what}: no answer within {limit}", exit_code=2)
        if isinstance(err, ssl.SSLCertVerificationError):
            return fetch_error(
                f"cannot reach {what}: {err.verify_message} (--ca-file, --tls-server-name)",
                exit_code=2,
            )
        if isinstance(err, http.client.HTTPException | ValueError) or answered:
            reason = type(err).__name__ if not str(err) else f"{type(err).__name__}: {err}"
            return fetch_error(f"{what} answered no valid HTTP: {reason[:200]}", exit_code=1)
        return fetch_error(
            f"cannot reach {what}: {getattr(err, 'strerror', None) or err}", exit_code=2
        )

    def _body(self, resp: http.client.HTTPResponse, url: str, what: str) -> bytes:
        cap = self.settings.max_bytes
        too_large = fetch_error(
            f"{what} answered more than {cap} bytes (--max-answer-size)", exit_code=1
        )
        if resp.length is not None and resp.length > cap:
            raise too_large
        if resp.status != http.HTTPStatus.OK:
            detail = resp.read(300).decode(errors="replace").strip()
            # A flag fixes these: exit 2, naming it (the credentials, or the URL's path).
            hint = _FLAG_TO_FIX.get(resp.status)
            raise fetch_error(
                f"{what} answered HTTP {resp.status} for {shown_url(url)}: "
                f"{detail or resp.reason}{hint or ''}",
                exit_code=1 if hint is None else 2,
            )
        chunks: list[bytes] = []
        size = 0
        while chunk := resp.read(_CHUNK):
            size += len(chunk)
            if size > cap:
                raise too_large
            chunks.append(chunk)
        if resp.length:  # the connection closed before Content-Length bytes came
            raise fetch_error(
                f"{what} answered a short body: {resp.length} bytes missing", exit_code=1
            )
        return b"".join(chunks)


def open_client(
    url: str, flag: str, settings: HttpSettings
) -> tuple[urllib.parse.SplitResult, HttpClient]:
    """``url`` checked and split without its credentials, and a client for it with those
    credentials or ``settings``' (ConfigError when both name some)."""
    parts, in_url = http_url(url, flag)
    if in_url.username or in_url.password:
        if settings.username or settings.password:
            raise ConfigError(
                f"{flag} {shown_url(url)!r} names credentials, and so does --auth-user: give one"
            )
        settings = replace(settings, username=in_url.username, password=in_url.password)
    return parts, HttpClient(settings, https=parts.scheme == "https")


MAX_PASSWORD_BYTES = 4096


def read_password(path: str) -> str:
    """The password in the file ``--auth-password-file`` names (one trailing line break
    dropped); ConfigError naming the flag and the file, never its content."""
    where = f"--auth-password-file {path!r}"
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PASSWORD_BYTES + 1)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the path
        raise ConfigError(f"{where}: {getattr(err, 'strerror', None) or err}") from None
    if len(data) > MAX_PASSWORD_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_PASSWORD_BYTES} bytes: no password file is")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    return text.removesuffix("\n").removesuffix("\r")
