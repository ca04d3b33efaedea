"""What one client may hold of the server, and for how long: :class:`Limits`, the
connection cap fitted under the open-file limit, and the open connections it counts.

The deadlines themselves (the head's, the idle wait's, the write's, the TLS
handshake's) are kept by the connection's task in :mod:`podres_exporter.daemon.web.server`;
the bounded head by :func:`podres_exporter.daemon.web.http.read_head`.
"""

from __future__ import annotations

import asyncio
import resource
from collections import OrderedDict
from dataclasses import dataclass, fields

import structlog

__all__ = ["Connection", "Connections", "Limits", "connection_cap", "fit_open_file_limit"]

log = structlog.get_logger(__name__)

# Descriptors kept for everything else a daemon opens (the listening socket, the kubelet's
# gRPC channel, sysfs and procfs reads, the device plugin's sockets) when the connection
# cap is fitted under the open-file limit.
_FD_RESERVE = 256


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may hold of the server, and for how long.

    ``max_connections`` (4096): connections open at once. When they are all open, a
    new one takes the place of the connection that has waited longest without a
    request in flight (for its head, or idle between requests), which is closed; only
    when every connection is busy answering is the new one answered ``503`` and
    closed. So a client holding idle connections cannot lock out the kubelet's probes
    or a scrape. Room for a Prometheus pair, the probes and a thousand or so idle or
    slow clients, at a few kilobytes each. Lowered (one log event) when the process's
    open-file limit cannot hold it.
    ``backlog`` (1024): the listen queue; the kernel caps it at ``net.core.somaxconn``.
    ``head_timeout_s`` (10 s): a request head must be complete this long after the
    connection was accepted (after the TLS handshake), or after its first byte on a
    kept-alive connection, whatever the client trickles in.
    ``idle_timeout_s`` (75 s): a kept-alive connection may wait this long for its next
    request: longer than the usual scrape intervals (15 to 60 s), so a scraper keeps
    its connection (and its TLS session).
    ``max_head_bytes`` (8 KiB): the request line and headers together; a larger head
    is answered ``431`` and the connection closed. A scrape's head is some 300 bytes.
    ``tls_handshake_timeout_s`` (10 s): the TLS handshake's deadline.
    ``write_timeout_s`` (30 s): a response must be handed to the kernel within this,
    or the connection is dropped (a client that does not read).
    ``workers`` (4): threads for ``/metrics``, ``/`` and the rest; ``probe_workers``
    (2): threads for ``/healthz``, ``/readyz`` and the web-config provider, so that
    slow scrapes never delay the kubelet's probes.
    ``auth_workers`` (1): threads for basic auth's bcrypt checks (the config runs one
    at a time anyway), and ``max_pending_auth`` (32): checks waiting for them. A login
    checked lately is recognised on the loop and never waits for a bcrypt check; a
    request past ``max_pending_auth`` (a flood of wrong passwords) is answered ``503``
    with ``Retry-After`` at once: not ``401``, which would tell a right password that
    it is wrong.
    ``stop_grace_s`` (1.5 s): how long :meth:`WebServer.stop` lets responses in flight
    finish before it drops them.
    """

    max_connections: int = 4096
    backlog: int = 1024
    head_timeout_s: float = 10.0
    idle_timeout_s: float = 75.0
    max_head_bytes: int = 8192
    tls_handshake_timeout_s: float = 10.0
    write_timeout_s: float = 30.0
    workers: int = 4
    probe_workers: int = 2
    auth_workers: int = 1
    max_pending_auth: int = 32
    stop_grace_s: float = 1.5

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) <= 0:
                raise ValueError(f"Limits.{f.name} must be positive, not {getattr(self, f.name)}")


def connection_cap(wanted: int, soft: int, hard: int) -> tuple[int, int]:
    """The connection cap and the soft open-file limit to set for ``wanted`` connections.

    ``soft`` and ``hard`` are RLIMIT_NOFILE's (``resource.RLIM_INFINITY`` for none). The
    soft limit is raised, up to the hard one, to hold ``wanted`` connections and a
    reserve of descriptors for the rest of the daemon; when even the hard limit is too
    low, the cap is what it leaves (at least half of it).
    """
    need = wanted + _FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted, soft
    new_soft = need if hard == resource.RLIM_INFINITY else max(soft, min(need, hard))
    return min(wanted, max(new_soft // 2, new_soft - _FD_RESERVE)), new_soft


def fit_open_file_limit(wanted: int) -> int:
    """The connection cap this process can hold: RLIMIT_NOFILE's soft limit raised as far
    as needed and allowed, and the cap lowered (one log event) when that is not enough."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap, limit = connection_cap(wanted, soft, hard)
    if limit != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        except (ValueError, OSError) as err:
            log.warning("open_file_limit_not_raised", limit=soft, wanted=limit, error=str(err))
            cap, limit = connection_cap(wanted, soft, soft)
        else:
            log.info("open_file_limit_raised", old=soft, new=limit)
    if cap < wanted:
        log.warning(
            "http_connection_cap_lowered",
            max_connections=cap,
            wanted=wanted,
            open_file_limit=limit,
            hint="raise the container's or the service's open-file limit (ulimit -n)",
        )
    return cap


@dataclass(eq=False, slots=True)
class Connection:
    """One open connection: its task, and whether a request of it is in flight (stop
    lets it finish, and the cap never closes it for a newcomer)."""

    task: asyncio.Task[None] | None = None
    busy: bool = False


class Connections:
    """The open connections under the cap, the idle ones (no request in flight) in the
    order they became idle: the longest idle is the one closed for a newcomer. The
    loop's alone."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open: set[Connection] = set()
        self._idle: OrderedDict[Connection, None] = OrderedDict()
        self._full = False

    def room(self) -> bool:
        """Whether a new connection may open: under the cap, or once the longest idle one
        is closed for it; False when every open connection is busy answering. One log
        event when the cap is reached, one when there is room again."""
        at_cap = len(self.open) >= self.cap
        if at_cap != self._full:
            self._full = at_cap
            if at_cap:
                log.warning("http_connections_full", max_connections=self.cap)
            else:
                log.info("http_connections_available", max_connections=self.cap)
        if not at_cap:
            return True
        while self._idle:
            conn, _ = self._idle.popitem(last=False)
            if conn.task is None or conn.task.done():
                continue
            self.open.discard(conn)
            conn.task.cancel()  # its task drops the connection
            log.debug("http_idle_connection_closed_for_new_one")
            return True
        return False

    def add(self, conn: Connection) -> None:
        """``conn`` is open, idle until its first request is read."""
        self.open.add(conn)
        self._idle[conn] = None

    def busy(self, conn: Connection) -> None:
        """A request of ``conn`` is in flight."""
        conn.busy = True
        self._idle.pop(conn, None)

    def idle(self, conn: Connection) -> None:
        """``conn`` waits for its next request, the most recently idle of all."""
        conn.busy = False
        if conn in self.open:
            self._idle[conn] = None

    def remove(self, conn: Connection) -> None:
        """``conn`` is closed."""
        self.open.discard(conn)
        self._idle.pop(conn, None)
