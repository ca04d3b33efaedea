"""Sending: the one way an answer leaves (:func:`send`), and how a connection closes.

Every answer, whatever it answers (a scrape, a probe, a 401, a 431, the 503 of a full
server), is a head and a body given to :func:`send` on the connection's stream. The body
goes in slices of :data:`WRITE_SLICE`, each once the transport has handed the one before
to the kernel, so a client that reads slowly or not at all holds at most a slice of our
memory in the socket transport's buffer (asyncio copies there what the kernel does not
take at once; under TLS, the slice encrypted); a body given as
pieces (a large cached part and a small fresh one) is never joined whole. A reader that
keeps up costs no copy: each slice goes from the body straight to the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

from podres_exporter.daemon.web.http import Body

__all__ = [
    "CLOSE_TIMEOUT_S",
    "WRITE_SLICE",
    "buffer_at_most_a_slice",
    "close",
    "drop",
    "send",
    "send_and_close",
    "slices",
]

# A response body is written in slices of this size, each once the previous one is with
# the kernel: a client that reads slowly holds at most about this much of our memory.
WRITE_SLICE = 64 * 1024
# A closed connection's last bytes (and TLS close_notify) get this long, then are dropped.
CLOSE_TIMEOUT_S = 2.0
# How much of a refused request is read (and dropped) at a time before closing.
_DISCARD_BYTES = 16 * 1024


def slices(head: bytes, body: Body, size: int) -> Iterator[bytes | memoryview]:
    """The bytes of ``head`` then ``body`` in order, in slices of ``size`` (the last one
    shorter): views of one piece, or the join of parts of several. Nothing longer than a
    slice is copied."""
    pieces = (head, *body) if isinstance(body, tuple) else (head, body)
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


async def send(
    writer: asyncio.StreamWriter,
    head: bytes,
    body: Body,
    waiting: Callable[[bool], None] | None = None,
) -> None:
    """``head`` and ``body``; returns once the last byte is with the kernel (OSError
    when the connection is lost first). The one path by which an answer leaves.
    ``waiting(True)`` is called when the answer waits for the client to read (the
    kernel takes no more), ``waiting(False)`` when it goes on.

    Each slice waits until the transport has handed the one before to the kernel (its
    high-water mark is 0: see :func:`buffer_at_most_a_slice`). Between slices the loop
    runs (always under TLS), so that a connection lost meanwhile is noticed before the
    next write: asyncio warns on stderr about every write to a lost connection past the
    fifth, and a TLS stream learns of the loss only then."""
    transport = writer.transport
    tls = writer.get_extra_info("ssl_object") is not None
    for i, piece in enumerate(slices(head, body, WRITE_SLICE)):
        if i and tls:
            await asyncio.sleep(0)
        if transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        writer.write(piece)
        if transport.get_write_buffer_size():
            if waiting is not None:
                waiting(True)
            try:
                await writer.drain()
            finally:
                if waiting is not None:
                    waiting(False)


def buffer_at_most_a_slice(transport: asyncio.WriteTransport) -> None:
    """``transport`` asks for more only once it has handed all it holds to the kernel:
    a writer's drain() waits while it holds a byte, so it never holds more than the
    slice last written (asyncio's default lets 64 KiB pile up on top of each slice).

    asyncio's socket transport pauses its writer above the high-water mark, its TLS
    transport at or above it (``asyncio/selector_events.py``, ``asyncio/sslproto.py``):
    0 and 1 both mean "while a byte is held"."""
    tls = transport.get_extra_info("ssl_object") is not None
    transport.set_write_buffer_limits(high=1 if tls else 0, low=0)


async def send_and_close(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: Body
) -> None:
    """An answer that ends its connection, whatever the client still sends: :func:`send`,
    then the client's bytes read and dropped until it closes (for a moment at most):
    closing with unread data resets the connection, and the reset could overtake the
    answer."""
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await send(writer, head, body)
            if writer.can_write_eof():
                writer.write_eof()
            while await reader.read(_DISCARD_BYTES):
                pass
    except (OSError, TimeoutError):
        pass
    await close(writer)


async def close(writer: asyncio.StreamWriter) -> None:
    """Close after the last bytes are out, or drop the connection when they do not go.
    A plain connection with nothing left to send closes by itself: no wait (TLS still
    sends its close_notify)."""
    writer.close()
    plain = writer.get_extra_info("ssl_object") is None
    if plain and not writer.transport.get_write_buffer_size():
        return
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await writer.wait_closed()
    except (OSError, TimeoutError):
        drop(writer.transport)


def drop(transport: asyncio.WriteTransport, reader: asyncio.StreamReader | None = None) -> None:
    """Close ``transport`` at once. One that has closed already is left as it is: Python
    3.11's socket transport, once closed after flushing its buffer, has let go of its
    loop, and its abort() fails on that.

    Then the reference cycles of Python's streams are broken, so that the connection's
    memory (its TLS protocol and buffers included) is freed when it closes, not at the
    next full collection. The socket transport keeps a bound method of itself
    (``_read_ready_cb``, called only while it reads, which a closed transport never does
    again) for as long as it lives; and the exception that ended a stream (``reader``
    keeps it, and raises that very object again from drain() and read()) holds,
    in its traceback, the frames that hold the stream. Left alone, every connection
    leaves objects that only the garbage collector frees; a stream of new connections
    fills its young generation with them, and the collection that frees thousands at
    once stops the loop for tens of milliseconds."""
    with contextlib.suppress(AttributeError):
        transport.abort()
    state = getattr(transport, "__dict__", {})
    if state.get("_read_ready_cb") is not None:
        state["_read_ready_cb"] = None
    err = reader.exception() if reader is not None else None
    if err is not None:
        err.__traceback__ = None
