"""The device manager's side of a plugin: the channel to its socket, its stubs and
its ListAndWatch call, and the conversions of the plugin's messages to our records.

``go_rpc_error`` prints a gRPC error as the kubelet (a Go client) does, which is what
a plugin and its tests see in the kubelet's answers.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import grpc

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as dp
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from podres_sim.kubelet.devicemanager.records import PluginDevice, PluginOptions

__all__ = [
    "DialError",
    "PluginEndpoint",
    "devices_of",
    "go_rpc_error",
    "options_of",
    "requested_options",
]


def go_rpc_error(err: grpc.RpcError) -> str:
    """An RpcError as a Go gRPC client prints it: ``rpc error: code = X desc = ...``."""
    code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = err.details() if isinstance(err, grpc.Call) else str(err)
    name = (
        "OK"
        if code == grpc.StatusCode.OK
        else "".join(p.capitalize() for p in code.name.split("_"))
    )
    return f"rpc error: code = {name} desc = {details}"


def options_of(msg: dp.DevicePluginOptions) -> PluginOptions:
    """A plugin's options as our record."""
    return PluginOptions(
        pre_start_required=msg.pre_start_required,
        get_preferred_allocation_available=msg.get_preferred_allocation_available,
    )


def requested_options(request: dp.RegisterRequest) -> PluginOptions | None:
    """The options a RegisterRequest carried (None: none)."""
    return options_of(request.options) if request.HasField("options") else None


def devices_of(msg: dp.ListAndWatchResponse) -> dict[str, PluginDevice]:
    """One ListAndWatch list as our records, by device id."""
    out: dict[str, PluginDevice] = {}
    for d in msg.devices:
        nodes = sorted({n.ID for n in d.topology.nodes}) if d.HasField("topology") else []
        out[d.ID] = PluginDevice(d.ID, d.health, tuple(nodes) if nodes else None)
    return out


class PluginEndpoint:
    """One registered plugin: its channel, options and ListAndWatch consumer."""

    def __init__(self, resource: str, endpoint: str, path: Path, serial: int) -> None:
        self.resource = resource
        self.endpoint = endpoint
        self.path = path
        self.serial = serial
        self.options = PluginOptions()
        self.channel = grpc.insecure_channel(
            f"unix:{path}",
            options=[
                # A private subchannel pool: a plugin that re-serves its socket (a new
                # inode) must not be reached through an old connection's state.
                ("grpc.use_local_subchannel_pool", 1),
                ("grpc.enable_retries", 0),
                ("grpc.max_receive_message_length", -1),
                ("grpc.initial_reconnect_backoff_ms", 50),
                ("grpc.min_reconnect_backoff_ms", 50),
                ("grpc.max_reconnect_backoff_ms", 200),
            ],
        )
        stub = dp_grpc.DevicePluginStub(self.channel)  # type: ignore[no-untyped-call]
        self.get_options: Any = stub.GetDevicePluginOptions
        self.list_and_watch: Any = stub.ListAndWatch
        self.get_preferred: Any = stub.GetPreferredAllocation
        self.allocate: Any = stub.Allocate
        self.pre_start: Any = stub.PreStartContainer
        self.call: Any = None  # the ListAndWatch call, once started
        self.closed = False  # dropped by the kubelet: its stream's end means nothing
        self.hung_up = False  # its stream ended by the kubelet, which keeps the resource
        self.ended = False  # its stream ended
        self.lists = 0  # ListAndWatch lists received
        self.thread: threading.Thread | None = None

    def hang_up(self) -> None:
        """End the stream from the kubelet's side (the channel stays for the consumer)."""
        self.hung_up = True
        call = self.call
        if call is not None:
            call.cancel()

    def close(self) -> None:
        """Stop consuming and close the channel (from any thread, lock not held)."""
        self.closed = True
        call = self.call
        if call is not None:
            call.cancel()
        self.channel.close()

    def __repr__(self) -> str:
        return f"<endpoint {self.resource} {self.endpoint} #{self.serial}>"


class DialError(Exception):
    """The plugin's socket did not answer (the message is the kubelet's)."""
