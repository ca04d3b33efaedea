"""The HTTP face of both daemons: ``/metrics``, ``/healthz``, ``/readyz``, ``/`` and 404.

A daemon plugs in a :class:`Site`: the ``/metrics`` body for a format and an encoding,
a health check and a readiness check (each ``(ok, text)``: 200 or 503 with the text as
the body) and the details of its index page. No access log.

``/metrics`` negotiation: OpenMetrics when the ``Accept`` header asks for it (as
prometheus_client decides), the Prometheus text format otherwise; gzip when
``Accept-Encoding`` allows it (:func:`accepts_gzip`).

The server (:class:`WebServer`) is one asyncio event loop in one thread, which holds
every connection, and three small fixed thread pools that run the synchronous parts
(the :class:`Site` callables; the probes and the web-config provider; the bcrypt checks
of basic auth, with a bounded queue: a remembered login never waits for them). A
slow or idle client therefore costs a socket and a few kilobytes, never a thread, and
every resource one client can hold is bounded by :class:`Limits`. TLS, basic auth and
extra response headers come from a :data:`~podres_exporter.daemon.webconfig.WebConfigProvider`,
asked at each connection (TLS) and each request (auth, headers).

With no web config, a new connection's first scrape is answered as it arrives, when its
body is ready on the loop: as the connection is accepted when it came with it (as a
scraper that connects for each scrape sends it), else once the socket is readable,
which the loop watches meanwhile; one read and one write (a large body's cached part
by ``sendfile`` when the connection closes after it, :class:`_BodyFiles`), no task
(``_first_bytes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gzip
import html
import math
import os
import re
import resource
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from email.utils import formatdate
from functools import lru_cache, partial
from http import HTTPStatus
from typing import Protocol

import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics import exposition as om

from podres_exporter.daemon.webconfig import WebConfig, WebConfigProvider

__all__ = [
    "Body",
    "Check",
    "Index",
    "Limits",
    "MetricsBody",
    "Site",
    "WebServer",
    "accepts_gzip",
    "connection_cap",
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


# A response body: its bytes, or pieces of them that are written one after the other
# (a large cached part and a small fresh one need not be joined for each request).
Body = bytes | tuple[bytes, ...]
# An answer's bytes as the buffers of one ``sendmsg``, none copied: its head and its
# body's pieces, or what the kernel has not taken of them yet.
_Pieces = tuple[bytes | memoryview, ...]
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
    """What a daemon serves.

    ``metrics_ready``, when given, answers ``/metrics`` on the event loop itself when it
    can do so at once (a cached body, as bytes or pieces: no rendering, no waiting on a
    lock) and None otherwise, when ``metrics`` answers it from a worker: a scrape of a
    cached body needs no hop between threads, which under many scrapers is most of its
    cost."""

    metrics: MetricsBody
    health: Check
    readiness: Check
    index: Index
    metrics_ready: Callable[..., Body | None] | None = None


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


def _negotiated(accept: str, accept_encoding: str | None) -> tuple[bool, str, bool]:
    """Whether a ``/metrics`` request with these headers gets OpenMetrics, its content
    type, and whether it is gzipped."""
    _, content_type = choose_encoder(accept)
    openmetrics = content_type.startswith("application/openmetrics-text")
    return openmetrics, content_type, accepts_gzip(accept_encoding)


# A scraper sends the same headers every time: the answers for short ones are remembered.
_negotiate = lru_cache(maxsize=64)(_negotiated)


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


# ------------------------------------------------------------------------------ limits


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may hold of the server, and for how long.

    ``max_connections`` (4096): connections open at once. When they are all open, a
    new one takes the place of the connection that has waited longest without a
    request in flight (for its head, or idle between requests), which is closed; only
    when every connection is busy answering is the new one answered ``503`` and
    closed. So a client holding idle connections cannot lock out the kubelet's probes
    or a scrape. Room for a Prometheus pair, the probes and a thousand or so idle or
    slow clients, at a few kilobytes each. Lowered (one log event) when the process's
    open-file limit cannot hold it.
    ``backlog`` (1024): the listen queue; the kernel caps it at ``net.core.somaxconn``.
    ``head_timeout_s`` (10 s): a request head must be complete this long after the
    connection was accepted (after the TLS handshake), or after its first byte on a
    kept-alive connection, whatever the client trickles in.
    ``idle_timeout_s`` (75 s): a kept-alive connection may wait this long for its next
    request: longer than the usual scrape intervals (15 to 60 s), so a scraper keeps
    its connection (and its TLS session).
    ``max_head_bytes`` (8 KiB): the request line and headers together; a larger head
    is answered ``431`` and the connection closed. A scrape's head is some 300 bytes.
    ``tls_handshake_timeout_s`` (10 s): the TLS handshake's deadline.
    ``write_timeout_s`` (30 s): a response must be handed to the kernel within this,
    or the connection is dropped (a client that does not read).
    ``workers`` (4): threads for ``/metrics``, ``/`` and the rest; ``probe_workers``
    (2): threads for ``/healthz``, ``/readyz`` and the web-config provider, so that
    slow scrapes never delay the kubelet's probes.
    ``auth_workers`` (1): threads for basic auth's bcrypt checks (the config runs one
    at a time anyway), and ``max_pending_auth`` (32): checks waiting for them. A login
    checked lately is recognised on the loop and never waits for a bcrypt check; a
    request past ``max_pending_auth`` (a flood of wrong passwords) is answered ``503``
    with ``Retry-After`` at once: not ``401``, which would tell a right password that
    it is wrong.
    ``stop_grace_s`` (1.5 s): how long :meth:`WebServer.stop` lets responses in flight
    finish before it drops them.
    """

    max_connections: int = 4096
    backlog: int = 1024
    head_timeout_s: float = 10.0
    idle_timeout_s: float = 75.0
    max_head_bytes: int = 8192
    tls_handshake_timeout_s: float = 10.0
    write_timeout_s: float = 30.0
    workers: int = 4
    probe_workers: int = 2
    auth_workers: int = 1
    max_pending_auth: int = 32
    stop_grace_s: float = 1.5

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) <= 0:
                raise ValueError(f"Limits.{f.name} must be positive, not {getattr(self, f.name)}")


# Descriptors kept for everything else a daemon opens (the listening socket, the kubelet's
# gRPC channel, sysfs and procfs reads, the device plugin's sockets) when the connection
# cap is fitted under the open-file limit.
_FD_RESERVE = 256
# A closed connection's last bytes (and TLS close_notify) get this long, then are dropped.
_CLOSE_TIMEOUT_S = 2.0
# A response body is written in slices of this size, each once the previous one has
# mostly gone: a client that reads slowly holds at most about this much of our memory.
# A body up to this size goes out with its head in one write.
_WRITE_SLICE = 256 * 1024
# A body's piece this large, in an answer that closes its connection, goes to a plain
# socket by sendfile from a memory file (_BodyFiles), not by sendmsg from memory; the
# last few such pieces keep their files. A kept-alive answer goes whole by one sendmsg
# (WebServer._body_files says why).
_SENDFILE_MIN = 128 * 1024
_BODY_FILES = 4
# After an accept fails for lack of descriptors, wait this long before accepting again.
_ACCEPT_RETRY_S = 0.5
# Connections answered and closed as they are accepted, at most, before the loop runs
# the others.
_ACCEPT_BATCH = 8
# Accept failures that mean "out of resources", not "this one connection went away".
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# Accept failures of one connection (accept(2) passes on its pending network errors).
_CONNECTION_ERRNOS = frozenset(
    {
        errno.ECONNABORTED,
        errno.EPROTO,
        errno.EPERM,
        errno.ENETDOWN,
        errno.ENETUNREACH,
        errno.EHOSTDOWN,
        errno.EHOSTUNREACH,
        errno.ENOPROTOOPT,
        errno.EOPNOTSUPP,
        errno.ENONET,
    }
)
# How much of a refused request is read (and dropped) at a time before closing.
_DISCARD_BYTES = 16 * 1024

