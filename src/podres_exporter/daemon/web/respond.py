"""What answers a request, off the connection: the web config in force (asked off the
loop), the auth decision (:func:`~podres_exporter.daemon.web.site.denial`, its bcrypt
checks in a bounded pool), then the site's answer, on the loop when it is ready there,
else from a pool (the probes' own for the probes, so that slow scrapes never delay them).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import structlog

from podres_exporter.daemon.web.config import WebConfig, WebConfigProvider
from podres_exporter.daemon.web.http import Request, Response
from podres_exporter.daemon.web.limits import Limits
from podres_exporter.daemon.web.site import INTERNAL_ERROR, PROBES, Site, denial, ready, route

__all__ = ["Responder"]

log = structlog.get_logger(__name__)


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
        self.pending_auth = 0
        """bcrypt checks submitted and not finished."""
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

    async def response(self, request: Request) -> tuple[Response, bytes]:
        """The response to ``request`` and the configured headers: the configuration from
        the provider, the credentials checked (:func:`denial`), then the site's answer:
        on the loop when ready there, else from a pool (the probes' own for the probes)."""
        try:
            config = await self.current_config()
        except Exception:  # noqa: BLE001 - logged by _ask_provider; answer 500, keep serving
            return INTERNAL_ERROR, b""
        extra = config.header_bytes if config is not None else b""
        denied = await denial(config, request, self._check_password)
        if denied is not None:
            return denied, extra
        answer = ready(self.site, request)
        if answer is not None:
            return answer, extra
        pool = self._probe_pool if request.path in PROBES else self._pool
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, route, self.site, request), extra

    async def _check_password(self, config: WebConfig, authorization: str | None) -> bool | None:
        """A bcrypt check in the auth pool; None, at once, when ``max_pending_auth``
        checks wait already."""
        if self.pending_auth >= self.limits.max_pending_auth:
            return None
        loop = asyncio.get_running_loop()
        self.pending_auth += 1
        try:
            return await loop.run_in_executor(self._auth_pool, config.authorized, authorization)
        finally:
            self.pending_auth -= 1

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
