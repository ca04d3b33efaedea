"""One resource's plugin socket: made, proved by a call of our own, and retired.

A socket of its own in the device-plugins directory, named
``podres-<resource>-<random>.sock`` so two instances (a rolling update) never share one,
mode 0600 whatever the umask (a socket that cannot be made so is not served). The gRPC
pool has room for the ListAndWatch streams a servicer keeps
(:data:`~podres_exporter.deviceplugin.servicer.MAX_STREAMS`: a new one ends the older)
plus :data:`UNARY_WORKERS` for Allocate and the other calls, so open streams never
stall pod admission. Before the kubelet is told about it, the socket must answer our
own ``GetDevicePluginOptions``.

A plugin killed without its cleanup (SIGKILL, an OOM kill) leaves its sockets behind.
Before its first socket, a resource removes the stale ones of its own name pattern:
sockets on which nothing listens any more (a connect is refused). A socket that
answers belongs to a running instance and stays; so does every other file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import socket
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

import grpc
import structlog

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from podres_exporter.daemon.fileid import FileIdentity, file_identity
from podres_exporter.daemon.unixsock import MAX_SOCKET_PATH, socket_path_too_long
from podres_exporter.deviceplugin.board import Board
from podres_exporter.deviceplugin.config import ResourceConfig
from podres_exporter.deviceplugin.metrics import PluginMetrics
from podres_exporter.deviceplugin.servicer import MAX_STREAMS, DevicePluginServicer, HealthCheck

log = structlog.get_logger(__name__)

UNARY_WORKERS: Final = 12
"""Server threads of a plugin socket beyond those its ListAndWatch streams can hold
(:data:`~podres_exporter.deviceplugin.servicer.MAX_STREAMS`): Allocate,
GetPreferredAllocation, PreStartContainer and GetDevicePluginOptions always have these."""
MAX_CONCURRENT_RPCS: Final = 128
"""Calls a plugin socket takes at once, running or queued; beyond, ``RESOURCE_EXHAUSTED``:
a flood of calls queues no further."""


@dataclass(slots=True)
class Served:
    """A running gRPC server on one socket file."""

    server: grpc.Server
    executor: ThreadPoolExecutor
    servicer: DevicePluginServicer
    path: str
    identity: FileIdentity | None

    @property
    def endpoint(self) -> str:
        return os.path.basename(self.path)


class SocketServing:
    """Serves one resource's plugin sockets: each new one on a fresh path, retired whole.

    ``on_stream_lost`` is told when the kubelet ends a ListAndWatch stream of a socket's
    servicer (with the servicer and when the stream began, monotonic).
    """

    def __init__(
        self,
        resource: ResourceConfig,
        board: Board,
        metrics: PluginMetrics,
        *,
        plugin_dir: str,
        health_check: HealthCheck | None,
        on_stream_lost: Callable[[DevicePluginServicer, float], None],
        unary_workers: int = UNARY_WORKERS,
        self_dial_timeout_s: float,
        grace_s: float,
    ) -> None:
        self.resource = resource
        self._board = board
        self._metrics = metrics
        self._dir = plugin_dir
        self._health_check = health_check  # for PreStartContainer (Monitor.check)
        self._on_stream_lost = on_stream_lost
        self._unary_workers = unary_workers
        self._self_dial_timeout_s = self_dial_timeout_s
        self._grace_s = grace_s
        self._dir_missing_logged = False
        self._swept = False

    def serve(self) -> Served | None:
        """A new server on a new socket that has answered our own call; None on failure."""
        if not os.path.isdir(self._dir):
            if not self._dir_missing_logged:
                self._dir_missing_logged = True
                log.warning("device_plugin_dir_missing", directory=self._dir)
            return None
        self._dir_missing_logged = False
        if not self._swept:
            self._swept = True
            remove_stale_sockets(self._dir, self.resource.slug)
        name = f"{socket_prefix(self.resource.slug)}{secrets.token_hex(4)}.sock"
        path = os.path.join(os.path.abspath(self._dir), name)
        if socket_path_too_long(path):
            log.error(
                "socket_path_too_long",
                resource=self.resource.name,
                socket=path,
                limit=MAX_SOCKET_PATH,
            )
            return None
        executor = ThreadPoolExecutor(
            max_workers=MAX_STREAMS + self._unary_workers,
            thread_name_prefix=f"podres-dp-{self.resource.slug}",
        )
        server = grpc.server(executor, maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
        servicer = DevicePluginServicer(
            self.resource,
            self._board,
            self._metrics,
            health_check=self._health_check,
            on_stream_lost=self._on_stream_lost,
        )
        pb_grpc.add_DevicePluginServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        try:
            port = server.add_insecure_port(f"unix://{path}")
        except RuntimeError as err:
            port = 0
            log.error("plugin_bind_failed", socket=path, error=str(err))
        if port == 0:
            executor.shutdown(wait=False)
            return None
        try:
            # Whatever the umask, only the owner (root) may call Allocate; no call is taken
            # before start().
            os.chmod(path, 0o600)
        except OSError as err:
            log.error("plugin_socket_chmod_failed", socket=path, error=str(err))
            server.stop(None)
            executor.shutdown(wait=False)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return None
        server.start()
        served = Served(server, executor, servicer, path, file_identity(path))
        try:
            self._self_dial(path)
        except grpc.RpcError as err:
            log.error(
                "plugin_self_dial_failed",
                resource=self.resource.name,
                socket=path,
                error=rpc_text(err),
            )
            self.retire(served)
            return None
        return served

    def _self_dial(self, path: str) -> None:
        with grpc.insecure_channel(
            f"unix://{path}", options=[("grpc.use_local_subchannel_pool", 1)]
        ) as channel:
            stub = pb_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
            stub.GetDevicePluginOptions(
                pb.Empty(), timeout=self._self_dial_timeout_s, wait_for_ready=True
            )

    def retire(self, served: Served) -> None:
        """End the streams, stop the server (short grace), remove the socket file."""
        served.servicer.close()
        self._board.poke()
        served.server.stop(self._grace_s).wait(self._grace_s + 1)
        served.executor.shutdown(wait=False, cancel_futures=True)
        if served.identity is not None and file_identity(served.path) == served.identity:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(served.path)


def socket_prefix(slug: str) -> str:
    """The start of every socket name of the resource with ``slug``; 8 hex digits and
    ``.sock`` follow."""
    return f"podres-{slug[:40]}-"


def remove_stale_sockets(directory: str, slug: str) -> list[str]:
    """Remove the sockets in ``directory`` named as the resource ``slug``'s that nothing
    listens on any more; their paths. Never raises: what cannot be checked stays."""
    own = re.compile(re.escape(socket_prefix(slug)) + r"[0-9a-f]{8}\.sock")
    try:
        names = sorted(n for n in os.listdir(directory) if own.fullmatch(n))
    except OSError:
        return []
    removed = []
    for name in names:
        path = os.path.join(os.path.abspath(directory), name)
        identity = file_identity(path)
        if not _is_socket(path) or not _refused(path):
            continue
        if file_identity(path) == identity:  # still the file found refusing
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(path)
                log.info("stale_socket_removed", socket=path)
    return removed


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _refused(path: str) -> bool:
    """Whether a connect to the unix socket ``path`` is refused: nothing listens there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError as err:
            return err.errno == errno.ECONNREFUSED
    return False


def rpc_text(err: grpc.RpcError) -> str:
    """A gRPC error as a log or error message says it: its code and details."""
    if isinstance(err, grpc.Call):
        return f"{err.code().name}: {err.details()}"
    return str(err)
