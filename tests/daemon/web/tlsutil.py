"""Certificates for TLS tests, made in-process: no ``openssl`` run, no ``cryptography``.

A small X.509 writer (RSA 2048 keys, SHA-256 signatures, DER by hand): a CA, server and
client certificates it issues, self-signed ones, and :func:`handshake`, a real OpenSSL
handshake between two contexts over memory buffers. Enough for tests of TLS set-up,
certificate rotation and client certificates; never for anything but tests.

    ca = make_ca()
    server = issue(ca, "localhost")
    cert, key = server.write(tmp_path, "server")
    client_ctx = client_context(ca)
    result = handshake(server_ctx, client_ctx)
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import ipaddress
import math
import os
import secrets
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Handshake",
    "Issued",
    "RsaKey",
    "client_context",
    "handshake",
    "issue",
    "make_ca",
    "new_key",
    "pem_to_der",
]

# ----------------------------------------------------------------------------- DER


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(raw)]) + raw


def _tlv(tag: int, content: bytes) -> bytes:
    return bytes([tag]) + _length(len(content)) + content


def _int(value: int) -> bytes:
    return _tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _seq(*items: bytes) -> bytes:
    return _tlv(0x30, b"".join(items))


def _oid(dotted: str) -> bytes:
    first, second, *rest = (int(part) for part in dotted.split("."))
    body = bytearray([40 * first + second])
    for arc in rest:
        chunk = [arc & 0x7F]
        rest_of_arc = arc >> 7
        while rest_of_arc:
            chunk.append(0x80 | (rest_of_arc & 0x7F))
            rest_of_arc >>= 7
        body.extend(reversed(chunk))
    return _tlv(0x06, bytes(body))


def _bits(data: bytes, unused: int = 0) -> bytes:
    return _tlv(0x03, bytes([unused]) + data)


def _octets(data: bytes) -> bytes:
    return _tlv(0x04, data)


def _time(moment: dt.datetime) -> bytes:
    if moment.year < 2050:
        return _tlv(0x17, moment.strftime("%y%m%d%H%M%SZ").encode())
    return _tlv(0x18, moment.strftime("%Y%m%d%H%M%SZ").encode())


def _name(common_name: str) -> bytes:
    return _seq(_tlv(0x31, _seq(_oid("2.5.4.3"), _tlv(0x0C, common_name.encode()))))


def _extension(oid: str, value: bytes, *, critical: bool = False) -> bytes:
    flag = _tlv(0x01, b"\xff") if critical else b""
    return _seq(_oid(oid), flag, _octets(value))


_NULL = b"\x05\x00"
_RSA = _seq(_oid("1.2.840.113549.1.1.1"), _NULL)
_SHA256_WITH_RSA = _seq(_oid("1.2.840.113549.1.1.11"), _NULL)
_SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")


def _pem(label: str, der: bytes) -> str:
    text = base64.b64encode(der).decode()
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n"


def pem_to_der(pem: bytes) -> bytes:
    """The DER of the first PEM block in ``pem``."""
    return ssl.PEM_cert_to_DER_cert(pem.decode())


# ----------------------------------------------------------------------------- RSA

_SMALL_PRIMES = [p for p in range(3, 2000, 2) if all(p % d for d in range(3, math.isqrt(p) + 1, 2))]
_SMALL_PRODUCT = math.prod(_SMALL_PRIMES)


def _probably_prime(n: int, rounds: int = 24) -> bool:
    if math.gcd(n, _SMALL_PRODUCT) != 1:
        return False
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for _ in range(rounds):
        x = pow(secrets.randbelow(n - 3) + 2, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def _prime(bits: int, e: int) -> int:
    while True:
        # The top two bits set, so that the product of two has exactly 2 * bits bits.
        candidate = secrets.randbits(bits) | (0b11 << (bits - 2)) | 1
        if math.gcd(candidate - 1, e) == 1 and _probably_prime(candidate):
            return candidate


@dataclass(frozen=True)
class RsaKey:
    """An RSA private key."""

    n: int
    e: int
    d: int
    p: int
    q: int

    @property
    def public_der(self) -> bytes:
        """The SubjectPublicKeyInfo."""
        return _seq(_RSA, _bits(_seq(_int(self.n), _int(self.e))))

    @property
    def key_id(self) -> bytes:
        """The subject key identifier (RFC 5280 4.2.1.2, method 1)."""
        return hashlib.sha1(_seq(_int(self.n), _int(self.e))).digest()  # noqa: S324 - an id

    def pem(self) -> bytes:
        """The key as PKCS#8 PEM, unencrypted."""
        pkcs1 = _seq(
            _int(0),
            *(_int(v) for v in (self.n, self.e, self.d, self.p, self.q)),
            _int(self.d % (self.p - 1)),
            _int(self.d % (self.q - 1)),
            _int(pow(self.q, -1, self.p)),
        )
        return _pem("PRIVATE KEY", _seq(_int(0), _RSA, _octets(pkcs1))).encode()

    def sign(self, data: bytes) -> bytes:
        """PKCS#1 v1.5 signature with SHA-256."""
        size = (self.n.bit_length() + 7) // 8
        digest = _SHA256_DIGEST_INFO + hashlib.sha256(data).digest()
        padded = b"\x00\x01" + b"\xff" * (size - len(digest) - 3) + b"\x00" + digest
        return pow(int.from_bytes(padded, "big"), self.d, self.n).to_bytes(size, "big")


