"""What answers a request, off the connection: the web config in force (asked off the
loop), the client certificate (``RequireAndVerifyClientCert``), the auth decision
(:func:`~podres_exporter.daemon.web.site.denial`, its bcrypt checks queued fairly by
client address in front of a small pool: :class:`FairQueue`), then the site's answer,
on the loop when it is ready there, else from a pool (the probes' own for the probes, so
that slow scrapes never delay them).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Any

import structlog

from podres_exporter.daemon.web.config import WebConfig, WebConfigProvider
from podres_exporter.daemon.web.http import Request, Response, text
from podres_exporter.daemon.web.limits import Limits
from podres_exporter.daemon.web.site import INTERNAL_ERROR, PROBES, Site, denial, ready, route

__all__ = ["CERTIFICATE_REQUIRED", "ConnectionInfo", "FairQueue", "Responder"]

log = structlog.get_logger(__name__)

ConnectionInfo = Callable[[str], Any]
"""What the connection's transport knows (``get_extra_info``): ``peername``, the
client's address; ``peercert``, the client certificate the TLS handshake verified
(empty or None when none was presented)."""

CERTIFICATE_REQUIRED = text(HTTPStatus.FORBIDDEN, "a client certificate is required")
"""The answer, on every path but the probes, to a client that presented no certificate
when ``RequireAndVerifyClientCert`` is configured: 403, not 401, since no credentials
sent in the request can change it (a certificate not issued by the client CA never
gets this far: its handshake fails)."""


def _no_info(_name: str) -> None:
    return None


def _certificate_missing(config: WebConfig | None, request: Request, info: ConnectionInfo) -> bool:
    """Whether ``config`` requires a verified client certificate for ``request`` (every
    path but the probes) and the connection presented none."""
    required = config is not None and config.client_cert_required
    return required and request.path not in PROBES and not info("peercert")


class FairQueue:
    """Turns at the bcrypt pool, given round robin by client address.

    At most ``running`` checks run at once and ``capacity`` are held in all (running
    and waiting). Each address waits in a queue of its own, and the next turn goes to
    the address after the last one served, so a check waits for at most one check per
    other address waiting, however many one address sent. When every place is taken,
    a newcomer takes the place of the newest waiting check of the address that holds
    the most, if that address holds at least two more than the newcomer's (that check
    is then refused); else the newcomer is refused. A flood of wrong passwords from at
    most ``capacity - 2`` addresses therefore cannot keep a right password from another
    address out (one of them holds two places or more): it is checked after at most one
    check per flooding address.
    Runs on the server's loop; not thread-safe.
    """

    def __init__(self, capacity: int, running: int) -> None:
        self.capacity = capacity
        self.slots = running
        self.running = 0
        self._waiting: dict[str, deque[asyncio.Future[bool]]] = {}

    @property
    def pending(self) -> int:
        """Checks running and waiting."""
        return self.running + sum(len(q) for q in self._waiting.values())

    async def acquire(self, address: str) -> bool:
        """Wait for a turn; False (at once, or later when displaced) for no turn. After
        True, :meth:`release` once the check is done."""
        if self.running < self.slots and not self._waiting:
            self.running += 1
            return True
        if self.pending >= self.capacity and not self._displace(address):
            return False
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(address, deque()).append(turn)
        try:
            return await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled() and turn.result():
                self.release()  # given a turn, then cancelled before it was taken
            else:
                self._forget(address, turn)
            raise

    def release(self) -> None:
        """A check is done: its turn goes to the next address."""
        self.running -= 1
        while self.running < self.slots and self._waiting:
            address = next(iter(self._waiting))
            queue = self._waiting.pop(address)
            turn = queue.popleft()
            if queue:
                self._waiting[address] = queue  # to the back of the round
            if not turn.done():
                self.running += 1
                turn.set_result(True)

    def _displace(self, address: str) -> bool:
        """Make room for ``address`` at the expense of the address that holds the most."""
        if not self._waiting:
            return False
        mine = len(self._waiting.get(address, ()))
        most = max(self._waiting, key=lambda a: len(self._waiting[a]))
        if len(self._waiting[most]) < mine + 2:
            return False
        turn = self._waiting[most].pop()
        turn.set_result(False)
        return True

    def _forget(self, address: str, turn: asyncio.Future[bool]) -> None:
        queue = self._waiting.get(address)
        if queue is not None and turn in queue:
            queue.remove(turn)
            if not queue:
                del self._waiting[address]


class Responder:
    """The answers of one server: its site, its web-config provider (None: plain HTTP,
    open) and the three pools of ``limits`` (threads named ``name-worker``,
    ``name-probe``, ``name-auth``). Its coroutines run on the server's loop."""

    def __init__(
        self, site: Site, provider: WebConfigProvider | None, limits: Limits, name: str
    ) -> None:
        self.site = site
        self.limits = limits
        self.config: WebConfig | None = None
        """The last configuration the provider gave."""
        self._auth_queue = FairQueue(limits.max_pending_auth, limits.auth_workers)
        self._provider = provider
        self._config_failing = False
        self._pool = ThreadPoolExecutor(limits.workers, thread_name_prefix=f"{name}-worker")
        self._probe_pool = ThreadPoolExecutor(
            limits.probe_workers, thread_name_prefix=f"{name}-probe"
        )
        self._auth_pool = ThreadPoolExecutor(limits.auth_workers, thread_name_prefix=f"{name}-auth")

    def shutdown(self) -> None:
        """Let the pools go; what waits in them is dropped."""
        for pool in (self._pool, self._probe_pool, self._auth_pool):
            pool.shutdown(wait=False, cancel_futures=True)

    @property
    def pending_auth(self) -> int:
        """bcrypt checks running and waiting."""
        return self._auth_queue.pending

    async def response(
        self, request: Request, info: ConnectionInfo = _no_info
    ) -> tuple[Response, bytes]:
        """The response to ``request`` and the configured headers: the configuration from
        the provider, the client certificate (``info``: the connection's), the
        credentials checked (:func:`denial`), then the site's answer: on the loop when
        ready there, else from a pool (the probes' own for the probes)."""
        try:
            config = await self.current_config()
        except Exception:  # noqa: BLE001 - logged by _ask_provider; answer 500, keep serving
            return INTERNAL_ERROR, b""
        extra = config.header_bytes if config is not None else b""
        if _certificate_missing(config, request, info):
            return CERTIFICATE_REQUIRED, extra
        peer = info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""

        async def check(config: WebConfig, authorization: str | None) -> bool | None:
            return await self._check_password(config, authorization, address)

        denied = await denial(config, request, check)
        if denied is not None:
            return denied, extra
        answer = ready(self.site, request)
        if answer is not None:
            return answer, extra
        pool = self._probe_pool if request.path in PROBES else self._pool
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, route, self.site, request), extra

    async def _check_password(
        self, config: WebConfig, authorization: str | None, address: str
    ) -> bool | None:
        """A bcrypt check in the auth pool, in ``address``'s turn (:class:`FairQueue`);
        None when it gets no turn (``max_pending_auth`` checks held already)."""
        if not await self._auth_queue.acquire(address):
            return None
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._auth_pool, config.authorized, authorization)
        finally:
            self._auth_queue.release()

    async def current_config(self) -> WebConfig | None:
        """The provider's configuration, asked off the loop (it may read a file)."""
        provider = self._provider
        if provider is None:
            return None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._probe_pool, self._ask_provider, provider)

    def _ask_provider(self, provider: WebConfigProvider) -> WebConfig | None:
        """The configuration in force, from a pool thread. A provider that raises fails
        the connection (no TLS context: never plain HTTP instead) or the request (500),
        with one log event when it starts failing and one when it recovers."""
        try:
            config = provider()
        except Exception as err:
            if not self._config_failing:
                self._config_failing = True
                log.error("web_config_failed", error=repr(err))
            raise
        if self._config_failing:
            self._config_failing = False
            log.info("web_config_recovered")
        self.config = config
        return config
