"""A small fake device plugin for the simulated device manager's tests.

``FakePlugin`` is a real gRPC ``v1beta1.DevicePlugin`` server on a unix socket in the
device-plugins directory. Its options, devices and health, preferred-allocation
answers and errors can be switched at any time; it records every call (and whether
``GetDevicePluginOptions`` came while its own ``Register`` call was in flight).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as dp
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc

VERSION = "v1beta1"

Preferred = Callable[[list[str], list[str], int], Sequence[str]]


@dataclass(frozen=True)
class Dev:
    """One fake device: id, health string, NUMA nodes (None: no topology)."""

    id: str
    health: str = "Healthy"
    numa: tuple[int, ...] | None = None


def devs(*ids: str, numa: int | None = None, health: str = "Healthy") -> list[Dev]:
    """Devices with the same NUMA node and health."""
    return [Dev(i, health, None if numa is None else (numa,)) for i in ids]


@dataclass(frozen=True)
class Call:
    """A call the plugin received; ``register_in_flight``: during its own Register."""

    method: str
    request: Any
    register_in_flight: bool = False


def prefer_last(available: list[str], must: list[str], size: int) -> list[str]:
    """The default preference: the must-include ids, then the HIGHEST other ids, so a
    test can tell the plugin's choice from the manager's own (lowest ids first)."""
    rest = [d for d in sorted(available, reverse=True) if d not in must]
    return list(must) + rest[: max(0, size - len(must))]


class FakePlugin(dp_grpc.DevicePluginServicer):
    """A device plugin for ``resource`` serving ``<directory>/<endpoint>``."""

    def __init__(
        self,
        directory: str | Path,
        resource: str = "example.com/vf",
        devices: Iterable[Dev] = (),
        *,
        endpoint: str | None = None,
        pre_start_required: bool = False,
        preferred_available: bool = False,
        version: str = VERSION,
    ) -> None:
        self.directory = Path(directory)
        self.resource = resource
        self.endpoint = endpoint or f"{resource.replace('/', '_').replace('.', '-')}.sock"
        self.version = version
        self.pre_start_required = pre_start_required
        self.preferred_available = preferred_available
        # What Register's options say (None: the same as GetDevicePluginOptions).
        self.register_options: dp.DevicePluginOptions | None = None
        self.preferred: Preferred = prefer_last
        self.preferred_error: tuple[grpc.StatusCode, str] | None = None
        self.allocate_error: tuple[grpc.StatusCode, str] | None = None
        self.allocate_gate: threading.Event | None = None  # Allocate waits until it is set
        self.pre_start_error: tuple[grpc.StatusCode, str] | None = None
        self.calls: list[Call] = []
        self._devices = list(devices)
        self._cond = threading.Condition()
        self._generation = 0
        self._stream_epoch = 0
        self._streams = 0
        self._registering = 0
        self._server: grpc.Server | None = None
        self._watch_stop = threading.Event()
        self._watch: threading.Thread | None = None

    # ------------------------------------------------------------------ control

    @property
    def socket_path(self) -> Path:
        """The plugin's socket."""
        return self.directory / self.endpoint

    @property
    def kubelet_socket(self) -> Path:
        """The kubelet's registration socket."""
        return self.directory / "kubelet.sock"

    @property
    def open_streams(self) -> int:
        """ListAndWatch streams being served now."""
        with self._cond:
            return self._streams

    def methods(self) -> list[str]:
        """The names of the calls received, in order."""
        with self._cond:
            return [c.method for c in self.calls]

    def calls_of(self, method: str) -> list[Call]:
        """The calls of one method."""
        with self._cond:
            return [c for c in self.calls if c.method == method]

    def set_devices(self, devices: Iterable[Dev]) -> None:
        """Replace the device list; every open stream gets the complete new list."""
        with self._cond:
            self._devices = list(devices)
            self._generation += 1
            self._cond.notify_all()

    def set_health(self, device_id: str, health: str) -> None:
        """Change one device's health string."""
        with self._cond:
            devices = [Dev(d.id, health, d.numa) if d.id == device_id else d for d in self._devices]
        self.set_devices(devices)

    def end_streams(self) -> None:
        """End every open ListAndWatch stream (the server keeps serving)."""
        with self._cond:
            self._stream_epoch += 1
            self._cond.notify_all()

    def wait_streams(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Wait until ``count`` streams are open."""
        with self._cond:
            return self._cond.wait_for(lambda: self._streams == count, timeout)

    def start(self) -> FakePlugin:
        """Serve the socket (any stale file there is removed first)."""
        if self._server is not None:
            raise RuntimeError("already serving")
        self.directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        server = grpc.server(ThreadPoolExecutor(max_workers=16, thread_name_prefix="fake-plugin"))
        dp_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop serving: open streams end. Safe to call twice."""
        self._watch_stop.set()
        if self._watch is not None and self._watch is not threading.current_thread():
            self._watch.join()
        self._watch = None
        self._stop_server()

    def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            self.end_streams()
            server.stop(grace=None).wait()

    def register(self, *, timeout: float = 10.0) -> None:
        """Call the kubelet's Register (raises grpc.RpcError when refused)."""
        opts = self.register_options or self._options()
        request = dp.RegisterRequest(
            version=self.version,
            endpoint=self.endpoint,
            resource_name=self.resource,
            options=opts,
        )
        with grpc.insecure_channel(
            f"unix:{self.kubelet_socket}", options=[("grpc.use_local_subchannel_pool", 1)]
        ) as channel:
            register = channel.unary_unary(
                f"/{VERSION}.Registration/Register",
                request_serializer=dp.RegisterRequest.SerializeToString,
                response_deserializer=dp.Empty.FromString,
            )
            with self._cond:
                self._registering += 1
                self.calls.append(Call("Register:sent", request))
            try:
                register(request, timeout=timeout, wait_for_ready=True)
            finally:
                with self._cond:
                    self._registering -= 1
                    self.calls.append(Call("Register:returned", request))

    def serve_and_register(self) -> FakePlugin:
        """``start`` then ``register``."""
        self.start()
        self.register()
        return self

    def watch_kubelet(self, interval: float = 0.02) -> FakePlugin:
        """Like a real plugin: when ``kubelet.sock`` is re-created (a kubelet restart),
        serve the socket again and register again."""
        self._watch_stop.clear()

        def inode() -> int | None:
            try:
                return os.stat(self.kubelet_socket).st_ino
            except FileNotFoundError:
                return None

        def loop(seen: int | None) -> None:
            while not self._watch_stop.wait(interval):
                now = inode()
                if now is None or now == seen:
                    continue
                seen = now
                self._stop_server()
                self.start()
                with contextlib.suppress(grpc.RpcError):
                    self.register()

        self._watch = threading.Thread(target=loop, args=(inode(),), daemon=True)
        self._watch.start()
        return self

    def __enter__(self) -> FakePlugin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ RPCs

    def _options(self) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(
            pre_start_required=self.pre_start_required,
            get_preferred_allocation_available=self.preferred_available,
        )

    def _record(self, method: str, request: Any) -> None:
        with self._cond:
            self.calls.append(Call(method, request, self._registering > 0))
            self._cond.notify_all()

    def _message(self) -> dp.ListAndWatchResponse:
        out = []
        for d in self._devices:
            dev = dp.Device(ID=d.id, health=d.health)
            if d.numa is not None:
                dev.topology.CopyFrom(dp.TopologyInfo(nodes=[dp.NUMANode(ID=n) for n in d.numa]))
            out.append(dev)
        return dp.ListAndWatchResponse(devices=out)

    def GetDevicePluginOptions(self, request: dp.Empty, context: grpc.ServicerContext) -> Any:
        self._record("GetDevicePluginOptions", request)
        return self._options()

    def ListAndWatch(self, request: dp.Empty, context: grpc.ServicerContext) -> Iterator[Any]:
        self._record("ListAndWatch", request)
        with self._cond:
            self._streams += 1
            self._cond.notify_all()
            epoch, generation = self._stream_epoch, self._generation
            first = self._message()
        try:
            yield first
            while True:
                with self._cond:

                    def moved(seen: int = generation) -> bool:
                        return self._generation != seen or self._stream_epoch != epoch

                    self._cond.wait_for(moved, timeout=0.05)
                    if self._stream_epoch != epoch or not context.is_active():
                        return
                    if self._generation == generation:
                        continue
                    generation = self._generation
                    message = self._message()
                yield message
        finally:
            with self._cond:
                self._streams -= 1
                self._cond.notify_all()

    def GetPreferredAllocation(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("GetPreferredAllocation", request)
        if self.preferred_error is not None:
            context.abort(*self.preferred_error)
        return dp.PreferredAllocationResponse(
            container_responses=[
                dp.ContainerPreferredAllocationResponse(
                    deviceIDs=list(
                        self.preferred(
                            list(r.available_deviceIDs),
                            list(r.must_include_deviceIDs),
                            r.allocation_size,
                        )
                    )
                )
                for r in request.container_requests
            ]
        )

    def Allocate(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("Allocate", request)
        if self.allocate_gate is not None:
            self.allocate_gate.wait(30)
        if self.allocate_error is not None:
            context.abort(*self.allocate_error)
        responses = []
        for r in request.container_requests:
            ids = list(r.devices_ids)
            responses.append(
                dp.ContainerAllocateResponse(
                    envs={"FAKE_DEVICES": ",".join(ids)},
                    mounts=[
                        dp.Mount(container_path="/fake", host_path="/var/fake", read_only=True)
                    ],
                    devices=[
                        dp.DeviceSpec(
                            container_path=f"/dev/fake-{i}",
                            host_path=f"/dev/fake-{i}",
                            permissions="rw",
                        )
                        for i in ids
                    ],
                    annotations={"fake.example.com/devices": ",".join(ids)},
                    cdi_devices=[dp.CDIDevice(name=f"example.com/vf={i}") for i in ids],
                )
            )
        return dp.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record("PreStartContainer", request)
        if self.pre_start_error is not None:
            context.abort(*self.pre_start_error)
        return dp.PreStartContainerResponse()
