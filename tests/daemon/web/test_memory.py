"""What a connection holds of the server's memory, over real sockets: no TLS state before
a client's first byte, a TLS read buffer of one record, at most a slice buffered per
buffer for a client that does not read, a per-address cap that still lets the probes in,
and freed memory given back after a burst of connections."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import ssl
import time
from asyncio import selector_events, sslproto
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from podres_exporter.daemon.web import Index, Limits, Site, WebServer
from podres_exporter.daemon.web.config import WebConfig
from podres_exporter.daemon.web.send import WRITE_SLICE
from podres_exporter.daemon.web.stream import TLS_READ_BUFFER, TlsProtocol
from podres_exporter.daemon.web.trim import TRIM_AFTER_CLOSED, malloc_trim
from tests.daemon.web.support import closed_by_server, read_response
from tests.daemon.web.tlsutil import issue, make_ca

BODY = bytes(range(256)) * (16 * 1024)  # 4 MiB: far more than the kernel buffers take
SITE = Site(
    metrics=lambda *, openmetrics, gz: BODY,
    health=lambda: (True, "ok"),
    readiness=lambda: (True, "ready"),
    index=Index("t", "0", "s", "h", "r"),
)
# What a buffer may hold beyond a slice: TLS records' headers and tags (29 bytes a 16 KiB
# record under TLS 1.3) and the response head.
SLACK = 2048


@pytest.fixture(scope="module")
def server_tls(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    """A server context with a certificate of a test CA."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*issue(make_ca(), "server").write(tmp_path_factory.mktemp("pki"), "s"))
    return ctx


@pytest.fixture
def serve() -> Iterator[Callable[..., WebServer]]:
    servers: list[WebServer] = []

    def start(tls: ssl.SSLContext | None = None, limits: Limits | None = None) -> WebServer:
        config = WebConfig(tls=tls)
        server = WebServer(
            ("127.0.0.1", 0), SITE, web_config=lambda: config, limits=limits or Limits()
        )
        server.start("mem-http")
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


def unverified() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def live(kind: type) -> list[object]:
    """The live objects of ``kind`` in this process (the server's thread included)."""
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, kind)]


def connect(server: WebServer, source: str = "127.0.0.1", rcvbuf: int = 0) -> socket.socket:
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", server.port))
    return sock


