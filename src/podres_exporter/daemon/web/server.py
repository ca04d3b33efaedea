"""The server: one asyncio event loop in one thread, its listening socket, and one task
per connection that reads a request, answers it and waits for the next.

The loop holds every connection; three small fixed thread pools run the synchronous
parts (the :class:`~podres_exporter.daemon.web.site.Site` callables; the probes and the
web-config provider; the bcrypt checks of basic auth, with a bounded queue: a remembered
login never waits for them). A client that has sent nothing costs a socket and a few
kilobytes (no TLS state before its first byte), a slow one at most a slice or two of its
answer (:mod:`~podres_exporter.daemon.web.send`), never a thread; every resource one
client can hold is bounded by :class:`~podres_exporter.daemon.web.limits.Limits`, and
the memory a burst of clients freed is given back (:mod:`~podres_exporter.daemon.web.trim`).
TLS, basic auth and extra response headers come from a
:data:`~podres_exporter.daemon.web.config.WebConfigProvider`, asked at each connection
(TLS) and each request (auth, headers).

One connection's life: accepted (under the caps, or 503), its TLS handshake once its
first byte has come (:mod:`~podres_exporter.daemon.web.stream`), then
requests: the head under its deadline (from the accept, or from its first byte on a
kept-alive connection), the answer (:mod:`~podres_exporter.daemon.web.respond`) written
by :func:`~podres_exporter.daemon.web.send.send` under the write deadline, the idle wait
for the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl
import threading
from collections.abc import Callable
from http import HTTPStatus

import structlog

from podres_exporter.daemon.web import send as sending
from podres_exporter.daemon.web.config import WebConfig, WebConfigProvider
from podres_exporter.daemon.web.http import (
    HeadTooLarge,
    Request,
    Response,
    head_bytes,
    parse_head,
    read_head,
    refusal,
    text,
)
from podres_exporter.daemon.web.limits import (
    Connection,
    Connections,
    Limits,
    MemoryPressure,
    fit_memory_limit,
    fit_open_file_limit,
    memory_limit,
)
from podres_exporter.daemon.web.respond import Responder
from podres_exporter.daemon.web.site import Site
from podres_exporter.daemon.web.stream import first_byte, stream
from podres_exporter.daemon.web.trim import Trimmer

__all__ = ["WebServer", "display_url"]

log = structlog.get_logger(__name__)

# After an accept fails for lack of descriptors, wait this long before accepting again.
_ACCEPT_RETRY_S = 0.5
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

# The default limits: frozen, so one instance is shared safely.
_LIMITS = Limits()


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


def _closer(sock: socket.socket) -> Callable[[object], None]:
    """A done callback that closes ``sock``: a connection's task closes its socket as it
    ends, except a task cancelled before its first step (a newcomer closed at once for
    the next one), whose body never runs. Closing again is a no-op."""
    return lambda _task: sock.close()


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
        limits: Limits = _LIMITS,
    ) -> None:
        self.site = site
        self.limits = limits
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._provider = web_config
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
        memory = memory_limit()
        self.max_connections = fit_open_file_limit(
            fit_memory_limit(limits.max_connections, limits.memory_share, memory)
        )
        self._connections = Connections(
            self.max_connections, limits.max_connections_per_address, MemoryPressure(memory)
        )
        self._trimmer: Trimmer | None = None
        self._refusals: set[asyncio.Task[None]] = set()  # 503s of a full server in flight
        self._stopping = False
        self._accept_failing = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested: asyncio.Event | None = None
        self._answers: Responder | None = None

    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        """The base URL clients use (see :func:`display_url`): ``https://`` when the
        configuration in force has TLS."""
        config = self._answers.config if self._answers is not None else None
        if config is None and self._provider is not None:
            with contextlib.suppress(Exception):  # failing: logged when a client asks
                config = self._provider()
        tls = config is not None and config.tls is not None
        return display_url(str(self.server_address[0]), self.port, tls=tls)

    @property
    def open_connections(self) -> int:
        """Connections open now (counted against ``max_connections``)."""
        return len(self._connections.open)

    @property
    def pending_auth(self) -> int:
        """bcrypt checks submitted and not finished (at most ``max_pending_auth``)."""
        return self._answers.pending_auth if self._answers is not None else 0

    # ---------------------------------------------------------------- life cycle

    def start(self, name: str = "podres-http") -> None:
        """Serve from a daemon thread called ``name`` (its pools' threads are ``name-*``)."""
        if self._thread is not None or self._socket.fileno() < 0:
            raise RuntimeError("a web server starts once, and not after stop()")
        self._answers = Responder(self.site, self._provider, self.limits, name)
        ready_event = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready_event,), name=name, daemon=True
        )
        self._thread.start()
        ready_event.wait()

    def alive(self) -> bool:
        """Whether the server is serving: its loop runs and was not asked to stop."""
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stopping

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
                thread.join(timeout=self.limits.stop_grace_s + 2 * sending.CLOSE_TIMEOUT_S)
        if thread is None or not thread.is_alive():
            self._socket.close()
        if self._answers is not None:
            self._answers.shutdown()

    def _run(self, ready_event: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(_quiet_loop_errors)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready_event))
        except Exception as err:  # noqa: BLE001 - end the thread with one event, not a traceback
            log.error("http_server_failed", error=repr(err))
        finally:
            self._stopping = True
            self._socket.close()
            loop.close()
            ready_event.set()  # when _serve failed before it could

    async def _serve(self, ready_event: threading.Event) -> None:
        loop = asyncio.get_running_loop()
        self._stop_requested = asyncio.Event()
        self._trimmer = Trimmer(loop.call_later)
        accepting = loop.create_task(self._accept())
        stopping = loop.create_task(self._stop_requested.wait())
        ready_event.set()
        await asyncio.wait({accepting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if accepting.done() and not accepting.cancelled() and accepting.exception() is not None:
            log.error("http_server_failed", error=repr(accepting.exception()))
        self._stopping = True
        for task in (accepting, stopping):
            task.cancel()
        await asyncio.gather(accepting, stopping, return_exceptions=True)
        self._socket.close()
        await self._close_connections()

    async def _close_connections(self) -> None:
        """Idle connections now; busy ones after their response or the grace period."""
        connections = list(self._connections.open)
        for conn in connections:
            if not conn.busy and conn.task is not None:
                conn.task.cancel()
        for refused in self._refusals:
            refused.cancel()
        tasks = [c.task for c in connections if c.task is not None] + list(self._refusals)
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.limits.stop_grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for _ in range(3):  # let the aborted transports' connection_lost callbacks run
            await asyncio.sleep(0)

    # ---------------------------------------------------------------- accepting

    async def _accept(self) -> None:
        """Accept connections until cancelled; while accepting fails for lack of
        descriptors, try again every ``_ACCEPT_RETRY_S``."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(self._socket)
            except OSError as err:
                if err.errno in _CONNECTION_ERRNOS:
                    continue  # that one connection failed before it was accepted
                if err.errno not in _RESOURCE_ERRNOS:
                    raise  # the listening socket itself: the server stops (alive() says so)
                if not self._accept_failing:
                    self._accept_failing = True
                    log.warning("http_accept_failed", error=str(err))
                await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            if self._accept_failing:
                self._accept_failing = False
                log.info("http_accept_recovered")
            with contextlib.suppress(OSError):  # a connection reset already
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # TCP, as it listens
            address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            if self._connections.room(address):
                conn = Connection(address=address)
                self._connections.add(conn)
                conn.task = loop.create_task(self._connection(conn, sock))
                conn.task.add_done_callback(_closer(sock))
            else:  # every connection busy answering: this one gets a 503
                refused = loop.create_task(self._connection(None, sock))
                self._refusals.add(refused)
                refused.add_done_callback(self._refusals.discard)
                refused.add_done_callback(_closer(sock))

    # ---------------------------------------------------------------- connections

    async def _connection(self, conn: Connection | None, sock: socket.socket) -> None:
        """Serve ``conn`` until it closes; ``None``: answer 503 (the server is full) and
        close."""
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        try:
            assert self._answers is not None
            try:
                config = await self._answers.current_config()
            except Exception:  # noqa: BLE001 - logged by the Responder; close, unanswered
                return
            opened = await self._open(sock, config.tls if config is not None else None)
            if opened is None:
                return
            reader, writer = opened
            if conn is None:
                full = text(HTTPStatus.SERVICE_UNAVAILABLE, "too many connections")
                await self._refuse(reader, writer, full, config)
            else:
                await self._requests(conn, reader, writer, config)
        except asyncio.CancelledError:
            pass  # stop(), the cap or a deadline: the connection is dropped below
        except Exception as err:  # noqa: BLE001 - one connection's failure is its own
            log.warning("http_connection_failed", error=repr(err))
        finally:
            if conn is not None:
                self._connections.remove(conn)
            if writer is not None:
                sending.drop(writer.transport, reader)
            # Without a stream, the socket is closed by the task's done callback (_closer).
            if self._trimmer is not None:
                self._trimmer.closed()

    async def _open(
        self, sock: socket.socket, tls: ssl.SSLContext | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """``sock`` as a stream; under TLS once its first byte has come and its handshake
        is done, both within ``tls_handshake_timeout_s`` of now (None when not)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.tls_handshake_timeout_s
        if tls is not None and not await first_byte(sock, self.limits.tls_handshake_timeout_s):
            log.debug("http_tls_handshake_failed", error="no byte before the deadline")
            return None
        try:
            reader, writer = await stream(
                sock,
                tls,
                head_limit=self.limits.max_head_bytes,
                handshake_timeout_s=max(0.1, deadline - loop.time()),
                close_timeout_s=sending.CLOSE_TIMEOUT_S,
            )
        except OSError as err:  # TLS errors, resets and the handshake's deadline
            if tls is not None:
                log.debug("http_tls_handshake_failed", error=str(err) or type(err).__name__)
            # Its traceback holds the frames that hold the TLS protocol, whose handshake
            # future holds the error: a cycle that kept each failed handshake's buffers
            # (some 80 KB) until a full collection; 1,000 plain requests to the TLS port
            # took the plugin from 58 to 143 MiB. Cut, they go when the error does.
            err.__traceback__ = None
            return None
        sending.buffer_at_most_a_slice(writer.transport)
        return reader, writer

    async def _requests(
        self,
        conn: Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        config: WebConfig | None,
    ) -> None:
        """Serve requests on one connection until it closes, idles out or misbehaves
        (``config``: the web config it was opened under, for the headers of a refusal). The
        first request's head is due ``head_timeout_s`` after the accept; a later one's
        ``idle_timeout_s`` for its first byte, then ``head_timeout_s`` for the rest."""
        limits = self.limits
        pending: bytes | None = b""  # read past the last head: the next request's start
        while pending is not None and not self._stopping:
            try:
                async with asyncio.timeout(limits.head_timeout_s):
                    head, pending = await read_head(reader, pending, limits.max_head_bytes)
            except TimeoutError:
                log.debug("http_request_head_timeout", timeout_s=limits.head_timeout_s)
                return
            except HeadTooLarge:
                large = text(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large")
                await self._refuse(reader, writer, large, config)
                return
            except (asyncio.IncompleteReadError, OSError):
                return  # the client closed or reset the connection
            request = parse_head(head) if head is not None else None
            refused = refusal(request)
            if refused is not None:
                await self._refuse(reader, writer, refused, config)
                return
            assert request is not None
            if not await self._respond(conn, writer, request):
                return
            if not pending:
                pending = await self._next_request(reader)

    async def _next_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """A kept-alive connection's next request's first bytes; None when the client
        leaves or idles out (closed quietly, as clients expect)."""
        try:
            async with asyncio.timeout(self.limits.idle_timeout_s):
                data = await reader.read(self.limits.max_head_bytes + 1)
        except (TimeoutError, OSError):
            return None
        return data or None

    # ---------------------------------------------------------------- answers

    async def _respond(
        self, conn: Connection, writer: asyncio.StreamWriter, request: Request
    ) -> bool:
        """Answer ``request`` with ``conn`` busy, and close the connection when it does not
        stay, still busy (stop would cut the close short); whether it goes on."""
        self._connections.busy(conn)
        try:
            assert self._answers is not None
            response, extra = await self._answers.response(request, writer.get_extra_info)
            keep_alive = request.keep_alive and not self._stopping
            if not keep_alive:
                connection: str | None = "close"
            else:  # HTTP/1.0 keeps a connection only when the answer says so
                connection = "keep-alive" if request.version == "HTTP/1.0" else None
            head = head_bytes(response, connection=connection, extra=extra)
            body = b"" if request.method == "HEAD" else response.body
            if not await self._send(writer, head, body, request.path, conn):
                return False
            if not keep_alive or self._stopping:
                await sending.close(writer)
                return False
            return True
        finally:
            self._connections.idle(conn)

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        head: bytes,
        body: bytes | tuple[bytes, ...],
        path: str,
        conn: Connection,
    ) -> bool:
        """``head`` and ``body`` by the write deadline; whether they went. While they
        wait for the client to read, ``conn`` may be closed for a newcomer."""

        def waiting(waits: bool) -> None:
            self._connections.waiting(conn, waits)

        try:
            async with asyncio.timeout(self.limits.write_timeout_s):
                await sending.send(writer, head, body, waiting)
        except TimeoutError:
            log.debug("http_write_timeout", timeout_s=self.limits.write_timeout_s)
            return False
        except OSError as err:
            log.debug("http_client_gone", path=path, error=str(err) or type(err).__name__)
            return False
        return True

    @staticmethod
    async def _refuse(
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        response: Response,
        config: WebConfig | None,
    ) -> None:
        """``response``, then the connection closes."""
        extra = config.header_bytes if config is not None else b""
        head = head_bytes(response, connection="close", extra=extra)
        await sending.send_and_close(reader, writer, head, response.body)
