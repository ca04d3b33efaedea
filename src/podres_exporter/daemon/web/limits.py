"""What one client may hold of the server, and for how long: :class:`Limits`, the
connection cap fitted under the open-file limit and the container's memory limit, and
the open connections it counts, per address too.

The deadlines themselves (the head's, the idle wait's, the write's, the TLS
handshake's) are kept by the connection's task in :mod:`podres_exporter.daemon.web.server`;
the bounded head by :func:`podres_exporter.daemon.web.http.read_head`.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import structlog

__all__ = [
    "CONNECTION_BYTES",
    "Connection",
    "Connections",
    "Limits",
    "MemoryPressure",
    "connection_cap",
    "fit_memory_limit",
    "fit_open_file_limit",
    "memory_cap",
    "memory_limit",
    "resident_bytes",
]

log = structlog.get_logger(__name__)

# Descriptors kept for everything else a daemon opens (the listening socket, the kubelet's
# gRPC channel, sysfs and procfs reads, the device plugin's sockets) when the connection
# cap is fitted under the open-file limit.
_FD_RESERVE = 256
# The most one open connection holds of our memory, whatever its client does (TLS, its
# handshake done, a large answer it does not read: the worst case), measured and rounded
# up (docs/security.md, "Memory"): the TLS read buffer (32 KiB), one encrypted write
# slice (64 KiB), the TLS session and the stream objects, about 130 KB for one; about
# 205 KB each while thousands are replaced by newcomers, before what the replaced ones
# left is collected.
CONNECTION_BYTES = 256 * 1024
# A cgroup memory limit at or above this is no limit (cgroup v1 writes "unlimited" as a
# page-rounded 2**63 - 1).
_NO_LIMIT = 2**62
# Never fewer connections than this, however small the memory limit or high the memory.
_MIN_CONNECTIONS = 16
# Resident memory, as a share of the memory limit, at which no connection is added: a
# newcomer takes an open one's place instead. The connections' share is a bound of their
# own; this one holds for everything together (a large node's data and the connections).
MEMORY_HIGH = 0.85
# The resident memory is read again at most this often (one read of /proc/self/statm).
_PRESSURE_EVERY_S = 0.25


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may hold of the server, and for how long.

    ``max_connections`` (1024): connections open at once. When they are all open, a
    new one takes the place of the connection that has waited longest without a
    request in flight (for its head, or idle between requests), which is closed, or
    failing that of the one whose answer has waited longest for its client to read
    it; only when every connection is busy answering is the new one answered ``503``
    and closed. So a client holding idle connections or not reading its answers cannot
    lock out the kubelet's probes or a scrape. Lowered (one log event each) when the
    process's open-file limit cannot hold it, and to what ``memory_share`` of the
    container's memory limit holds at :data:`CONNECTION_BYTES` each; and while the
    process's resident memory is at :data:`MEMORY_HIGH` of that limit, a newcomer always
    takes an open connection's place (:class:`MemoryPressure`).
    ``max_connections_per_address`` (0: half the cap): connections one client address
    may hold; a newcomer from an address at its cap takes the place of that address's
    longest idle (or longest waiting) connection, by the same rule.
    ``memory_share`` (0.5): the share of the container's memory limit (cgroup
    ``memory.max``) that open connections may take at most; the rest is the daemon's.
    A connection that has sent nothing holds a socket and a few kilobytes (no TLS state
    until its first byte).
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
    at a time anyway), and ``max_pending_auth`` (32): checks held in all, waiting in one
    queue per client address and served in turn (see
    :class:`~podres_exporter.daemon.web.respond.FairQueue`). A login checked lately is
    recognised on the loop and never waits for a bcrypt check; a request that finds no
    place is answered ``503`` with ``Retry-After`` at once: not ``401``, which would tell
    a right password that it is wrong.
    ``stop_grace_s`` (1.5 s): how long :meth:`WebServer.stop` lets responses in flight
    finish before it drops them.
    """

    max_connections: int = 1024
    max_connections_per_address: int = 0
    memory_share: float = 0.5
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
            if getattr(self, f.name) <= 0 and f.name != "max_connections_per_address":
                raise ValueError(f"Limits.{f.name} must be positive, not {getattr(self, f.name)}")
        if self.max_connections_per_address < 0:
            raise ValueError("Limits.max_connections_per_address must be 0 or more")
        if self.memory_share > 1:
            raise ValueError("Limits.memory_share must be at most 1")


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


def memory_limit(proc: Path = Path("/proc"), cgroup: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The memory limit of this process's cgroup in bytes, None when there is none (or it
    cannot be read): cgroup v2's ``memory.max``, else v1's ``memory.limit_in_bytes``.

    The cgroup's path comes from ``/proc/self/cgroup``; in a container (its own cgroup
    namespace) that is ``/``, and the files are at the root of ``/sys/fs/cgroup``. Without
    a cgroup namespace the path is the host's while the mount shows a subtree of it (the
    container's own cgroup at its root): the path is tried whole, then without its leading
    parts one at a time, then the mount's root."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:  # noqa: PLR2004 - "id:controllers:path"
            continue
        _, controllers, path = parts
        names = [name for name in path.split("/") if name]
        rels = ["/".join(names[i:]) for i in range(len(names))] + [""]
        if controllers == "":  # v2: "0::/path"
            candidates += [cgroup / rel / "memory.max" for rel in rels]
        elif "memory" in controllers.split(","):  # v1: "N:memory:/path"
            v1 = cgroup / "memory"
            candidates += [v1 / rel / "memory.limit_in_bytes" for rel in rels]
    for candidate in candidates:
        try:
            value = candidate.read_text().strip()
        except OSError:
            continue
        if value == "max" or not value.isdigit() or int(value) >= _NO_LIMIT:
            return None
        return int(value)
    return None


