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
        password, so the answer's timing says nothing about names or passwords.
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
        with self._work:
            ok = check_password(
                password, hashed if hashed is not None else dummy_hash(self._cost())
            )
        ok = ok and hashed is not None
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

    def _cost(self) -> int:
        """The cost of the first configured hash (``$2b$NN$...``), for the dummy check."""
        for hashed in self.users.values():
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
    return WebConfig(tls=tls, users=spec.users, headers=spec.headers)
