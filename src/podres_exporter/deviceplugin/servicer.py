"""The ``v1beta1.DevicePlugin`` service: thin gRPC glue over the pure core.

* ``GetDevicePluginOptions``: ``pre_start_required`` from the resource's
  ``pre_start``, ``get_preferred_allocation_available`` always (the same options
  the lifecycle sends in the RegisterRequest: :func:`plugin_options`).
* ``ListAndWatch``: the complete device list at once, then again on every change
  of it; the stream ends when the board closes (shutdown), the kubelet cancels, or a
  newer stream opens: the kubelet reads only its latest, and a stream holds a server
  thread for its life, so stale ones (a restarted kubelet's, anyone's on the socket)
  must not pile up and starve Allocate. At most :data:`MAX_STREAMS` are open at once.
* ``GetPreferredAllocation``: :func:`allocate.preferred_allocation` per container.
* ``Allocate``: :func:`allocate.allocate` per container; unknown or unhealthy ids
  answer ``INVALID_ARGUMENT`` with the message naming them (the first few, cut). One
  log line per call, however many containers it names.
* ``PreStartContainer``: runs a fresh health check (the :data:`HealthCheck` it was
  given), then ``FAILED_PRECONDITION`` if any of the ids is unhealthy
  (``INVALID_ARGUMENT`` if unknown).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import grpc
import structlog

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from podres_exporter.core.errors import AllocationError
from podres_exporter.deviceplugin.allocate import (
    ContainerAllocation,
    allocate,
    check_ids,
    id_summary,
    preferred_allocation,
)
from podres_exporter.deviceplugin.board import Board
from podres_exporter.deviceplugin.config import ResourceConfig
from podres_exporter.deviceplugin.inventory import ResourceInventory
from podres_exporter.deviceplugin.metrics import PluginMetrics

__all__ = [
    "MAX_STREAMS",
    "DevicePluginServicer",
    "HealthCheck",
    "StreamLost",
    "list_and_watch_response",
    "plugin_options",
]

log = structlog.get_logger(__name__)

# Container responses an Allocate cache holds for one inventory (the kubelet asks for
# few distinct id sets; anyone on the socket could ask for many): past it, it starts over.
_RESPONSE_CACHE = 1024

# How long a stream waits for a change before it looks whether it was cancelled.
_STREAM_POLL_S = 1.0

MAX_STREAMS: Final = 4
"""ListAndWatch streams one servicer holds at once, superseded ones still ending
included; each holds a server thread for its life. One is current; a new one beyond
these is refused with ``RESOURCE_EXHAUSTED``."""

HealthCheck: TypeAlias = Callable[[], None]
"""One health check of every resource, now: it reads the hardware and publishes each
resource's inventory to its board before it returns. The plugin's is
:meth:`Monitor.check <podres_exporter.deviceplugin.monitor.Monitor.check>`."""

StreamLost: TypeAlias = Callable[["DevicePluginServicer", float], None]
"""Told that the kubelet ended a ListAndWatch stream we did not close: called with the
servicer and the stream's start (monotonic), on the stream's thread."""


def plugin_options(resource: ResourceConfig) -> pb.DevicePluginOptions:
    """The options of a resource's plugin: in GetDevicePluginOptions and in Register."""
    return pb.DevicePluginOptions(
        pre_start_required=resource.pre_start,
        get_preferred_allocation_available=True,
    )


def list_and_watch_response(inventory: ResourceInventory) -> pb.ListAndWatchResponse:
    """The complete device list of a resource as a ListAndWatch message."""
    devices = []
    for d in inventory.devices:
        device = pb.Device(ID=d.id, health=d.health)
        if d.numa_nodes:
            device.topology.nodes.extend(pb.NUMANode(ID=n) for n in d.numa_nodes)
        devices.append(device)
    return pb.ListAndWatchResponse(devices=devices)


def _container_response(alloc: ContainerAllocation) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(alloc.envs),
        devices=[
            pb.DeviceSpec(
                container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
            )
            for d in alloc.devices
        ],
        cdi_devices=[pb.CDIDevice(name=n) for n in alloc.cdi_devices],
    )


def _device_key(inventory: ResourceInventory) -> tuple[tuple[str, bool, tuple[int, ...]], ...]:
    return tuple((d.id, d.healthy, d.numa_nodes) for d in inventory.devices)


