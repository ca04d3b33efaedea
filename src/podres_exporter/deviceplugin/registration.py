"""Register: tell the kubelet about a plugin socket, through ``<dir>/kubelet.sock``.

Version ``v1beta1``, the socket's file name, the resource name, and the same options
GetDevicePluginOptions returns. The kubelet dials back during the call; the server
answers on its own threads. gRPC errors become :class:`RegistrationError` here, and
:class:`KubeletUnavailable` when no kubelet answers at all (no socket, or nothing
listening on it).

While registering fails, :class:`WaitReport` says when to tell the log so: at the
first failure, at each new cause, and then on a doubling schedule, so that a plugin
waiting for its kubelet says what it waits for without repeating it every retry.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from typing import Final

import grpc

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from podres_exporter.core.errors import RegistrationError
from podres_exporter.daemon.backoff import Backoff
from podres_exporter.daemon.fileid import FileIdentity, file_identity
from podres_exporter.deviceplugin.config import ResourceConfig
from podres_exporter.deviceplugin.servicer import plugin_options
from podres_exporter.deviceplugin.serving import rpc_text

API_VERSION: Final = "v1beta1"
KUBELET_SOCKET: Final = "kubelet.sock"


class KubeletUnavailable(RegistrationError):
    """No kubelet answers at ``kubelet.sock``; ``cause`` says why, in a few words."""

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message, code="UNAVAILABLE")
        self.cause = cause


def socket_absence(path: str) -> str | None:
    """Why ``path`` is no socket to dial (``missing``, ``not a socket``, or the
    ``stat`` error); None when it is a socket."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as err:
        return err.strerror or type(err).__name__
    return None if stat.S_ISSOCK(mode) else "not a socket"


def _unreachable_cause(text: str) -> str:
    """A short cause from gRPC's UNAVAILABLE text, which ends in the socket's errno text."""
    for known in ("Connection refused", "Permission denied", "No such file or directory"):
        if known in text:
            return known.lower()
    return "unreachable"


def register(
    kubelet_path: str, endpoint: str, resource: ResourceConfig, *, timeout_s: float
) -> FileIdentity:
    """Register ``endpoint`` for ``resource`` with the kubelet at ``kubelet_path``; the
    identity of the kubelet socket that answered. RegistrationError when refused."""
    kubelet = file_identity(kubelet_path)
    absence = "missing" if kubelet is None else socket_absence(kubelet_path)
    if kubelet is None or absence is not None:
        raise KubeletUnavailable(f"no kubelet socket at {kubelet_path}", cause=absence or "missing")
    request = pb.RegisterRequest(
        version=API_VERSION,
        endpoint=endpoint,
        resource_name=resource.name,
        options=plugin_options(resource),
    )
    with grpc.insecure_channel(
        f"unix://{kubelet_path}", options=[("grpc.use_local_subchannel_pool", 1)]
    ) as channel:
        stub = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
        try:
            stub.Register(request, timeout=timeout_s)
        except grpc.RpcError as err:
            code = err.code().name if isinstance(err, grpc.Call) else "UNKNOWN"
            text = f"Register with {kubelet_path}: {rpc_text(err)}"
            if code == "UNAVAILABLE":
                raise KubeletUnavailable(text, cause=_unreachable_cause(text)) from err
            raise RegistrationError(text, code=code) from err
    return kubelet


class WaitReport:
    """When a plugin that cannot register should say so, and for how long it waited.

    The first failure is reported at once, and so is each change of cause; the same
    cause again only once the schedule's next time has come: ``schedule.ceiling(n)``
    seconds after the n-th report (doubling, up to ``schedule.max_s``). A registration
    ends the wait. ``clock`` is monotonic seconds (injected by tests).
    """

    def __init__(self, schedule: Backoff, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._schedule = schedule
        self._clock = clock
        self._since: float | None = None  # when the wait began
        self._cause: str | None = None
        self._reports = 0
        self._next = 0.0

    def failed(self, cause: str) -> float | None:
        """A failure of ``cause``: the seconds waited so far when it is to be reported
        now, else None."""
        now = self._clock()
        if self._since is None:
            self._since = now
        if cause == self._cause and now < self._next:
            return None
        self._cause = cause
        self._reports += 1
        self._next = now + self._schedule.ceiling(self._reports)
        return round(now - self._since, 1)

    def succeeded(self) -> float | None:
        """Registered: the seconds waited when a failure was seen (and the wait ends),
        else None."""
        if self._since is None:
            return None
        waited = round(self._clock() - self._since, 1)
        self._since, self._cause, self._reports, self._next = None, None, 0, 0.0
        return waited