def memory_cap(wanted: int, limit: int | None, share: float) -> int:
    """The connection cap that ``share`` of a memory limit of ``limit`` bytes holds at
    :data:`CONNECTION_BYTES` each (at least a few), never above ``wanted``; ``wanted``
    when there is no limit."""
    if limit is None:
        return wanted
    return min(wanted, max(_MIN_CONNECTIONS, int(limit * share) // CONNECTION_BYTES))


def fit_memory_limit(wanted: int, share: float, limit: int | None) -> int:
    """The connection cap under the memory limit ``limit`` (:func:`memory_limit`; None:
    none); one log event when that lowers it."""
    cap = memory_cap(wanted, limit, share)
    if cap < wanted:
        log.info(
            "http_connection_cap_fitted_to_memory",
            max_connections=cap,
            wanted=wanted,
            memory_limit=limit,
            bytes_per_connection=CONNECTION_BYTES,
        )
    return cap


@dataclass(eq=False, slots=True)
class Connection:
    """One open connection: its task, its client's address, and whether a request of it
    is in flight (stop lets it finish, and the cap closes it for a newcomer only while
    its answer waits for the client to read)."""

    task: asyncio.Task[None] | None = None
    address: str = ""
    busy: bool = False


class Connections:
    """The open connections under the cap and the per-address cap; the idle ones (no
    request in flight) in the order they became idle, and the busy ones whose answer
    waits for its client to read in the order they began to wait: the longest idle,
    then the longest waiting, is the one closed for a newcomer. The loop's alone."""

    def __init__(
        self, cap: int, per_address: int = 0, pressed: Callable[[], bool] = lambda: False
    ) -> None:
        self.cap = cap
        self._pressed = pressed
        self.per_address = per_address or max(1, cap // 2)
        self.open: set[Connection] = set()
        self._idle: OrderedDict[Connection, None] = OrderedDict()
        self._waiting: OrderedDict[Connection, None] = OrderedDict()
        self._addresses: Counter[str] = Counter()
        self._full = False

    def room(self, address: str = "") -> bool:
        """Whether a new connection from ``address`` may open: under both caps, or once
        a connection is closed for it (of its own address when that is at its cap);
        False when every candidate is busy answering. Under memory pressure (``pressed``)
        the cap is what is open now (but never under a few). One log event when the cap is
        reached, one when there is room again."""
        at_cap = len(self.open) >= self.cap or (
            len(self.open) >= _MIN_CONNECTIONS and self._pressed()
        )
        if at_cap != self._full:
            self._full = at_cap
            if at_cap:
                log.warning("http_connections_full", max_connections=self.cap)
            else:
                log.info("http_connections_available", max_connections=self.cap)
        if self._addresses[address] >= self.per_address:
            return self._close_one(address)
        return not at_cap or self._close_one(None)

    def _close_one(self, address: str | None) -> bool:
        """Close the longest idle, else the longest waiting, connection (of ``address``
        when given); whether one was."""
        for queue in (self._idle, self._waiting):
            for conn in list(queue):
                if conn.task is None or conn.task.done():
                    del queue[conn]
                    continue
                if address is not None and conn.address != address:
                    continue
                self.remove(conn)
                conn.task.cancel()  # its task drops the connection
                log.debug("http_connection_closed_for_new_one", address=conn.address)
                return True
        return False

    def add(self, conn: Connection) -> None:
        """``conn`` is open, idle until its first request is read."""
        self.open.add(conn)
        self._addresses[conn.address] += 1
        self._idle[conn] = None

    def busy(self, conn: Connection) -> None:
        """A request of ``conn`` is in flight."""
        conn.busy = True
        self._idle.pop(conn, None)

    def waiting(self, conn: Connection, waits: bool) -> None:
        """The answer of ``conn`` waits (``waits``) for its client to read, or goes on."""
        if waits and conn in self.open:
            self._waiting[conn] = None
        else:
            self._waiting.pop(conn, None)

    def idle(self, conn: Connection) -> None:
        """``conn`` waits for its next request, the most recently idle of all."""
        conn.busy = False
        self._waiting.pop(conn, None)
        if conn in self.open:
            self._idle[conn] = None

    def remove(self, conn: Connection) -> None:
        """``conn`` is closed."""
        if conn in self.open:
            self.open.discard(conn)
            self._addresses[conn.address] -= 1
            if not self._addresses[conn.address]:
                del self._addresses[conn.address]
        self._idle.pop(conn, None)
        self._waiting.pop(conn, None)


def resident_bytes(statm: Path = Path("/proc/self/statm")) -> int:
    """This process's resident memory in bytes (0 when it cannot be read)."""
    try:
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class MemoryPressure:
    """Whether the process's resident memory is at ``high`` of its memory limit (``limit``
    bytes; None: never), read at most every :data:`_PRESSURE_EVERY_S`. One log event when
    it goes above, one when it is below again. The loop's alone."""

    def __init__(
        self,
        limit: int | None,
        high: float = MEMORY_HIGH,
        rss: Callable[[], int] = resident_bytes,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._threshold = None if limit is None else int(limit * high)
        self._rss = rss
        self._clock = clock
        self._read_at: float | None = None
        self._high = False

    def __call__(self) -> bool:
        if self._threshold is None:
            return False
        now = self._clock()
        if self._read_at is None or now - self._read_at >= _PRESSURE_EVERY_S:
            self._read_at = now
            rss = self._rss()
            high = rss >= self._threshold
            if high != self._high:
                self._high = high
                event = "http_memory_high" if high else "http_memory_normal"
                log.info(event, resident_bytes=rss, threshold_bytes=self._threshold)
        return self._high