def wait_until(ok: Callable[[], bool], within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while not ok():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_tls_connection_that_has_sent_nothing_has_no_tls_state(
    serve: Callable[..., WebServer], server_tls: ssl.SSLContext
) -> None:
    """20 connections to a TLS port that send nothing: no TLS protocol (and its read
    buffer) exists for them; the first byte of a handshake makes one."""
    server = serve(server_tls)
    silent = [connect(server) for _ in range(20)]
    try:
        assert wait_until(lambda: server.open_connections == 20)
        time.sleep(0.2)
        assert live(sslproto.SSLProtocol) == []
        with unverified().wrap_socket(connect(server)) as tls_client:
            tls_client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(tls_client)[0] == 200
            protocols = live(sslproto.SSLProtocol)
            assert len(protocols) == 1
    finally:
        for sock in silent:
            sock.close()


def test_a_failed_tls_handshake_leaves_nothing_for_the_collector(
    serve: Callable[..., WebServer], server_tls: ssl.SSLContext
) -> None:
    """20 plain HTTP requests sent to a TLS port, one after another: once they are
    closed, no TLS protocol of theirs is left, even with the collector off (a reference
    cycle kept each one, and its buffers, until a full collection)."""
    server = serve(server_tls)
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            with connect(server) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                with contextlib.suppress(OSError):
                    while sock.recv(65536):
                        pass
        assert wait_until(lambda: server.open_connections == 0)
        time.sleep(0.2)
        left = [o for o in gc.get_objects() if isinstance(o, sslproto.SSLProtocol)]
        assert left == []
    finally:
        gc.enable()


def test_the_tls_read_buffer_holds_one_record_not_256_kib() -> None:
    """Our TLS protocol allocates a read buffer of TLS_READ_BUFFER (asyncio's own is
    256 KiB): guards against a Python whose SSLProtocol no longer sizes its buffer by
    max_size, or builds its transport another way than we copy."""
    assert sslproto.SSLProtocol.max_size == 256 * 1024
    assert hasattr(selector_events.BaseSelectorEventLoop, "_make_ssl_transport")
    assert hasattr(sslproto.SSLProtocol, "_get_write_buffer_size")  # TlsProtocol adds to it
    loop = asyncio.new_event_loop()
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        protocol = TlsProtocol(
            loop, asyncio.Protocol(), ctx, loop.create_future(), server_side=True
        )
        assert len(protocol._ssl_buffer) == TLS_READ_BUFFER  # type: ignore[attr-defined]
        app = protocol._app_transport
        assert app is not None
        app._closed = True  # never connected: nothing to close
    finally:
        loop.close()


def buffered(kind: str) -> list[int]:
    """Bytes each live server-side transport holds for its client: the socket
    transport's buffer, plus the TLS protocol's output (``kind``: "tls") per connection."""
    transports = live(selector_events._SelectorSocketTransport)  # type: ignore[attr-defined]
    if kind == "plain":
        return [t.get_write_buffer_size() for t in transports]  # type: ignore[attr-defined]
    protocols: list[Any] = live(sslproto.SSLProtocol)
    return [
        p._outgoing.pending + p._write_buffer_size + p._transport.get_write_buffer_size()
        for p in protocols
        if p._transport is not None
    ]


@pytest.mark.parametrize("kind", ["plain", "tls"])
def test_a_client_that_does_not_read_holds_at_most_a_slice_per_buffer(
    serve: Callable[..., WebServer], server_tls: ssl.SSLContext, kind: str
) -> None:
    """Five clients ask for a 4 MiB body and read nothing: once the kernel takes no
    more, each holds at most one write slice in the socket transport and, under TLS,
    nothing more in the TLS protocol's output."""
    tls = server_tls if kind == "tls" else None
    server = serve(tls)
    clients = []
    try:
        for _ in range(5):
            sock = connect(server, rcvbuf=4096)
            if tls is not None:
                sock = unverified().wrap_socket(sock)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            clients.append(sock)
        time.sleep(1.0)  # the kernel's buffers fill, the server's transports stall
        held = buffered(kind)
        assert len(held) == 5
        assert max(held) > 0  # they did stall
        assert max(held) <= WRITE_SLICE + SLACK, held
    finally:
        for sock in clients:
            sock.close()


def test_a_large_answer_over_tls_arrives_whole_and_in_order(
    serve: Callable[..., WebServer], server_tls: ssl.SSLContext
) -> None:
    """The 4 MiB body over TLS, read slowly at first and then at once, twice on one
    kept-alive connection: every byte, in order."""
    server = serve(server_tls)
    with unverified().wrap_socket(connect(server, rcvbuf=4096)) as sock:
        for _ in range(2):
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.3)  # the server stalls on the full kernel buffers meanwhile
            status, _, body = read_response(sock)
            assert status == 200
            assert body == BODY


def test_one_address_holds_at_most_its_cap_and_the_longest_idle_gives_way(
    serve: Callable[..., WebServer],
) -> None:
    """max_connections_per_address=3: a fourth idle connection from 127.0.0.1 closes
    that address's longest idle one; 127.0.0.2 still gets a connection of its own."""
    server = serve(limits=Limits(max_connections=10, max_connections_per_address=3))
    held = [connect(server) for _ in range(3)]
    time.sleep(0.1)
    try:
        other = connect(server, "127.0.0.2")
        assert wait_until(lambda: server.open_connections == 4)
        with connect(server) as newcomer:
            newcomer.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(newcomer)[0] == 200
            assert closed_by_server(held[0], 5)
            assert not closed_by_server(other, 0.2)
            assert server.open_connections == 4
        other.close()
    finally:
        for sock in held:
            sock.close()


def test_a_probe_is_answered_while_its_address_holds_only_non_reading_clients(
    serve: Callable[..., WebServer],
) -> None:
    """Every connection open, all of 127.0.0.1 and busy with an answer its client does
    not read: a probe from 127.0.0.1 closes the one that has waited longest, and is
    answered (not 503)."""
    server = serve(limits=Limits(max_connections=4, max_connections_per_address=4))
    stalled = []
    try:
        for _ in range(4):
            sock = connect(server, rcvbuf=4096)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            stalled.append(sock)
        time.sleep(1.0)  # every answer waits for its client
        with connect(server) as probe:
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(probe)[0] == 200
    finally:
        for sock in stalled:
            sock.close()


@pytest.mark.skipif(not malloc_trim(), reason="no glibc malloc_trim here")
def test_freed_memory_is_given_back_after_a_burst_of_closed_connections(
    serve: Callable[..., WebServer],
) -> None:
    """TRIM_AFTER_CLOSED connections opened and closed: the server trims once after
    the burst (glibc's malloc_trim), not for each connection."""
    server = serve()
    assert server._trimmer is not None
    assert server._trimmer.trims == 0
    for _ in range(TRIM_AFTER_CLOSED + 5):
        connect(server).close()
    assert wait_until(lambda: server._trimmer is not None and server._trimmer.trims == 1)
    time.sleep(1.5)
    assert server._trimmer.trims == 1
