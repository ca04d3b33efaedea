"""One loaded web-config: :class:`WebConfig` (the TLS context, the users, the response
headers) and :func:`load_web_config`."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ssl
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from podres_exporter.daemon.web.config.auth import (
    CACHE_SIZE,
    DEFAULT_COST,
    basic_credentials,
    check_password,
    dummy_hash,
)
from podres_exporter.daemon.web.config.schema import HEADER_NAME, UNPRINTABLE, Spec, parse
from podres_exporter.daemon.web.config.source import Source
from podres_exporter.daemon.web.config.tls import context


@dataclass(frozen=True, slots=True, eq=False)
class WebConfig:
    """One loaded web-config file.

    ``tls``: the server context (None: plain HTTP). ``users``: user name to bcrypt
    hash (empty: no authentication). ``headers``: added to every response.
    ``client_cert_required``: every path but the probes needs a client certificate that
    the TLS context verified (``RequireAndVerifyClientCert``; the context itself only
    asks for one, so that the kubelet's probes, which send none, get through).
    """

    tls: ssl.SSLContext | None = None
    client_cert_required: bool = False
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
            if not HEADER_NAME.fullmatch(name) or UNPRINTABLE.search(value):
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
        credentials = basic_credentials(authorization)
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
        return basic_credentials(authorization) is not None

    def authorized(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header value lets the request in.

        True when no user is configured. Otherwise only ``Basic`` credentials of a
        configured user whose password matches its bcrypt hash pass. A malformed
        header is refused at once (see :meth:`well_formed`); an unknown user and a
        password over 72 bytes are refused after the same bcrypt work as a wrong
        password, and every user costs one bcrypt at each configured cost
        (:meth:`plan`), so the answer's timing says nothing about names, their costs
        or passwords.
        Successful checks are remembered (a digest of user, password and hash), so a
        scraper does not pay a bcrypt per scrape. Never raises.
        """
        if not self.users:
            return True
        credentials = basic_credentials(authorization)
        if credentials is None:
            return False
        if self.cached(authorization):
            return True
        user, password = credentials
        hashed = self._hash_of(user)
        key = self._key(user, password)
        ok = False
        with self._work:
            for candidate in self.plan(hashed):
                matched = check_password(password, candidate)
                ok = ok or (matched and candidate is hashed)
        if ok:
            with self._lock:
                self._ok[key] = None
                while len(self._ok) > CACHE_SIZE:
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

    def plan(self, hashed: bytes | None) -> tuple[bytes, ...]:
        """The hashes a check of a user with ``hashed`` (None: unknown) goes through:
        one per bcrypt cost configured, ascending, the user's own at its cost and a
        dummy at the others. Every user, known or not, whatever its cost, thus costs
        the same bcrypt work, and the timing tells neither names nor costs. With one
        cost configured (the usual file) that is one bcrypt."""
        own = _cost_of(hashed) if hashed is not None else None
        return tuple(
            hashed if cost == own and hashed is not None else dummy_hash(cost)
            for cost in self.costs
        )

    @property
    def costs(self) -> tuple[int, ...]:
        """The bcrypt costs of the configured hashes, each once, ascending."""
        return tuple(sorted({_cost_of(hashed) for hashed in self.users.values()}))


def _cost_of(hashed: bytes) -> int:
    """The cost of a bcrypt hash (``$2b$NN$...``); the default for a malformed one."""
    with contextlib.suppress(ValueError):
        return int(hashed[4:6])
    return DEFAULT_COST


WebConfigProvider = Callable[[], WebConfig | None]
"""What the web server calls for the configuration in force (None: plain, open)."""


def load_web_config(path: str) -> WebConfig:
    """Read a web-config file and everything it names.

    Raises :class:`ConfigError` naming the file and the key for anything wrong: the file
    unreadable, not UTF-8, not YAML, empty; an unknown key or a value of the wrong type;
    a value Python's ``ssl`` cannot honour; a missing or unreadable certificate, key or
    CA file; a key that does not match its certificate; a password that is not a bcrypt
    hash.
    """
    source = Source(path)
    return build(source, parse(source))


def build(source: Source, spec: Spec) -> WebConfig:
    """The :class:`WebConfig` of a parsed file: reads the certificate, key and CA."""
    tls = context(source, spec.tls) if spec.tls is not None else None
    required = spec.tls is not None and spec.tls.verify == ssl.CERT_REQUIRED
    return WebConfig(tls=tls, client_cert_required=required, users=spec.users, headers=spec.headers)
