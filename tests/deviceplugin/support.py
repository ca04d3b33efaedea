"""Test support for the device plugin: a small kubelet device manager and sysfs trees.

``MiniKubelet`` serves ``/v1beta1.Registration/Register`` on ``<dir>/kubelet.sock`` in
the order KUBELET-API.md gives: check the version, dial the plugin's socket (the
endpoint is a file name in the directory), call ``GetDevicePluginOptions`` BEFORE
answering, then consume ``ListAndWatch`` on a thread of its own. It can refuse the
first registrations, stop (its socket stays behind, stale) and restart (every file
of the directory deleted, ``kubelet.sock`` re-created).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from podres_exporter.sim.devtree import NicPf, NicVf, write_device_tree

VF_VENDOR = "0x8086"
VF_DEVICE = "0x1889"


@dataclass
class Registration:
    """One Register call as the kubelet saw it."""

    resource: str
    endpoint: str
    version: str
    request_options: tuple[bool, bool]
    dialed_options: tuple[bool, bool] | None = None
    error: str | None = None
    at: float = field(default_factory=time.monotonic)


@dataclass
class Stream:
    """One ListAndWatch stream the kubelet consumes."""

    resource: str
    endpoint: str
    messages: list[list[tuple[str, str, tuple[int, ...]]]] = field(default_factory=list)
    ended: bool = False
    call: Any = None
    channel: Any = None


def _options(o: pb.DevicePluginOptions) -> tuple[bool, bool]:
    return (o.pre_start_required, o.get_preferred_allocation_available)


class MiniKubelet:
    """A small kubelet device manager for the plugin's tests (see the module doc)."""

    def __init__(self, directory: Path, *, refuse: int = 0) -> None:
        self.directory = directory
        self.socket = directory / "kubelet.sock"
        self.refuse = refuse
        self.registrations: list[Registration] = []
        self.streams: list[Stream] = []
        self.events: list[str] = []  # "register:<res>", "options:<res>", "registered:<res>"
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self.drop_newer_on_end = True

    # -- lifecycle

    def start(self) -> MiniKubelet:
        """Start as a kubelet does: delete every file of the directory but the checkpoint
        (plugin sockets included), then serve ``kubelet.sock`` on a NEW inode."""
        self.directory.mkdir(parents=True, exist_ok=True)
        hold = self.directory.parent / f".{self.directory.name}-old-kubelet.sock"
        if self.socket.exists():
            os.link(self.socket, hold)  # held, so the new socket cannot reuse the inode
        for entry in self.directory.iterdir():
            if entry.name != "kubelet_internal_checkpoint":
                entry.unlink()
        server = grpc.server(ThreadPoolExecutor(max_workers=8))
        handler = grpc.method_handlers_generic_handler(
            "v1beta1.Registration",
            {
                "Register": grpc.unary_unary_rpc_method_handler(
                    self._register,
                    request_deserializer=pb.RegisterRequest.FromString,
                    response_serializer=pb.Empty.SerializeToString,
                )
            },
        )
        server.add_generic_rpc_handlers((handler,))
        assert server.add_insecure_port(f"unix://{self.socket}") != 0
        server.start()
        self._server = server
        if hold.exists():
            hold.unlink()
        return self

    def stop(self, *, stale: bool = True) -> None:
        """Stop serving and drop every stream; with ``stale`` the socket file stays (the
        same inode, as a stopped kubelet leaves it)."""
        hold = self.directory.parent / f".{self.directory.name}-kubelet.sock.hold"
        if self._server is not None:
            if stale and self.socket.exists():
                os.link(self.socket, hold)  # gRPC unlinks its socket on stop
            self._server.stop(None).wait()
            self._server = None
            if hold.exists():
                if not self.socket.exists():
                    os.link(hold, self.socket)
                hold.unlink()
        with self._cond:
            streams = list(self.streams)
        for s in streams:
            if s.call is not None:
                s.call.cancel()
        if stale and not self.socket.exists():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(self.socket))  # a socket file nobody listens on
            sock.close()

    def restart(self) -> None:
        """A kubelet restart: stop, then start (every plugin socket deleted)."""
        self.stop()
        self.start()

    # -- Register, as the kubelet does it

    def _register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.Empty:
        reg = Registration(
            request.resource_name,
            request.endpoint,
            request.version,
            _options(request.options),
        )
        with self._cond:
            self.registrations.append(reg)
            self.events.append(f"register:{request.resource_name}")
        if request.version != "v1beta1":
            reg.error = "bad version"
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}"
            )
        with self._cond:
            refuse = self.refuse > 0
            self.refuse -= 1 if refuse else 0
        if refuse:
            reg.error = "refused"
            context.abort(grpc.StatusCode.UNKNOWN, "registration refused by the test kubelet")
        if "/" in request.endpoint:
            reg.error = "endpoint"
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "endpoint must be a file name")
        path = self.directory / request.endpoint
        channel = grpc.insecure_channel(f"unix://{path}")
        stub = pb_grpc.DevicePluginStub(channel)
        try:
            options = stub.GetDevicePluginOptions(pb.Empty(), timeout=10, wait_for_ready=True)
        except grpc.RpcError as err:
            channel.close()
            reg.error = f"dial: {err}"
            context.abort(grpc.StatusCode.UNKNOWN, f"cannot dial {path}")
        reg.dialed_options = _options(options)
        with self._cond:
            self.events.append(f"options:{request.resource_name}")
        stream = Stream(request.resource_name, request.endpoint, channel=channel)
        with self._cond:
            self.streams.append(stream)
        threading.Thread(target=self._consume, args=(stream, stub), daemon=True).start()
        with self._cond:
            self.events.append(f"registered:{request.resource_name}")
            self._cond.notify_all()
        return pb.Empty()

    def _consume(self, stream: Stream, stub: Any) -> None:
        stream.call = stub.ListAndWatch(pb.Empty())
        try:
            for msg in stream.call:
                devices = [
                    (d.ID, d.health, tuple(n.ID for n in d.topology.nodes)) for d in msg.devices
                ]
                with self._cond:
                    stream.messages.append(devices)
                    self._cond.notify_all()
        except grpc.RpcError:
            pass
        finally:
            with self._cond:
                stream.ended = True
                # As the real kubelet (1.28) does: when a client's stream ends, the client
                # registered under the resource NAME is disconnected, which is the newer
                # endpoint when the plugin registered again before the old stream ended.
                newest = next((x for x in reversed(self.streams) if x.resource == stream.resource),
                              None)  # fmt: skip
                self._cond.notify_all()
            stream.channel.close()
            stale = newest is not stream and newest is not None and newest.call is not None
            if self.drop_newer_on_end and stale:
                newest.call.cancel()

    def drop_stream(self, resource: str) -> None:
        """End the live stream of ``resource`` from the kubelet's side (as the kubelet does
        when it disconnects a client), without restarting."""
        with self._cond:
            live = [s for s in self.streams if s.resource == resource and not s.ended]
        for s in live:
            if s.call is not None:
                s.call.cancel()

    # -- observing

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"kubelet condition not met within {timeout}s")
                self._cond.wait(min(left, 0.05))

    def ok_registrations(self, resource: str | None = None) -> list[Registration]:
        return [
            r
            for r in self.registrations
            if r.error is None
            and r.dialed_options is not None
            and (resource is None or r.resource == resource)
        ]

    def live_stream(self, resource: str) -> Stream | None:
        """The stream of the latest registration of ``resource`` (the kubelet drops older
        ones), if it has not ended and has a message."""
        for s in reversed(self.streams):
            if s.resource == resource:
                return s if not s.ended and s.messages else None
        return None

    def devices(self, resource: str) -> list[tuple[str, str, tuple[int, ...]]] | None:
        s = self.live_stream(resource)
        return None if s is None else s.messages[-1]

    def plugin_stub(self, resource: str) -> Any:
        """A DevicePlugin stub on the endpoint of the latest good registration."""
        reg = self.ok_registrations(resource)[-1]
        channel = grpc.insecure_channel(f"unix://{self.directory / reg.endpoint}")
        return pb_grpc.DevicePluginStub(channel)