def new_key(bits: int = 2048) -> RsaKey:
    """A fresh RSA key (a fraction of a second for 2048 bits)."""
    e = 65537
    while True:
        p, q = _prime(bits // 2, e), _prime(bits // 2, e)
        if p != q:
            break
    d = pow(e, -1, (p - 1) * (q - 1))
    return RsaKey(n=p * q, e=e, d=d, p=p, q=q)


@functools.cache
def _pooled_key(index: int) -> RsaKey:
    return new_key()


# ---------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, as PEM."""

    common_name: str
    cert_pem: bytes
    key: RsaKey

    @property
    def key_pem(self) -> bytes:
        return self.key.pem()

    @property
    def der(self) -> bytes:
        return pem_to_der(self.cert_pem)

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Write ``NAME.crt`` and ``NAME.key`` in ``directory``; return their paths."""
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        cert.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        key.chmod(0o600)
        return cert, key


_SERVER_AUTH = "1.3.6.1.5.5.7.3.1"
_CLIENT_AUTH = "1.3.6.1.5.5.7.3.2"


def _certificate(
    *,
    subject: str,
    key: RsaKey,
    issuer: str,
    issuer_key: RsaKey,
    ca: bool,
    dns: Iterable[str],
    ips: Iterable[str],
    days: int,
) -> bytes:
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    extensions = [
        _extension("2.5.29.19", _seq(_tlv(0x01, b"\xff")) if ca else _seq(), critical=True),
        # keyCertSign, cRLSign, digitalSignature for a CA; digitalSignature and
        # keyEncipherment otherwise (named bits, trailing zero bits unused).
        _extension("2.5.29.15", _bits(b"\x86", 1) if ca else _bits(b"\xa0", 5), critical=True),
        _extension("2.5.29.14", _octets(key.key_id)),
        _extension("2.5.29.35", _seq(_tlv(0x80, issuer_key.key_id))),
    ]
    if not ca:
        extensions.append(_extension("2.5.29.37", _seq(_oid(_SERVER_AUTH), _oid(_CLIENT_AUTH))))
        names = [_tlv(0x82, name.encode()) for name in dns]
        names += [_tlv(0x87, ipaddress.ip_address(ip).packed) for ip in ips]
        if names:
            extensions.append(_extension("2.5.29.17", _seq(*names)))
    tbs = _seq(
        _tlv(0xA0, _int(2)),
        _int(secrets.randbits(63) + 1),
        _SHA256_WITH_RSA,
        _name(issuer),
        _seq(_time(now - dt.timedelta(hours=1)), _time(now + dt.timedelta(days=days))),
        _name(subject),
        key.public_der,
        _tlv(0xA3, _seq(*extensions)),
    )
    der = _seq(tbs, _SHA256_WITH_RSA, _bits(issuer_key.sign(tbs)))
    return _pem("CERTIFICATE", der).encode()


def make_ca(common_name: str = "podres test CA", *, key: RsaKey | None = None) -> Issued:
    """A self-signed CA certificate."""
    key = key or _pooled_key(0)
    pem = _certificate(
        subject=common_name,
        key=key,
        issuer=common_name,
        issuer_key=key,
        ca=True,
        dns=(),
        ips=(),
        days=30,
    )
    return Issued(common_name, pem, key)


def issue(
    ca: Issued | None,
    common_name: str = "localhost",
    *,
    dns: Iterable[str] = ("localhost",),
    ips: Iterable[str] = ("127.0.0.1", "::1"),
    key: RsaKey | None = None,
    days: int = 30,
) -> Issued:
    """A certificate for ``common_name`` (server and client use) signed by ``ca``, or
    self-signed when ``ca`` is None. ``key``: its key (default: one from a small pool,
    so that tests stay fast; pass :func:`new_key` for a key of its own)."""
    key = key or _pooled_key(1)
    pem = _certificate(
        subject=common_name,
        key=key,
        issuer=ca.common_name if ca else common_name,
        issuer_key=ca.key if ca else key,
        ca=False,
        dns=dns,
        ips=ips,
        days=days,
    )
    return Issued(common_name, pem, key)


def pooled_key(index: int) -> RsaKey:
    """The ``index``-th key of a pool made once per test session (0 is the CAs' default,
    1 the issued certificates')."""
    return _pooled_key(index)


# ------------------------------------------------------------------------- handshake


def client_context(ca: Issued, client: Issued | None = None) -> ssl.SSLContext:
    """A client context that trusts ``ca`` (and presents ``client``, if given)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=ca.cert_pem.decode())
    if client is not None:
        # load_cert_chain takes paths only: memory files, closed once read.
        fds = [os.memfd_create("podres-test") for _ in range(2)]
        try:
            os.write(fds[0], client.cert_pem)
            os.write(fds[1], client.key_pem)
            context.load_cert_chain(*(f"/proc/self/fd/{fd}" for fd in fds))
        finally:
            for fd in fds:
                os.close(fd)
    return context


@dataclass(frozen=True)
class Handshake:
    """What a handshake between a server and a client context came to."""

    server_error: ssl.SSLError | None
    client_error: ssl.SSLError | None
    server_cert: bytes | None  # the server certificate the client got, DER
    client_cert: dict[str, object] | None  # the verified client certificate the server got
    version: str | None
    cipher: str | None
    alpn: str | None  # the application protocol the server chose

    @property
    def ok(self) -> bool:
        return self.server_error is None and self.client_error is None


@dataclass
class _Peer:
    """One side of a handshake over memory buffers."""

    tls: ssl.SSLObject
    done: bool = False
    error: ssl.SSLError | None = None

    def step(self, action: Callable[[], object]) -> bool:
        """Run one non-blocking step; whether it completed (an error is kept)."""
        if self.error is not None:
            return False
        try:
            action()
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLError as err:
            self.error = err
            return False
        return True


def handshake(
    server: ssl.SSLContext, client: ssl.SSLContext, *, hostname: str = "localhost"
) -> Handshake:
    """A real TLS handshake (OpenSSL on both sides) over memory buffers, then one byte
    from client to server, so that a refusal in TLS 1.3's last flight shows too."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    s = _Peer(server.wrap_bio(s_in, s_out, server_side=True))
    c = _Peer(client.wrap_bio(c_in, c_out, server_hostname=hostname))
    sent = False
    server_cert: bytes | None = None
    version = cipher = alpn = None
    for _ in range(12):
        if not c.done and c.step(c.tls.do_handshake):
            # Read at once: a later alert from the server ends the session.
            c.done, server_cert, version = True, c.tls.getpeercert(True), c.tls.version()
            cipher = (c.tls.cipher() or (None,))[0]
            alpn = c.tls.selected_alpn_protocol()
        if c.done and not sent:
            sent = c.step(lambda: c.tls.write(b"x"))
        s_in.write(c_out.read())
        s.done = s.done or s.step(s.tls.do_handshake)
        if s.done:
            s.step(lambda: s.tls.read(1))
        c_in.write(s_out.read())
        if c.done:
            c.step(lambda: c.tls.read(1))
    ok = s.done and s.error is None
    return Handshake(
        server_error=s.error,
        client_error=c.error,
        server_cert=server_cert,
        client_cert=dict(s.tls.getpeercert() or {}) if ok else None,
        version=version,
        cipher=cipher,
        alpn=alpn,
    )
