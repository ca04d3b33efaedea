"""The ``v1beta1.DevicePlugin`` service: thin gRPC glue over the pure core.

* ``GetDevicePluginOptions``: ``pre_start_required`` from the resource's
  ``pre_start``, ``get_preferred_allocation_available`` always (the same options
  the lifecycle sends in the RegisterRequest: :func:`plugin_options`).
* ``ListAndWatch``: the complete device list at once, then again on every change
  of it; the stream ends when the board closes (shutdown) or the kubelet cancels.
* ``GetPreferredAllocation``: :func:`allocate.preferred_allocation` per container.
* ``Allocate``: :func:`allocate.allocate` per container; unknown or unhealthy ids
  answer ``INVALID_ARGUMENT`` with the message naming them.
* ``PreStartContainer``: runs a fresh health check (the :data:`HealthCheck` it was
  given), then ``FAILED_PRECONDITION`` if any of the ids is unhealthy
  (``INVALID_ARGUMENT`` if unknown).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeAlias

import grpc
import structlog

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from podres_exporter.deviceplugin.allocate import (
    ContainerAllocation,
    allocate,
    check_ids,
    preferred_allocation,
)
from podres_exporter.deviceplugin.board import Board
from podres_exporter.deviceplugin.config import ResourceConfig
from podres_exporter.deviceplugin.inventory import ResourceInventory
from podres_exporter.deviceplugin.metrics import PluginMetrics
from podres_exporter.errors import AllocationError

__all__ = [
    "DevicePluginServicer",
    "HealthCheck",
    "StreamLost",
    "list_and_watch_response",
    "plugin_options",
]

log = structlog.get_logger(__name__)

# How long a stream waits for a change before it looks whether it was cancelled.
_STREAM_POLL_S = 1.0

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


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    """One resource's DevicePlugin service, serving what ``board`` holds.

    ``health_check``: run by PreStartContainer before it judges the devices (none: it
    judges by the last check). ``on_stream_lost``: told when the kubelet ends a
    ListAndWatch stream that we did not close. Every method is safe to call from many
    threads at once.
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
        started = time.monotonic()
        context.add_callback(board.poke)  # a cancelled stream wakes at once
        self._metrics.stream_opened(name)
        log.info("list_and_watch_started", resource=name)
        try:
            version, inventory = board.current()
            sent = _device_key(inventory)
            yield list_and_watch_response(inventory)
            while context.is_active() and not board.closed and not self._closed.is_set():
                new_version = board.wait(version, _STREAM_POLL_S)
                if new_version == version:
                    continue
                version, inventory = board.current()
                key = _device_key(inventory)
                if key != sent:
                    sent = key
                    yield list_and_watch_response(inventory)
        finally:
            self._metrics.stream_closed(name)
            log.info("list_and_watch_ended", resource=name)
            ours = board.closed or self._closed.is_set()
            if not ours and self._on_stream_lost is not None:
                self._on_stream_lost(self, started)  # the kubelet ended it: it never re-dials

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

    def Allocate(  # noqa: N802 - the gRPC method name
        self, request: pb.AllocateRequest, context: grpc.ServicerContext
    ) -> pb.AllocateResponse:
        _, inventory = self._board.current()
        name = self._resource.name
        responses = []
        for req in request.container_requests:
            ids = list(req.devices_ids)
            try:
                alloc = allocate(self._resource, inventory, ids)
            except AllocationError as err:
                self._metrics.allocation(name, err.reason)
                log.warning("allocate_refused", resource=name, devices=ids, error=str(err))
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            self._metrics.allocation(name, "success")
            log.info("allocated", resource=name, devices=ids)
            responses.append(_container_response(alloc))
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
