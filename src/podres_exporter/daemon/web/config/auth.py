"""Basic auth: the ``basic_auth_users`` section, the ``Authorization`` header's
credentials, and the bcrypt check (constant work whether or not the user exists)."""

from __future__ import annotations

import base64
import binascii
import functools
import re

import bcrypt

from podres_exporter.daemon.web.config.source import Source, kind

BCRYPT_MAX_PASSWORD_BYTES = 72
"""bcrypt reads at most 72 bytes; a longer password is refused (401), never truncated."""


@functools.cache
def dummy_hash(cost: int) -> bytes:
    """Checked against at ``cost`` in place of a user's own hash (an unknown user, or
    one whose hash has another cost): every check goes through one hash of each cost
    configured, so that the timing tells neither which names exist nor their costs
    (:meth:`WebConfig.plan`). Made on first use: loading a file costs no bcrypt."""
    return bcrypt.hashpw(b"podres-no-such-user", bcrypt.gensalt(rounds=cost))


CACHE_SIZE = 64  # successful checks remembered: a scrape every 15 s must not cost a bcrypt
DEFAULT_COST = 10


def basic_credentials(header: str | None) -> tuple[str, bytes] | None:
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


def check_password(password: bytes, hashed: bytes) -> bool:
    """bcrypt's verdict; False (after the same work) for a password bcrypt refuses."""
    too_long = len(password) > BCRYPT_MAX_PASSWORD_BYTES
    try:
        ok = bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD_BYTES], hashed)
    except ValueError:  # a malformed hash: load refuses those, this is a last guard
        return False
    return ok and not too_long


BCRYPT = re.compile(rb"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


def parse_users(source: Source, value: object) -> dict[str, bytes]:
    where = "basic_auth_users"
    if value is None:
        return {}
    if not isinstance(value, dict):
        source.fail(where, f"is {kind(value)}, not a mapping of user names to bcrypt hashes")
    users: dict[str, bytes] = {}
    for user, hashed in value.items():
        if not isinstance(user, str):
            source.fail(
                where,
                f"the user name {user!r} is {kind(user)}, not a string: quote it",
            )
        if ":" in user:
            source.fail(f"{where}.{user}", "a user name cannot hold ':' (RFC 7617)")
        if not isinstance(hashed, str):
            source.fail(f"{where}.{user}", f"is {kind(hashed)}, not a bcrypt hash")
        encoded = hashed.strip().encode("utf-8")
        if not BCRYPT.fullmatch(encoded):
            source.fail(
                f"{where}.{user}",
                "is not a bcrypt hash ($2a$, $2b$ or $2y$, cost 04 to 31, 60 characters): "
                "make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`",
            )
        users[user] = encoded
    return users
