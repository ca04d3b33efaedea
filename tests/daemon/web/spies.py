"""Helpers for the web-config tests: bcrypt watched or held back (the real bcrypt still
runs), and one HTTPS GET with a given client context."""

from __future__ import annotations

import http.client
import ssl
import threading

import bcrypt
import pytest


def record_bcrypt(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The hashes bcrypt checks against from now on, in order (the checks still run)."""
    checked: list[bytes] = []
    real = bcrypt.checkpw

    def recording(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", recording)
    return checked


def hold_bcrypt(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event every bcrypt check from now on waits for (10 s at most) before it runs."""
    release = threading.Event()
    real = bcrypt.checkpw

    def held(password: bytes, hashed: bytes) -> bool:
        release.wait(10)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", held)
    return release


def https_get(
    port: int, ctx: ssl.SSLContext, path: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """GET ``path`` from 127.0.0.1:``port`` over TLS with ``ctx``: status and body."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()
