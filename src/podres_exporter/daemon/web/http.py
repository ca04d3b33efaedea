"""HTTP/1.1 framing: a request head read under its size limit and parsed strictly, and
an answer's head written.

Nothing here knows the site or the connection: bytes in, a :class:`Request` or the head
of a :class:`Response` out. The head is bounded (:func:`read_head`: larger than the limit
is :class:`HeadTooLarge`, 431) and parsed so that no proxy in front can read a different
request into the same bytes (:func:`parse_head`).
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus

__all__ = [
    "TEXT",
    "Body",
    "HeadTooLarge",
    "Request",
    "Response",
    "head_bytes",
    "parse_head",
    "read_head",
    "refusal",
    "size",
    "text",
]

TEXT = "text/plain; charset=utf-8"

# A response body: its bytes, or pieces of them that are written one after the other
# (a large cached part and a small fresh one need not be joined for each request).
Body = bytes | tuple[bytes, ...]

_METHODS = frozenset({"GET", "HEAD"})
_VERSIONS = frozenset({"HTTP/1.0", "HTTP/1.1"})
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 5.6.2
_NOT_IN_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # controls but tab (RFC 9110 5.5)
_BARE_LF = re.compile(rb"(?<!\r)\n")
_NOT_IN_PART = re.compile(rb"[\x00-\x20\x7f]")  # request-line parts: no control, no space


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed request head. Header names are lower-case; repeated headers are joined
    with ``", "`` (RFC 9110 5.3)."""

    method: str
    path: str
    version: str
    headers: dict[str, str]
    keep_alive: bool  # whether the client keeps the connection after the answer
    has_body: bool  # whether a body follows the head (refused: none is expected)


@dataclass(frozen=True, slots=True)
class Response:
    """An answer before it is framed: status, body, content type, its own headers."""

    status: HTTPStatus
    body: Body
    content_type: str = TEXT
    headers: tuple[tuple[str, str], ...] = ()


def text(status: HTTPStatus, line: str, *headers: tuple[str, str]) -> Response:
    """A plain-text answer of one line."""
    return Response(status, f"{line}\n".encode(), TEXT, headers)


class HeadTooLarge(Exception):
    """The request head is longer than the limit (answered 431)."""


async def read_head(
    reader: asyncio.StreamReader, first: bytes, limit: int
) -> tuple[bytes | None, bytes]:
    """The request head that starts with ``first``, through its blank line, read as it
    arrives, and what followed it (a pipelined request's start). The head is None as
    soon as a line ends in a bare LF (no waiting for a CRLF CRLF that will not come).
    :class:`HeadTooLarge` past ``limit`` bytes; IncompleteReadError when the client
    stops sending first."""
    data, seen = first, 0  # seen: bytes already searched (for an end and a bare LF)
    while True:
        end = data.find(b"\r\n\r\n", max(0, seen - 3))
        stop = len(data) if end < 0 else end + 4
        if _BARE_LF.search(data, max(0, seen - 1), stop):
            return None, b""
        if stop > limit:
            raise HeadTooLarge
        if end >= 0:
            return data[:stop], data[stop:]
        seen = len(data)
        more = await reader.read(limit + 1 - seen)
        if not more:
            raise asyncio.IncompleteReadError(data, None)
        data += more


def parse_head(head: bytes) -> Request | None:
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
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "close" not in tokens if version == "HTTP/1.1" else "keep-alive" in tokens
    length = headers.get("content-length", "0").strip()
    has_body = "transfer-encoding" in headers or length != "0"
    return Request(method, target.split("?", 1)[0], version, headers, keep_alive, has_body)


def refusal(request: Request | None) -> Response | None:
    """The answer to a request that is refused whatever it asks (the connection then
    closes): malformed, a method other than GET and HEAD, a body; None for the rest."""
    if request is None:
        return text(HTTPStatus.BAD_REQUEST, "bad request")
    if request.method not in _METHODS:
        allow = ("Allow", "GET, HEAD")
        return text(HTTPStatus.METHOD_NOT_ALLOWED, "only GET and HEAD are served", allow)
    if request.has_body:
        return text(HTTPStatus.BAD_REQUEST, "a request body is not accepted")
    return None


def size(body: Body) -> int:
    """The body's length in bytes."""
    return sum(map(len, body)) if isinstance(body, tuple) else len(body)


def head_bytes(response: Response, *, connection: str | None, extra: bytes) -> bytes:
    """The status line and headers of ``response``: ``Server`` (the product alone: no
    version of ours or of Python), ``Date``, ``Content-Type``, ``Content-Length``, its
    own headers (a character Latin-1 lacks is a ``?``), then ``extra`` (the web
    config's, encoded when it was loaded: nothing here can fail to encode), then the
    ``Connection`` header when ``connection`` is given (``close``, ``keep-alive``)."""
    status = response.status
    lines = [
        f"HTTP/1.1 {status.value} {status.phrase}\r\nServer: podres\r\n",
        f"Date: {formatdate(time.time(), usegmt=True)}\r\n",
        f"Content-Type: {response.content_type}\r\n",
        f"Content-Length: {size(response.body)}\r\n",
        *(f"{name}: {value}\r\n" for name, value in response.headers),
    ]
    own = "".join(lines).encode("latin-1", "replace")
    close = f"Connection: {connection}\r\n".encode("latin-1") if connection else b""
    return b"".join((own, extra, close, b"\r\n"))