VF_ADDRESSES = ("0000:af:02.0", "0000:af:02.1", "0000:af:02.2", "0000:af:02.3")


def nic(
    *,
    numa: int = 0,
    down: tuple[str, ...] = (),
    vfio: bool = False,
    vfs: tuple[str, ...] = VF_ADDRESSES,
) -> NicPf:
    """An Intel E810 PF at af:00.0 with SR-IOV VFs (netdevs unless ``vfio``)."""
    from podres_exporter.sim.devtree import interface_name

    return NicPf(
        address="0000:af:00.0",
        interface="enp175s0f0",
        numa=numa,
        vfs=tuple(
            NicVf(
                address=a,
                interface=None if vfio else interface_name(a),
                driver="vfio-pci" if vfio else "iavf",
                carrier=a not in down,
                operstate="down" if a in down else "up",
            )
            for a in vfs
        ),
    )


def write_sysfs(
    root: Path,
    *,
    vfio: bool = False,
    down: tuple[str, ...] = (),
    vfs: tuple[str, ...] = VF_ADDRESSES,
) -> Path:
    """A sysfs tree with one NIC and its VFs; vfio VFs get IOMMU groups 40, 41, ..."""
    write_device_tree(root, [nic(vfio=vfio, down=down, vfs=vfs)])
    if vfio:
        groups = root / "kernel" / "iommu_groups"
        for i, address in enumerate(vfs):
            group = groups / str(40 + i)
            group.mkdir(parents=True, exist_ok=True)
            link = root / "devices" / "pci0000:ae" / "0000:ae:01.0" / address / "iommu_group"
            if link.is_symlink():
                link.unlink()
            os.symlink(os.path.relpath(group, link.parent), link)
    return root


def remove_function(root: Path, address: str) -> None:
    """The function leaves sysfs (hot-unplug, or SR-IOV VFs destroyed)."""
    (root / "bus" / "pci" / "devices" / address).unlink()
    shutil.rmtree(root / "devices" / "pci0000:ae" / "0000:ae:01.0" / address)