@dataclass(eq=False, slots=True)
class _Stream:
    """An open ListAndWatch stream: its call, its start (monotonic), and whether a newer
    stream ended it."""

    context: grpc.ServicerContext
    started: float
    superseded: bool = False


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """One resource's DevicePlugin service, serving what ``board`` holds.

    ``health_check``: run by PreStartContainer before it judges the devices (none: it
    judges by the last check). ``on_stream_lost``: told when the kubelet ends a
    ListAndWatch stream that we did not close (nor superseded by a newer one). Every
    method is safe to call from many threads at once.
    """

    def __init__(
        self,
        resource: ResourceConfig,
        board: Board,
        metrics: PluginMetrics,
        *,
        health_check: HealthCheck | None = None,
        on_stream_lost: StreamLost | None = None,
    ) -> None:
        self._resource = resource
        self._board = board
        self._metrics = metrics
        self._health_check = health_check
        self._on_stream_lost = on_stream_lost
        self._closed = threading.Event()
        self._streams_lock = threading.Lock()
        self._streams: list[_Stream] = []  # open, newest last
        # The container responses made from one inventory (immutable), by requested ids:
        # a repeated request, or the same device again, is not built again.
        self._responses: tuple[ResourceInventory, dict[tuple[str, ...], Any]] | None = None

    def close(self) -> None:
        """End this servicer's ListAndWatch streams (its server is being retired)."""
        self._closed.set()
        self._board.poke()

    def GetDevicePluginOptions(  # noqa: N802 - the gRPC method name
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return plugin_options(self._resource)

    def ListAndWatch(  # noqa: N802 - the gRPC method name
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        name = self._resource.name
        board = self._board
        stream = self._open_stream(context)
        if stream is None:
            log.warning("list_and_watch_refused", resource=name, open=MAX_STREAMS)
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{MAX_STREAMS} ListAndWatch streams of {name} are ending: try again",
            )
        context.add_callback(board.poke)  # a cancelled stream wakes at once
        self._metrics.stream_opened(name)
        log.info("list_and_watch_started", resource=name)
        try:
            version, inventory = board.current()
            sent = _device_key(inventory)
            yield list_and_watch_response(inventory)
            while (
                context.is_active()
                and not board.closed
                and not self._closed.is_set()
                and not stream.superseded
            ):
                new_version = board.wait(version, _STREAM_POLL_S)
                if new_version == version:
                    continue
                version, inventory = board.current()
                key = _device_key(inventory)
                if key != sent:
                    sent = key
                    yield list_and_watch_response(inventory)
        finally:
            superseded = self._close_stream(stream)
            self._metrics.stream_closed(name)
            ours = board.closed or self._closed.is_set() or superseded
            log.info(
                "list_and_watch_ended",
                resource=name,
                by="plugin" if ours else "client",
                superseded=superseded,
            )
            if not ours and self._on_stream_lost is not None:
                # The kubelet ended it: it never re-dials.
                self._on_stream_lost(self, stream.started)

    def _open_stream(self, context: grpc.ServicerContext) -> _Stream | None:
        """Admit a new stream and end the older ones (cancelled: a blocked send ends too);
        None when :data:`MAX_STREAMS` are still ending."""
        with self._streams_lock:
            if len(self._streams) >= MAX_STREAMS:
                return None
            older = list(self._streams)
            stream = _Stream(context, time.monotonic())
            self._streams.append(stream)
            for s in older:
                s.superseded = True
        for s in older:
            s.context.cancel()  # type: ignore[no-untyped-call]  # the stubs leave it untyped
        if older:
            self._board.poke()
        return stream

    def _close_stream(self, stream: _Stream) -> bool:
        """Forget ``stream``; whether a newer one superseded it."""
        with self._streams_lock:
            self._streams.remove(stream)
            return stream.superseded

    def GetPreferredAllocation(  # noqa: N802 - the gRPC method name
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        _, inventory = self._board.current()
        responses = [
            pb.ContainerPreferredAllocationResponse(
                deviceIDs=preferred_allocation(
                    inventory,
                    list(req.available_deviceIDs),
                    list(req.must_include_deviceIDs),
                    int(req.allocation_size),
                )
            )
            for req in request.container_requests
        ]
        return pb.PreferredAllocationResponse(container_responses=responses)

    def _response_cache(self, inventory: ResourceInventory) -> dict[tuple[str, ...], Any]:
        """The container responses already made from ``inventory`` (a new one: none)."""
        cached = self._responses
        if cached is None or cached[0] is not inventory or len(cached[1]) >= _RESPONSE_CACHE:
            cached = self._responses = (inventory, {})
        return cached[1]

    def Allocate(  # noqa: N802 - the gRPC method name
        self, request: pb.AllocateRequest, context: grpc.ServicerContext
    ) -> pb.AllocateResponse:
        _, inventory = self._board.current()
        cache = self._response_cache(inventory)
        name = self._resource.name
        requests = request.container_requests
        responses = []
        for index, req in enumerate(requests):
            ids = tuple(req.devices_ids)
            response = cache.get(ids)
            if response is not None:
                self._metrics.allocation(name, "success")
                responses.append(response)
                continue
            try:
                alloc = allocate(self._resource, inventory, ids)
            except AllocationError as err:
                self._metrics.allocation(name, err.reason)
                log.warning(
                    "allocate_refused",
                    resource=name,
                    container=index,
                    containers=len(requests),
                    reason=err.reason,
                    error=str(err),
                )
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            self._metrics.allocation(name, "success")
            response = cache[ids] = _container_response(alloc)
            responses.append(response)
        # One line per call, whatever it asked for: 10,000 containers are not 10,000 lines.
        every_id = [i for req in requests for i in req.devices_ids]
        log.info(
            "allocated",
            resource=name,
            containers=len(requests),
            devices=len(every_id),
            device_ids=id_summary(every_id),
        )
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(  # noqa: N802 - the gRPC method name
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        if self._health_check is not None:  # a fresh look at the hardware (Monitor.check)
            try:
                self._health_check()
            except Exception as err:  # noqa: BLE001 - judge by the last good check instead
                log.error("pre_start_recheck_failed", resource=self._resource.name, error=repr(err))
        _, inventory = self._board.current()
        ids = list(request.devices_ids)
        try:
            check_ids(inventory, ids)
        except AllocationError as err:
            log.warning("pre_start_refused", resource=self._resource.name, error=str(err))
            code = (
                grpc.StatusCode.FAILED_PRECONDITION
                if err.reason == "unhealthy"
                else grpc.StatusCode.INVALID_ARGUMENT
            )
            context.abort(code, str(err))
        return pb.PreStartContainerResponse()
