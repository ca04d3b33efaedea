"""How an accepted socket becomes a connection's stream, and what that costs in memory.

A plain connection is a socket transport at once (a few kilobytes). A TLS one gets no
TLS state until its client has sent a byte (:func:`first_byte`): Python 3.11's asyncio
TLS protocol (``asyncio/sslproto.py``, ``SSLProtocol.__init__``) allocates its read
buffer, ``max_size`` (256 KiB), when it is built, before the handshake; a port scan or a
client that connects and waits would cost that much each. When the first byte comes,
the TLS protocol is built here as ``BaseSelectorEventLoop._make_ssl_transport``
(``asyncio/selector_events.py``) builds it, from a subclass whose read buffer holds one
TLS record (:data:`TLS_READ_BUFFER`), whose writer waits until every encrypted byte is
with the kernel (:class:`TlsProtocol`), so that a client that does not read holds at
most one encrypted slice of the answer.
"""

from __future__ import annotations

import asyncio
import socket
from asyncio import sslproto
from ssl import SSLContext

__all__ = ["TLS_READ_BUFFER", "TlsProtocol", "first_byte", "stream"]

# The TLS protocol's read buffer: one TLS record (16 KiB of data, its header, padding and
# tag) fits; a read never needs more, it only takes longer for larger ones.
TLS_READ_BUFFER = 32 * 1024


class TlsProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a read buffer of one record, not 256 KiB, whose writer
    waits until the socket transport has handed every encrypted byte to the kernel.

    asyncio's own counts only what is not yet encrypted or not yet handed to the socket
    transport, and that transport takes a slice whenever its buffer is under its
    high-water mark: a client that does not read held a slice in each, and more. Here
    the socket transport asks for bytes only when its buffer is empty (high-water mark
    0), and the writer's count includes that buffer, so a stalled connection holds one
    encrypted slice."""

    max_size = TLS_READ_BUFFER

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.WriteTransport):
            transport.set_write_buffer_limits(high=0)
        super().connection_made(transport)

    def _get_write_buffer_size(self) -> int:
        raw = self._transport
        held = raw.get_write_buffer_size() if isinstance(raw, asyncio.WriteTransport) else 0
        return int(super()._get_write_buffer_size()) + held  # type: ignore[misc]


async def first_byte(sock: socket.socket, timeout_s: float) -> bool:
    """Whether a byte comes on ``sock`` within ``timeout_s`` (not when the client closes
    or resets it first, as a port scan does); nothing is read."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        async with asyncio.timeout(timeout_s):
            await ready
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(fd)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except (BlockingIOError, InterruptedError):
        return True  # readable a moment ago: the TLS protocol will wait for it
    except OSError:
        return False


async def stream(
    sock: socket.socket,
    tls: SSLContext | None,
    *,
    head_limit: int,
    handshake_timeout_s: float,
    close_timeout_s: float,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """``sock`` as a stream, once its TLS handshake (when ``tls``) is done: OSError when
    it fails, is cut or passes ``handshake_timeout_s``. The reader's head limit is
    ``head_limit``."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=head_limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    if tls is None:
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)
    handshake: asyncio.Future[None] = loop.create_future()
    tls_protocol = TlsProtocol(
        loop,
        protocol,
        tls,
        handshake,
        server_side=True,
        ssl_handshake_timeout=handshake_timeout_s,  # type: ignore[arg-type] # a float works
        ssl_shutdown_timeout=close_timeout_s,
    )
    app = tls_protocol._app_transport  # what _make_ssl_transport returns
    try:
        await loop.connect_accepted_socket(lambda: tls_protocol, sock)
        await handshake
    except BaseException:
        app.close()
        raise
    if app.is_closing():  # the client left during the handshake
        raise ConnectionResetError("the client closed the connection in the TLS handshake")
    return reader, asyncio.StreamWriter(app, protocol, reader, loop)