# Request heads, and negotiated headers, up to this many bytes are remembered (a
# scraper sends the same ones every time: parsed once, not at every scrape) ...
_REMEMBERED = 1024
# ... this many of them.
_REMEMBERED_HEADS = 64

_PROBES = frozenset({"/healthz", "/readyz"})
_METHODS = frozenset({"GET", "HEAD"})
_VERSIONS = frozenset({"HTTP/1.0", "HTTP/1.1"})
_INTERNAL_ERROR = b"internal error\n"


def connection_cap(wanted: int, soft: int, hard: int) -> tuple[int, int]:
    """The connection cap and the soft open-file limit to set for ``wanted`` connections.

    ``soft`` and ``hard`` are RLIMIT_NOFILE's (``resource.RLIM_INFINITY`` for none). The
    soft limit is raised, up to the hard one, to hold ``wanted`` connections and a
    reserve of descriptors for the rest of the daemon; when even the hard limit is too
    low, the cap is what it leaves (at least half of it).
    """
    need = wanted + _FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted, soft
    new_soft = need if hard == resource.RLIM_INFINITY else max(soft, min(need, hard))
    return min(wanted, max(new_soft // 2, new_soft - _FD_RESERVE)), new_soft


def _fit_open_file_limit(wanted: int) -> int:
    """The connection cap this process can hold: RLIMIT_NOFILE's soft limit raised as far
    as needed and allowed, and the cap lowered (one log event) when that is not enough."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap, limit = connection_cap(wanted, soft, hard)
    if limit != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        except (ValueError, OSError) as err:
            log.warning("open_file_limit_not_raised", limit=soft, wanted=limit, error=str(err))
            cap, limit = connection_cap(wanted, soft, soft)
        else:
            log.info("open_file_limit_raised", old=soft, new=limit)
    if cap < wanted:
        log.warning(
            "http_connection_cap_lowered",
            max_connections=cap,
            wanted=wanted,
            open_file_limit=limit,
            hint="raise the container's or the service's open-file limit (ulimit -n)",
        )
    return cap


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class _Request:
    """A parsed request head. Header names are lower-case; repeated headers are joined
    with ``", "`` (RFC 9110 5.3)."""

    method: str
    path: str
    version: str
    headers: dict[str, str]
    keep_alive: bool  # whether the client keeps the connection after the answer
    has_body: bool  # whether a body follows the head (refused: none is expected)


def _keeps_alive(version: str, headers: dict[str, str]) -> bool:
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    if version == "HTTP/1.1":
        return "close" not in tokens
    return "keep-alive" in tokens


def _has_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length", "0").strip()
    return "transfer-encoding" in headers or length != "0"


_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 5.6.2
_NOT_IN_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # controls but tab (RFC 9110 5.5)
_BARE_LF = re.compile(rb"(?<!\r)\n")
_NOT_IN_PART = re.compile(rb"[\x00-\x20\x7f]")  # request-line parts: no control, no space


def _parse_head(head: bytes) -> _Request | None:
    """The request in ``head`` (through its blank line); None when it is malformed.

    Strict, so that no proxy in front can read a different request into the same bytes
    (request smuggling): every line ends in CRLF, with no other CR, LF or NUL; a header
    name is a token, directly followed by its colon (no folded lines, RFC 9112 5.1,
    5.2); a value holds no control byte but tab; HTTP/1.1 has exactly one ``Host``
    (RFC 9112 3.2)."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if (
        not head.endswith(b"\r\n\r\n")
        or len(parts) != 3  # noqa: PLR2004 - method, target, version
        or any(not p or _NOT_IN_PART.search(p) for p in parts)
        or parts[2].decode("latin-1") not in _VERSIONS
    ):
        return None
    method, target, version = (p.decode("latin-1") for p in parts)
    headers: dict[str, str] = {}
    hosts = 0
    for line in lines[1:]:
        name, sep, raw = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            return None
        raw = raw.strip(b" \t")
        if _NOT_IN_VALUE.search(raw):
            return None
        key, value = name.decode("ascii").lower(), raw.decode("latin-1")
        hosts += key == "host"
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if version == "HTTP/1.1" and hosts != 1:
        return None
    path = target.split("?", 1)[0]
    return _Request(
        method, path, version, headers, _keeps_alive(version, headers), _has_body(headers)
    )


@dataclass(frozen=True, slots=True)
class _Response:
    status: HTTPStatus
    body: Body
    content_type: str = _TEXT
    headers: tuple[tuple[str, str], ...] = ()


def _text(status: HTTPStatus, text: str, *headers: tuple[str, str]) -> _Response:
    return _Response(status, f"{text}\n".encode(), _TEXT, headers)


@lru_cache(maxsize=2)
def _http_date(second: int) -> bytes:
    """The ``Date`` header's value for the Unix time ``second`` (written once a second)."""
    return formatdate(second, usegmt=True).encode("latin-1")


@lru_cache(maxsize=64)
def _head_template(
    status: HTTPStatus, content_type: str, headers: tuple[tuple[str, str], ...]
) -> tuple[bytes, bytes, bytes]:
    """The parts of a head that do not change from one answer to the next: up to the
    ``Date``'s value, from there up to the ``Content-Length``'s, and from there through
    ``headers``. A scraper's answers share them: only the date and the length are
    written for each."""
    start = f"HTTP/1.1 {status.value} {status.phrase}\r\n"
    start += "Server: podres\r\nDate: "  # the product alone: no version of ours or of Python
    middle = f"\r\nContent-Type: {content_type}\r\nContent-Length: "
    end = "".join(f"\r\n{k}: {v}" for k, v in headers) + "\r\n"
    return (
        start.encode("latin-1", "replace"),
        middle.encode("latin-1", "replace"),
        end.encode("latin-1", "replace"),
    )


def _head_bytes(response: _Response, *, connection: str | None, extra: bytes) -> bytes:
    """The status line and headers of ``response``, then ``extra`` (the web config's,
    encoded when it was loaded: nothing here can fail to encode);
    ``connection``: the ``Connection`` header, if any (``close``, ``keep-alive``)."""
    start, middle, end = _head_template(response.status, response.content_type, response.headers)
    close = f"Connection: {connection}\r\n".encode("latin-1") if connection else b""
    length = str(_size(response.body)).encode()
    date = _http_date(int(time.time()))
    return b"".join((start, date, middle, length, end, extra, close, b"\r\n"))


def _size(body: Body | _Pieces) -> int:
    return sum(map(len, body)) if isinstance(body, tuple) else len(body)


def _pieces(head: bytes, body: Body | _Pieces) -> _Pieces:
    """``head`` then ``body``, as the buffers of one ``sendmsg``."""
    return (head, *body) if isinstance(body, tuple) else (head, body)


def _rest(pieces: _Pieces, sent: int) -> _Pieces:
    """What is left of ``pieces`` once ``sent`` bytes of them are out: a view of the
    piece begun and the pieces after it, none copied (empty when everything went)."""
    for i, piece in enumerate(pieces):
        if sent < len(piece):
            return (memoryview(piece)[sent:], *pieces[i + 1 :])
        sent -= len(piece)
    return ()


def _slices(pieces: _Pieces, size: int) -> Iterator[bytes | memoryview]:
    """The bytes of ``pieces`` in order, in slices of ``size`` (the last one shorter):
    views of one piece, or the join of parts of several. Nothing longer than a slice is
    copied."""
    parts: list[memoryview] = []
    held = 0
    for piece in pieces:
        view = memoryview(piece)
        start = 0
        while start < len(view):
            part = view[start : start + size - held]
            parts.append(part)
            held += len(part)
            start += len(part)
            if held == size:
                yield parts[0] if len(parts) == 1 else b"".join(parts)
                parts, held = [], 0
    if parts:
        yield parts[0] if len(parts) == 1 else b"".join(parts)


class _BodyFiles:
    """Memory files (``memfd``) holding the large pieces of the bodies answered lately,
    for ``sendfile``. From memory, ``sendmsg`` copies a piece into the socket's buffers
    and the receiver copies it out again; from a file, the socket's buffers refer to
    the file's pages, and the one copy is the receiver's. On a loaded machine that is
    the difference between a 650 KB body's two copies and one at every scrape.

    A piece is known by its identity, its bytes held beside its file so that the
    identity stays theirs: the exporter gives the same cached part at every scrape of a
    view. A piece gets its file the second time it is sent (a body made for one answer,
    a format rendered on demand, is never written to a file only to be dropped). The
    last :data:`_BODY_FILES` pieces seen are kept; a file is written once, never changed
    (pages in flight stay valid after it is closed). Without ``memfd_create``, or when
    it fails, nothing is given and the piece goes by ``sendmsg``. The loop's alone."""

    def __init__(self) -> None:
        # Pieces seen lately, oldest first, with their files (None: seen once).
        self._files: OrderedDict[int, tuple[bytes, int | None]] = OrderedDict()

    def fd(self, piece: bytes) -> int | None:
        """The descriptor of a file holding ``piece``; None the first time it is seen,
        or when there cannot be one."""
        key = id(piece)
        known = self._files.get(key)
        if known is None:
            self._keep(key, piece, None)
            return None
        self._files.move_to_end(key)
        if known[1] is not None:
            return known[1]
        try:
            fd = os.memfd_create("podres-body", os.MFD_CLOEXEC)
        except (AttributeError, OSError):
            return None
        try:
            view, written = memoryview(piece), 0
            while written < len(view):
                written += os.write(fd, view[written:])
        except OSError:
            os.close(fd)
            return None
        self._keep(key, piece, fd)
        return fd

    def _keep(self, key: int, piece: bytes, fd: int | None) -> None:
        self._files[key] = (piece, fd)
        while len(self._files) > _BODY_FILES:
            _, (_, old) = self._files.popitem(last=False)
            if old is not None:
                os.close(old)

    def close(self) -> None:
        while self._files:
            _, (_, fd) = self._files.popitem()
            if fd is not None:
                os.close(fd)


def _send(
    sock: socket.socket, head: bytes, body: Body | _Pieces, files: _BodyFiles | None
) -> _Pieces:
    """``head`` then ``body`` to ``sock``, none of them copied, as far as the kernel takes
    them now; what is left (empty when everything went). OSError when the connection is
    lost. One ``sendmsg``, but that with ``files`` a piece of at least
    :data:`_SENDFILE_MIN` bytes goes by ``sendfile`` from its file there (the pieces
    before it by a ``sendmsg`` that tells the kernel more follows)."""
    pieces = _pieces(head, body)
    sent = 0
    run: list[bytes | memoryview] = []  # pieces for the next sendmsg
    try:
        for piece in pieces:
            fd = None
            if files is not None and len(piece) >= _SENDFILE_MIN and isinstance(piece, bytes):
                fd = files.fd(piece)
            if fd is None:
                run.append(piece)
                continue
            if run:
                taken = sock.sendmsg(run, (), socket.MSG_MORE)
                sent += taken
                if taken < sum(map(len, run)):
                    return _rest(pieces, sent)
                run = []
            taken = _sendfile(sock, fd, len(piece))
            sent += taken
            if taken < len(piece):
                return _rest(pieces, sent)
        if run:
            sent += sock.sendmsg(run)
    except BlockingIOError:
        pass  # the kernel takes no more now
    return _rest(pieces, sent)


def _sendfile(sock: socket.socket, fd: int, size: int) -> int:
    """The first ``size`` bytes of file ``fd`` to ``sock``, as far as the kernel takes
    them now; how many went."""
    offset = 0
    try:
        while offset < size:
            taken = os.sendfile(sock.fileno(), fd, offset, size - offset)
            if not taken:
                break
            offset += taken
    except BlockingIOError:
        pass
    return offset


def _refusal(status: HTTPStatus, text: str, extra: bytes, *headers: tuple[str, str]) -> bytes:
    """A whole response that closes its connection, for answers the loop gives itself."""
    response = _text(status, text, *headers)
    head = _head_bytes(response, connection="close", extra=extra)
    return b"".join(_pieces(head, response.body))


# ------------------------------------------------------------------------------ server


def display_url(host: str, port: int, *, tls: bool = False) -> str:
    """The URL a client on this host uses for a server bound to ``host``:``port``
    (``https://`` when ``tls``).

    The wildcard addresses are shown as the loopback address of their family
    (``0.0.0.0`` as ``127.0.0.1``, ``::`` as ``[::1]``); an IPv6 host is bracketed.
    """
    if host in ("", "0.0.0.0"):  # noqa: S104 - naming the wildcard, not binding it
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _quiet_loop_errors(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """The loop's own error reports as one log event each, never a traceback on stderr.

    A client's broken connection (an OSError, TLS errors included) is routine: debug."""
    err = context.get("exception")
    level = log.debug if isinstance(err, OSError) else log.warning
    level("http_loop_error", message=str(context.get("message")), error=repr(err))


def _drop(transport: asyncio.WriteTransport) -> None:
    """Close ``transport`` at once. One that has closed already is left as it is: Python
    3.11's socket transport, once closed after flushing its buffer, has let go of its
    loop, and its abort() fails on that.

    Then the reference cycle of Python's socket transport is broken: it keeps a bound
    method of itself (``_read_ready_cb``, called only while it reads, which a closed
    transport never does again) for as long as it lives. Left alone, every connection
    leaves half a dozen objects that only the garbage collector frees; a stream of new
    connections fills its young generation with them, and the collection that frees
    thousands at once stops the loop for tens of milliseconds."""
    with contextlib.suppress(AttributeError):
        transport.abort()
    state = getattr(transport, "__dict__", {})
    if state.get("_read_ready_cb") is not None:
        state["_read_ready_cb"] = None


class _Protocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, but data that ``at_once`` answers itself (a kept-alive
    connection's next scrape) never reaches the reader."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        loop: asyncio.AbstractEventLoop,
        at_once: Callable[[bytes], bool],
    ) -> None:
        super().__init__(reader, loop=loop)
        self._at_once = at_once

    def data_received(self, data: bytes) -> None:
        if not self._at_once(data):
            super().data_received(data)


@dataclass(eq=False, slots=True)
class _Connection:
    """One open connection: whether a request of it is in flight (stop lets it finish,
    and the cap never closes it for a newcomer), and the deadline of what it waits for.

    The deadline moves at every phase of every request (the head, the response's
    write, the idle wait for the next request) by an assignment: its timer fires at
    the deadline it was set for and only then looks at where the deadline is now
    (a connection scraped back to back sets a timer every few seconds, not three
    per request)."""

    task: asyncio.Task[None] | None = None
    busy: bool = False
    deadline: float = math.inf  # loop time; inf while nothing is awaited under a deadline
    phase: str = ""  # what the deadline is for, named in the event when it passes
    timer: asyncio.TimerHandle | None = None
    pending: bytes = b""  # read past the last request's head: the next one's start
    # A plain connection's socket, written to directly while its transport holds nothing.
    sock: socket.socket | None = None
    writer: asyncio.StreamWriter | None = None  # once its transport is made
    # The first request, answered as the connection was accepted: the answer's bytes the
    # kernel did not take then (None: it took them all, or there was no such answer).
    unsent: _Pieces | None = None
    # Whether the connection stays open after the last answer given at once (at accept,
    # or as its request arrived); False while none was.
    keep_alive: bool = False
    # A plain connection accepted before its first request arrived: the loop watches its
    # socket for it, with no task yet (``sock`` is set).
    awaiting: bool = False
    waiting: bool = False  # its task waits for the next request, none of it read yet
    # What sends the rest of an answer given as its request arrived (None: no such
    # rest); done once that rest is with the kernel. The connection's task answers
    # nothing more before.
    flushed: asyncio.Task[bool] | None = None


@dataclass(slots=True)
class _State:
    """The loop's view of its resources, for one log event per change."""

    full: bool = False
    accept_failing: bool = False
    config_failing: bool = False
    stopping: bool = False
    connections: set[_Connection] = field(default_factory=set)
    # The connections with no request in flight, longest waiting first: the one to
    # close when a new connection arrives at the cap.
    idle: OrderedDict[_Connection, None] = field(default_factory=OrderedDict)
    pending_auth: int = 0  # bcrypt checks submitted and not finished


class WebServer:
    """A daemon's HTTP server on ``address`` (host, port; port 0 picks one).

    An IPv6 host (one with a colon) is served over IPv6. Bound on construction
    (OSError when it cannot be); :meth:`start` serves from a thread, :meth:`stop` ends.
    ``web_config``: the TLS, basic-auth and header configuration in force (asked at each
    connection and request; None: plain HTTP, open). ``limits``: see :class:`Limits`.
    """

    def __init__(
        self,
        address: tuple[str, int],
        site: Site,
        *,
        web_config: WebConfigProvider | None = None,
        limits: Limits = Limits(),  # frozen: one instance is shared safely
    ) -> None:
        self.site = site
        self.limits = limits
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._provider = web_config
        self._config: WebConfig | None = None  # the last one the provider gave
        sock = socket.socket(self.address_family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(limits.backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._socket = sock
        self.server_address: tuple[str, int] = sock.getsockname()[:2]
        self.max_connections = _fit_open_file_limit(limits.max_connections)
        self._state = _State()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._probe_pool: ThreadPoolExecutor | None = None
        self._auth_pool: ThreadPoolExecutor | None = None
        self._heads: dict[bytes, _Request | None] = {}  # parsed heads; the loop's alone
        self._files = _BodyFiles()

    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        """The base URL clients use (see :func:`display_url`): ``https://`` when the
        configuration in force has TLS."""
        config = self._config
        if config is None and self._provider is not None:
            with contextlib.suppress(Exception):  # failing: logged when a client asks
                config = self._provider()
        tls = config is not None and config.tls is not None
        return display_url(str(self.server_address[0]), self.port, tls=tls)

    # ---------------------------------------------------------------- life cycle

    def start(self, name: str = "podres-http") -> None:
        """Serve from a daemon thread called ``name`` (its pools' threads are ``name-*``)."""
        if self._thread is not None or self._socket.fileno() < 0:
            raise RuntimeError("a web server starts once, and not after stop()")
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix=f"{name}-worker")
        self._probe_pool = ThreadPoolExecutor(
            self.limits.probe_workers, thread_name_prefix=f"{name}-probe"
        )
        self._auth_pool = ThreadPoolExecutor(
            self.limits.auth_workers, thread_name_prefix=f"{name}-auth"
        )
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=name, daemon=True)
        self._thread.start()
        ready.wait()

    def alive(self) -> bool:
        """Whether the server is serving: its loop runs and was not asked to stop."""
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._state.stopping

    def stop(self) -> None:
        """Stop serving; callable from any thread, more than once, started or not.

        The listening socket closes at once; idle connections are closed; responses in
        flight get ``stop_grace_s`` to finish (their connection closes after them), then
        every connection is dropped and the loop's thread ends.
        """
        thread, loop, stop = self._thread, self._loop, self._stop_requested
        if thread is not None and loop is not None and stop is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stop.set)
            if threading.current_thread() is not thread:
                thread.join(timeout=self.limits.stop_grace_s + 2 * _CLOSE_TIMEOUT_S)
        if thread is None or not thread.is_alive():
            self._socket.close()
        for pool in (self._pool, self._probe_pool, self._auth_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_quiet_loop_errors)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready))
        except Exception as err:  # noqa: BLE001 - end the thread with one event, not a traceback
            log.error("http_server_failed", error=repr(err))
        finally:
            self._state.stopping = True
            self._socket.close()
            loop.close()
            self._files.close()
            ready.set()  # when _serve failed before it could

    async def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        accepting = loop.create_task(self._accept())
        stopping = loop.create_task(self._stop_requested.wait())
        ready.set()
        await asyncio.wait({accepting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if accepting.done() and not accepting.cancelled() and accepting.exception() is not None:
            log.error("http_server_failed", error=repr(accepting.exception()))
        self._state.stopping = True
        for task in (accepting, stopping):
            task.cancel()
        await asyncio.gather(accepting, stopping, return_exceptions=True)
        self._socket.close()
        await self._close_connections()

    async def _close_connections(self) -> None:
        """Idle connections now; busy ones after their response or the grace period."""
        connections = list(self._state.connections)
        for conn in connections:
            if conn.awaiting:
                self._drop_awaited(conn)
            elif not conn.busy and conn.task is not None:
                conn.task.cancel()
        tasks = [c.task for c in connections if c.task is not None]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.limits.stop_grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for _ in range(3):  # let the aborted transports' connection_lost callbacks run
            await asyncio.sleep(0)

    # ---------------------------------------------------------------- accepting

    async def _accept(self) -> None:
        """Accept connections until cancelled. The listening socket stays registered with
        the loop (not added and removed for every connection), except while accepting
        fails for lack of descriptors: then it is tried again every ``_ACCEPT_RETRY_S``."""
        loop = asyncio.get_running_loop()
        state = self._state
        listening = self._socket
        woken: asyncio.Future[None] | None = None
        in_a_row = 0  # connections accepted with no task to run since the loop last ran

        def readable() -> None:
            if woken is not None and not woken.done():
                woken.set_result(None)

        loop.add_reader(listening, readable)
        try:
            while True:
                try:
                    sock, _ = listening.accept()
                except BlockingIOError:
                    woken = loop.create_future()
                    await woken
                    continue
                except OSError as err:
                    if err.errno in _CONNECTION_ERRNOS:
                        continue  # that one connection failed before it was accepted
                    if err.errno not in _RESOURCE_ERRNOS:
                        raise  # the listening socket itself: the server stops (alive() says so)
                    if not state.accept_failing:
                        state.accept_failing = True
                        log.warning("http_accept_failed", error=str(err))
                    loop.remove_reader(listening)  # it stays readable: no busy loop meanwhile
                    await asyncio.sleep(_ACCEPT_RETRY_S)
                    loop.add_reader(listening, readable)
                    continue
                if self._accepted(sock) or in_a_row >= _ACCEPT_BATCH:
                    in_a_row = 0
                    await asyncio.sleep(0)  # let the new connection, and the others, run
                else:
                    in_a_row += 1  # answered, refused or watched: nothing new to run
        finally:
            if listening.fileno() >= 0:
                loop.remove_reader(listening)

    def _accepted(self, sock: socket.socket) -> bool:
        """Take on the accepted ``sock``: a connection of its own, one that takes the
        longest idle one's place at the cap, or a 503 when every one is busy. Whether a
        task serves it (False: answered and closed, or watched for its first request)."""
        state = self._state
        sock.setblocking(False)
        with contextlib.suppress(OSError):  # a connection reset already
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # TCP, as it listens
        if state.accept_failing:
            state.accept_failing = False
            log.info("http_accept_recovered")
        at_cap = len(state.connections) >= self.max_connections
        if at_cap != state.full:
            state.full = at_cap
            if at_cap:
                log.warning("http_connections_full", max_connections=self.max_connections)
            else:
                log.info("http_connections_available", max_connections=self.max_connections)
        if at_cap and not self._close_longest_idle():
            self._refuse(sock)
            return False
        conn = _Connection()
        if self._provider is None:
            return self._first_bytes(conn, sock)
        self._start(conn, sock)
        return True

    def _start(self, conn: _Connection, sock: socket.socket) -> None:
        """Serve ``conn`` by a task of its own from now."""
        state = self._state
        state.connections.add(conn)
        if conn.unsent is None:
            state.idle[conn] = None
        else:
            conn.busy = True
            state.idle.pop(conn, None)
        conn.task = asyncio.get_running_loop().create_task(self._connection(conn, sock))

    def _first_bytes(self, conn: _Connection, sock: socket.socket) -> bool:
        """A plain connection's first bytes, read as soon as they are there: as it is
        accepted (a scraper sends its request right after connecting), else as they
        arrive, the loop watching the socket meanwhile (:meth:`_await_first`: no task,
        no transport, under the head's deadline). A request whose answer is ready is
        answered at once (:meth:`_answer_at_once`). Whether a task now serves the
        connection."""
        try:
            data = sock.recv(self.limits.max_head_bytes + 1)
        except BlockingIOError:
            if not conn.awaiting:
                self._await_first(conn, sock)
            return False
        except OSError:
            data = b""  # reset
        if conn.awaiting:
            self._stop_awaiting(conn, sock)
        if self._answer_at_once(conn, sock, data):
            self._start(conn, sock)
            return True
        if conn.timer is not None:
            conn.timer.cancel()  # the head's deadline, set while it was awaited
            conn.timer = None
        return False

    def _await_first(self, conn: _Connection, sock: socket.socket) -> None:
        """Watch ``conn``'s socket for its first request: counted as an open, idle
        connection (the cap, :meth:`_close_longest_idle` and stop see it), due by the
        head's deadline from now. The loop is given the descriptor, not the socket: it
        looks the descriptor up first, and a socket's ``repr`` in the KeyError of a new one
        costs two system calls."""
        asyncio.get_running_loop().add_reader(sock.fileno(), self._first_arrived, conn, sock)
        conn.awaiting, conn.sock = True, sock
        self._state.connections.add(conn)
        self._state.idle[conn] = None
        self._expect(conn, self.limits.head_timeout_s, "head")

    def _first_arrived(self, conn: _Connection, sock: socket.socket) -> None:
        """The loop's callback for a watched socket: :meth:`_first_bytes`; a failure is the
        connection's own (logged, the connection dropped), as in a connection's task."""
        try:
            self._first_bytes(conn, sock)
        except Exception as err:  # noqa: BLE001 - one connection's failure is its own
            log.warning("http_connection_failed", error=repr(err))
            if conn.task is None:
                self._drop_awaited(conn)

    def _stop_awaiting(self, conn: _Connection, sock: socket.socket) -> None:
        asyncio.get_running_loop().remove_reader(sock.fileno())
        conn.awaiting = False
        self._state.connections.discard(conn)
        self._state.idle.pop(conn, None)

    def _drop_awaited(self, conn: _Connection) -> None:
        """Close a connection whose first request never came (its deadline, the cap,
        stop), or failed as it came."""
        sock = conn.sock
        assert sock is not None
        if conn.awaiting:
            self._stop_awaiting(conn, sock)
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None
        conn.sock = None
        sock.close()

    def _answer_at_once(self, conn: _Connection, sock: socket.socket, data: bytes) -> bool:
        """Answer a plain connection's first request, ``data``, as it arrives, when its
        answer is ready on the loop (:meth:`_ready_answer`): written at once (:func:`_send`),
        no task woken. Whether the connection goes on to its task: kept alive, the rest
        of the answer to send (``conn.unsent``), or the bytes read (``conn.pending``) for
        a request answered the usual way."""
        if not data:
            sock.close()  # the client left
            return False
        answer = self._ready_answer(data)
        if answer is None:
            conn.pending = data  # incomplete, pipelined, refused or not ready at once
            return True
        head, body, conn.keep_alive = answer
        try:
            rest = _send(sock, head, body, self._body_files(conn.keep_alive))
        except OSError:
            rest = None  # gone
        if rest is None or (not rest and not conn.keep_alive):
            sock.close()  # gone, or answered: with nothing unread, the answer goes out first
            return False
        if rest:
            conn.unsent = rest
        return True

    def _close_longest_idle(self) -> bool:
        """Close the connection that has waited longest with no request in flight, to
        make room for a new one; False when every connection is busy answering."""
        state = self._state
        while state.idle:
            conn, _ = state.idle.popitem(last=False)
            if conn.awaiting:
                self._drop_awaited(conn)
                log.debug("http_idle_connection_closed_for_new_one")
                return True
            if conn.task is None or conn.task.done():
                continue
            state.connections.discard(conn)
            conn.task.cancel()  # its task drops the connection
            log.debug("http_idle_connection_closed_for_new_one")
            return True
        return False

    def _refuse(self, sock: socket.socket) -> None:
        """503 and close, at once: a connection over the cap costs nothing more."""
        with sock:
            # What the client sent already is read first: closing a socket with unread
            # data resets the connection, and the reset could overtake the answer.
            with contextlib.suppress(OSError):
                sock.recv(_DISCARD_BYTES)
            refusal = _refusal(
                HTTPStatus.SERVICE_UNAVAILABLE, "too many connections", self._extra()
            )
            with contextlib.suppress(OSError):
                sock.send(refusal)

    # ---------------------------------------------------------------- connections

    async def _connection(self, conn: _Connection, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        writer: asyncio.StreamWriter | None = None
        try:
            try:
                config = await self._current_config()
            except Exception:  # noqa: BLE001 - logged by _ask_provider; close, unanswered
                return
            reader = asyncio.StreamReader(limit=self.limits.max_head_bytes, loop=loop)
            protocol = _Protocol(reader, loop, partial(self._answer_waiting, conn))
            tls = config.tls if config is not None else None
            try:
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol,
                    sock,
                    ssl=tls,
                    ssl_handshake_timeout=self.limits.tls_handshake_timeout_s if tls else None,
                    ssl_shutdown_timeout=_CLOSE_TIMEOUT_S if tls else None,
                )
            except OSError as err:  # TLS errors, resets and the handshake's deadline
                if tls is not None:
                    log.debug("http_tls_handshake_failed", error=str(err) or type(err).__name__)
                return
            # A slice waits for the one before only once it is mostly out (asyncio's
            # default high-water mark, 64 KiB, would stop every slice for the client).
            transport.set_write_buffer_limits(high=_WRITE_SLICE)
            writer = conn.writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            conn.sock = sock if tls is None else None
            await self._requests(conn, reader, writer)
        except asyncio.CancelledError:
            pass  # stop(): the connection is dropped below
        except Exception as err:  # noqa: BLE001 - one connection's failure is its own
            log.warning("http_connection_failed", error=repr(err))
        finally:
            self._state.connections.discard(conn)
            self._state.idle.pop(conn, None)
            if conn.timer is not None:
                conn.timer.cancel()
            if conn.flushed is not None:
                conn.flushed.cancel()  # a rest that cannot go now: its connection is dropped
            # Both refer to conn (by its protocol, by the rest's coroutine): no cycle
            # left for the garbage collector.
            conn.writer = conn.flushed = None
            if writer is not None:
                _drop(writer.transport)
            else:
                sock.close()  # a no-op when a failed handshake's transport closed it

    async def _current_config(self) -> WebConfig | None:
        """The provider's configuration, asked off the loop (it may read a file)."""
        if self._provider is None:
            return None
        assert self._probe_pool is not None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._probe_pool, self._ask_provider)

    def _ask_provider(self) -> WebConfig | None:
        """The configuration in force, from a pool thread. A provider that raises fails
        the connection (no TLS context: never plain HTTP instead) or the request (500),
        with one log event when it starts failing and one when it recovers."""
        if self._provider is None:
            return None
        try:
            config = self._provider()
        except Exception as err:
            if not self._state.config_failing:
                self._state.config_failing = True
                log.error("web_config_failed", error=repr(err))
            raise
        if self._state.config_failing:
            self._state.config_failing = False
            log.info("web_config_recovered")
        self._config = config
        return config

    async def _requests(
        self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Serve requests on one connection until it closes, idles out or misbehaves."""
        # A new connection's first request has no idle wait; its start may have been
        # read, or it may have been answered, when it was accepted.
        first: bytes | None = conn.pending
        conn.pending = b""
        if conn.unsent is not None and not await self._send_rest(conn, conn.unsent):
            return  # what the kernel did not take of it could not go, or the connection closed
        if conn.keep_alive:  # it was answered, and the connection stays
            first = await self._next_request(conn, reader)
        while first is not None and not self._state.stopping:
            head = await self._read_head(conn, reader, writer, first)
            if head is None:
                return
            request = self._parse(head)
            refusal = self._refusal_for(request)
            if refusal is not None:
                await self._refuse_and_close(reader, writer, refusal)
                return
            assert request is not None
            if not await self._answering(conn, writer, self._respond(conn, request, writer)):
                return
            first = await self._next_request(conn, reader)

    async def _answering(
        self, conn: _Connection, writer: asyncio.StreamWriter, answer: Awaitable[bool]
    ) -> bool:
        """Await ``answer`` (whether the connection stays open) with ``conn`` busy, and
        close the connection when it does not stay, still busy (stop would cut the close
        short); whether the connection goes on."""
        conn.busy = True
        self._state.idle.pop(conn, None)
        try:
            keep_alive = await answer
            if not keep_alive or self._state.stopping:
                await self._close(writer)
                return False
            return True
        finally:
            conn.busy = False
            if conn in self._state.connections:
                self._state.idle[conn] = None

    def _parse(self, head: bytes) -> _Request | None:
        """:func:`_parse_head`, remembered for short heads (a scraper's is the same at
        every scrape)."""
        heads = self._heads
        if head in heads:
            return heads[head]
        request = _parse_head(head)
        if len(head) <= _REMEMBERED:
            if len(heads) >= _REMEMBERED_HEADS:
                heads.clear()
            heads[head] = request
        return request

    # ---------------------------------------------------------------- deadlines

    def _expect(self, conn: _Connection, seconds: float, phase: str) -> None:
        """Give ``conn`` ``seconds`` for ``phase``: its timer is set anew only when it
        would fire after the new deadline."""
        loop = self._loop  # the running loop (asyncio.get_running_loop asks getpid)
        assert loop is not None
        deadline = loop.time() + seconds
        conn.deadline, conn.phase = deadline, phase
        timer = conn.timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            conn.timer = loop.call_at(deadline, self._watch, conn)

    def _watch(self, conn: _Connection) -> None:
        """``conn``'s timer: the deadline has passed (the connection is dropped, with a
        debug event for the head's and the write's), moved on (wait for it), or is
        off (nothing to wait for)."""
        conn.timer = None
        loop = asyncio.get_running_loop()
        if conn.deadline == math.inf or (
            not conn.awaiting and (conn.task is None or conn.task.done())
        ):
            return
        if conn.deadline > loop.time():
            conn.timer = loop.call_at(conn.deadline, self._watch, conn)
            return
        limits = self.limits
        if conn.phase == "head":
            log.debug("http_request_head_timeout", timeout_s=limits.head_timeout_s)
        elif conn.phase == "write":
            log.debug("http_write_timeout", timeout_s=limits.write_timeout_s)
        if conn.awaiting:
            self._drop_awaited(conn)
        elif conn.task is not None:
            conn.task.cancel()  # _connection drops the connection

    # ---------------------------------------------------------------- requests

    async def _next_request(self, conn: _Connection, reader: asyncio.StreamReader) -> bytes | None:
        """A kept-alive connection's next request's first bytes; None when the client
        leaves. A connection that idles out is dropped (closed quietly, as clients
        expect)."""
        if conn.pending:  # pipelined: it came with the last one
            first, conn.pending = conn.pending, b""
            return first
        self._expect(conn, self.limits.idle_timeout_s, "idle")
        conn.waiting = True
        try:
            data = await reader.read(self.limits.max_head_bytes + 1)
        except OSError:
            return None
        finally:
            conn.waiting = False
        if data and conn.flushed is not None and not await conn.flushed:
            return None  # an answer given at once went out first, and closed the connection
        return data or None

    async def _read_head(
        self,
        conn: _Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        first: bytes,
    ) -> bytes | None:
        """The request head that starts with ``first``; None when the connection is to
        close (the client left; a head too large is answered 431, a line ending in a
        bare LF 400 at once). A head not complete by its deadline drops the connection."""
        if conn.phase != "head" or conn.deadline == math.inf:  # else: due since its accept
            self._expect(conn, self.limits.head_timeout_s, "head")
        try:
            head = await self._head_lines(conn, reader, first)
        except asyncio.LimitOverrunError:
            conn.deadline = math.inf
            status = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
            refusal = _refusal(status, "request head too large", self._extra())
            await self._refuse_and_close(reader, writer, refusal)
            return None
        except (asyncio.IncompleteReadError, OSError):
            return None  # the client closed or reset the connection
        conn.deadline = math.inf  # the answer is not due by the head's deadline
        if head is None:
            refusal = _refusal(HTTPStatus.BAD_REQUEST, "bad request", self._extra())
            await self._refuse_and_close(reader, writer, refusal)
        return head

    async def _head_lines(
        self, conn: _Connection, reader: asyncio.StreamReader, first: bytes
    ) -> bytes | None:
        """The head through its blank line, from ``first`` on, read as it arrives (what
        follows the head, a pipelined request, is kept for the next one); None as soon
        as a line ends in a bare LF (no waiting for a CRLF CRLF that will not come).
        LimitOverrunError past ``max_head_bytes``; IncompleteReadError when the client
        stops sending first."""
        limit = self.limits.max_head_bytes
        data, seen = first, 0  # seen: bytes already searched (for an end and a bare LF)
        while True:
            end = data.find(b"\r\n\r\n", max(0, seen - 3))
            stop = len(data) if end < 0 else end + 4
            if _BARE_LF.search(data, max(0, seen - 1), stop):
                return None
            if stop > limit:
                raise asyncio.LimitOverrunError("request head too large", stop)
            if end >= 0:
                conn.pending = data[stop:]
                return data[:stop]
            seen = len(data)
            more = await reader.read(limit + 1 - seen)
            if not more:
                raise asyncio.IncompleteReadError(data, None)
            data += more

    def _extra(self) -> bytes:
        """The configured response headers (of the last configuration the provider gave)."""
        return self._config.header_bytes if self._config is not None else b""

    def _refusal_for(self, request: _Request | None) -> bytes | None:
        """The answer to a request the loop refuses itself (it then closes the connection)."""
        extra = self._extra()
        if request is None:
            return _refusal(HTTPStatus.BAD_REQUEST, "bad request", extra)
        if request.method not in _METHODS:
            status = HTTPStatus.METHOD_NOT_ALLOWED
            return _refusal(status, "only GET and HEAD are served", extra, ("Allow", "GET, HEAD"))
        if request.has_body:
            return _refusal(HTTPStatus.BAD_REQUEST, "a request body is not accepted", extra)
        return None

    async def _respond(
        self, conn: _Connection, request: _Request, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer ``request`` (its work in a pool); whether the connection stays open."""
        response, extra = await self._response(request)
        head, body, keep_alive = self._answer_bytes(request, response, extra)
        return await self._send_answer(conn, writer, (head, body, keep_alive), request.path)

    async def _send_answer(
        self,
        conn: _Connection,
        writer: asyncio.StreamWriter,
        answer: tuple[bytes, Body | _Pieces, bool],
        path: str,
    ) -> bool:
        """Write ``answer`` (head, body, whether the connection stays open after them)
        by the write deadline; whether the connection stays open."""
        head, body, keep_alive = answer
        self._expect(conn, self.limits.write_timeout_s, "write")
        try:
            await self._write(writer, head, body, conn.sock, self._body_files(keep_alive))
        except OSError as err:
            log.debug("http_client_gone", path=path, error=str(err) or type(err).__name__)
            return False
        conn.deadline = math.inf
        return keep_alive

    def _body_files(self, keep_alive: bool) -> _BodyFiles | None:
        """Where an answer's large pieces go from (:func:`_send`): from their memory files
        by ``sendfile`` when the connection closes after it; None, with the rest of the
        answer in one ``sendmsg``, when the connection stays open.

        A kept-alive client waits on its connection for the answer and wakes at its
        first bytes. By ``sendfile`` the live part follows the file in a call of its own,
        so the client read the file's bytes and slept again until it came; on a loaded
        machine that took the loop off its core once a scrape. wrk, ten kept-alive
        connections, a 650 KB text body on two cores: 1.2 involuntary switches of the
        loop a scrape by ``sendfile`` against 0.1 by one ``sendmsg``, p99 5.0 -> 4.5 ms
        and 137 -> 120 us of CPU a scrape, one connection's p50 0.27 -> 0.22 ms. On a
        new connection a scrape the file stays quicker (p99 4.5 ms against 5.0 by
        ``sendmsg``)."""
        return None if keep_alive else self._files

    def _answer_bytes(
        self, request: _Request, response: _Response, extra: bytes
    ) -> tuple[bytes, Body, bool]:
        """The head and body that answer ``request`` with ``response``, and whether the
        connection stays open after them."""
        keep_alive = request.keep_alive and not self._state.stopping
        if not keep_alive:
            connection: str | None = "close"
        else:  # HTTP/1.0 keeps a connection only when the answer says so
            connection = "keep-alive" if request.version == "HTTP/1.0" else None
        head = _head_bytes(response, connection=connection, extra=extra)
        return head, b"" if request.method == "HEAD" else response.body, keep_alive

    def _ready_answer(self, data: bytes) -> tuple[bytes, Body, bool] | None:
        """The answer, on a server with no web config, to ``data`` when it is one whole
        request head (no more, no less) whose answer the loop has at once: ``/metrics``
        from ``metrics_ready``. None for anything else (answered the usual way), and
        always with a web config (its credentials and headers are for the usual way)."""
        if (
            self._provider is not None
            or len(data) > self.limits.max_head_bytes
            or data.find(b"\r\n\r\n") != len(data) - 4
        ):
            return None
        request = self._parse(data)
        if request is None or self._refusal_for(request) is not None:
            return None
        response = self._ready_metrics(request)
        return None if response is None else self._answer_bytes(request, response, b"")

    def _ready_metrics(self, request: _Request) -> _Response | None:
        """``/metrics`` from ``metrics_ready``, on the loop; None for another path, or
        when it has no body at once. One that raises is answered 500."""
        ready = self.site.metrics_ready
        if request.path != "/metrics" or ready is None:
            return None
        try:
            return self._metrics_response(request, ready)
        except Exception as err:  # noqa: BLE001 - answer 500, keep serving
            log.error("http_request_failed", path=request.path, error=repr(err))
            return _Response(HTTPStatus.INTERNAL_SERVER_ERROR, _INTERNAL_ERROR)

    def _answer_waiting(self, conn: _Connection, data: bytes) -> bool:
        """Answer on the spot, with no task woken, the next request of a plain kept-alive
        connection whose task waits for it, when ``data`` is all of it and its answer is
        ready on the loop (:meth:`_ready_answer`); whether it did (else ``data`` goes to
        the reader). What the kernel does not take of the answer is sent by a task of its
        own (:meth:`_send_rest`), the connection busy until then."""
        sock, writer = conn.sock, conn.writer
        if (
            not conn.waiting
            or sock is None
            or writer is None
            or (conn.flushed is not None and not conn.flushed.done())
            or self._state.stopping
        ):
            return False
        answer = self._ready_answer(data)
        if answer is None:
            return False
        head, body, conn.keep_alive = answer
        try:
            rest = _send(sock, head, body, self._body_files(conn.keep_alive))
        except OSError as err:
            log.debug("http_client_gone", path="/metrics", error=str(err) or type(err).__name__)
            writer.transport.abort()  # the task then sees the connection end
            return True
        if rest:
            conn.busy = True  # from now: stop() and the cap leave it be
            self._state.idle.pop(conn, None)
            conn.flushed = asyncio.get_running_loop().create_task(self._send_rest(conn, rest))
        elif not conn.keep_alive:
            writer.close()  # the task then sees the connection end
        else:
            self._idle_again(conn)
        return True

    async def _send_rest(self, conn: _Connection, rest: _Pieces) -> bool:
        """The rest of an answer given at once (at accept, or as its request arrived), by
        the write deadline, the connection busy meanwhile; then the connection idles
        again, or closes unless kept alive. Whether it stays open."""
        writer = conn.writer
        assert writer is not None
        answer = self._send_answer(conn, writer, (b"", rest, conn.keep_alive), "/metrics")
        if not await self._answering(conn, writer, answer):
            return False
        self._idle_again(conn)
        return True

    def _idle_again(self, conn: _Connection) -> None:
        """After an answer given at once: ``conn`` waits for its next request, the most
        recently idle of all (the last the cap closes for a newcomer)."""
        self._expect(conn, self.limits.idle_timeout_s, "idle")
        if conn in self._state.connections:
            self._state.idle[conn] = None
            self._state.idle.move_to_end(conn)

    @staticmethod
    async def _write(
        writer: asyncio.StreamWriter,
        head: bytes,
        body: Body | _Pieces,
        sock: socket.socket | None,
        files: _BodyFiles | None,
    ) -> None:
        """``head`` and ``body``; returns once the last byte is with the kernel.

        ``sock``, a plain connection's socket: while the transport holds nothing, the
        head and every piece of the body go to it directly, none copied (:func:`_send`,
        large pieces from ``files`` when given). What
        the kernel does not take (and everything on a TLS connection) goes through the
        transport in slices (:func:`_slices`: a small answer in one write), each once the
        one before has mostly gone. Unless the kernel took the whole slice, the loop runs
        before the next, so that a connection lost meanwhile is noticed first: asyncio
        warns on stderr about every write to a lost connection past the fifth, and a TLS
        stream learns of the loss only then."""
        transport = writer.transport
        if sock is not None and not transport.get_write_buffer_size():
            if transport.is_closing():
                raise ConnectionResetError("the client closed the connection")
            pieces = _send(sock, head, body, files)
        else:
            pieces = _pieces(head, body)
        tls = writer.get_extra_info("ssl_object") is not None
        for i, piece in enumerate(_slices(pieces, _WRITE_SLICE)):
            if i:
                if tls or transport.get_write_buffer_size():
                    await asyncio.sleep(0)
                if transport.is_closing():
                    raise ConnectionResetError("the client closed the connection")
            writer.write(piece)
            await writer.drain()
        if transport.get_write_buffer_size():
            # The answer is in flight until its end is with the kernel: a connection
            # counted idle with bytes still buffered would lose them to stop() or to
            # the cap's closing of the longest idle connection.
            transport.set_write_buffer_limits(high=0)
            try:
                await writer.drain()
            finally:
                transport.set_write_buffer_limits(high=_WRITE_SLICE)

    @classmethod
    async def _refuse_and_close(
        cls, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, refusal: bytes
    ) -> None:
        """Send ``refusal`` and close, reading and dropping what the client still sends
        until it closes (for a moment at most): closing with unread data resets the
        connection, and the reset could overtake the answer."""
        writer.write(refusal)
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
                while await reader.read(_DISCARD_BYTES):
                    pass
        except (OSError, TimeoutError):
            pass
        await cls._close(writer)

    @staticmethod
    async def _close(writer: asyncio.StreamWriter) -> None:
        """Close after the last bytes are out, or drop the connection when they do not go.
        A plain connection with nothing left to send closes by itself: no wait (TLS
        still sends its close_notify)."""
        writer.close()
        plain = writer.get_extra_info("ssl_object") is None
        if plain and not writer.transport.get_write_buffer_size():
            return
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                await writer.wait_closed()
        except (OSError, TimeoutError):
            _drop(writer.transport)

    async def _response(self, request: _Request) -> tuple[_Response, bytes]:
        """The response to ``request`` and the configured headers: the configuration from
        the provider, the credentials checked (:meth:`_denial`), then the site's answer
        from a pool (the probes' own for the probes)."""
        try:
            config = await self._current_config()
        except Exception:  # noqa: BLE001 - logged by _ask_provider; answer 500, keep serving
            return _Response(HTTPStatus.INTERNAL_SERVER_ERROR, _INTERNAL_ERROR), b""
        extra = config.header_bytes if config is not None else b""
        probe = request.path in _PROBES
        if config is not None and config.auth_required and not probe:
            denial = await self._denial(config, request.headers.get("authorization"))
            if denial is not None:
                return denial, extra
        ready = self._ready_metrics(request)
        if ready is not None:
            return ready, extra
        pool = self._probe_pool if probe else self._pool
        assert pool is not None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, self._answer, request), extra

    async def _denial(self, config: WebConfig, authorization: str | None) -> _Response | None:
        """None when ``authorization`` lets the request in, else the answer.

        A login checked lately passes on the loop, waiting for nothing; a header that is
        not well-formed Basic credentials is 401 at once; the rest wait for a bcrypt
        check in the auth pool, unless ``max_pending_auth`` checks wait already: then
        ``503`` with ``Retry-After`` at once (see :class:`Limits`)."""
        if config.cached(authorization):
            return None
        if config.well_formed(authorization):
            state = self._state
            if state.pending_auth >= self.limits.max_pending_auth:
                return _text(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    "too many logins being checked: retry",
                    ("Retry-After", "1"),
                )
            assert self._auth_pool is not None
            loop = asyncio.get_running_loop()
            state.pending_auth += 1
            try:
                ok = await loop.run_in_executor(self._auth_pool, config.authorized, authorization)
            finally:
                state.pending_auth -= 1
            if ok:
                return None
        challenge = ("WWW-Authenticate", 'Basic realm="podres"')
        return _text(HTTPStatus.UNAUTHORIZED, "unauthorized", challenge)

    # ---------------------------------------------------------------- answers (in a pool)

    def _answer(self, request: _Request) -> _Response:
        """The site's response to ``request``; runs in a pool thread."""
        try:
            return self._route(request)
        except Exception as err:  # noqa: BLE001 - answer 500, keep serving
            log.error("http_request_failed", path=request.path, error=repr(err))
            return _Response(HTTPStatus.INTERNAL_SERVER_ERROR, _INTERNAL_ERROR)

    @staticmethod
    def _metrics_response(request: _Request, body: Callable[..., Body | None]) -> _Response | None:
        """``/metrics`` in the format and encoding ``request`` asks for, by ``body``;
        None when ``body`` has none (``metrics_ready`` with nothing cached)."""
        accept, coding = request.headers.get("accept", ""), request.headers.get("accept-encoding")
        negotiate = _negotiate if len(accept) + len(coding or "") <= _REMEMBERED else _negotiated
        openmetrics, content_type, gz = negotiate(accept, coding)
        data = body(openmetrics=openmetrics, gz=gz)
        if data is None:
            return None
        encoding = (("Content-Encoding", "gzip"),) if gz else ()
        return _Response(HTTPStatus.OK, data, content_type, encoding)

    def _route(self, request: _Request) -> _Response:
        site, path = self.site, request.path
        if path == "/metrics":
            response = self._metrics_response(request, site.metrics)
            assert response is not None  # MetricsBody always answers
            return response
        if path in _PROBES:
            ok, text = site.health() if path == "/healthz" else site.readiness()
            return _text(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, text)
        if path == "/":
            return _Response(HTTPStatus.OK, site.index.render(), "text/html; charset=utf-8")
        return _text(HTTPStatus.NOT_FOUND, "not found: try /metrics, /healthz, /readyz or /")
