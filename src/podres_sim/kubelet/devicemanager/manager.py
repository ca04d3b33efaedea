"""The kubelet's device manager, simulated: device plugins register with it over the
real ``v1beta1`` gRPC protocol and it admits containers through them.

``SimDeviceManager`` serves ``/v1beta1.Registration/Register`` on
``<directory>/kubelet.sock`` and behaves like the kubelet's device manager:

* ``Register`` checks the version (``v1beta1``), the resource name (an extended
  resource name) and the endpoint (a file name in the directory), dials the plugin's
  socket (``dial_timeout_s``, 10 s as the kubelet), calls ``GetDevicePluginOptions``
  and only then answers; a plugin must already serve its socket on other threads. A
  second registration of a resource replaces the first (the old stream is dropped).
* Right after, a thread consumes the plugin's ``ListAndWatch`` stream: every message
  is the complete device list (a device left out is gone), only the exact string
  ``Healthy`` is healthy. Allocatable = healthy devices, capacity = healthy +
  unhealthy. When the stream ends every device of the resource turns unhealthy and
  the resource is dropped ``resource_grace_s`` later (5 minutes on a kubelet) unless
  the plugin registers again. The kubelet never dials a plugin again by itself.
* ``allocate`` admits one container's request for one resource the way the kubelet
  does: candidates are the healthy devices nobody holds; ``GetPreferredAllocation``
  only when the plugin advertises it (available = candidates + must-include,
  must-include = what is already chosen, size = the total); then ``Allocate`` with
  exactly one ``ContainerAllocateRequest``, of whose answer only
  ``container_responses[0]`` counts. Every failure raises ``AdmissionError``. A
  container that already holds devices of the resource gets them again without a
  call (a pod admitted again after a kubelet restart is not re-Allocated).
* ``pre_start`` calls ``PreStartContainer`` (30 s deadline) when advertised.
* ``restart`` is a kubelet restart: the server stops, every plugin stream ends, every
  file in the directory but ``kubelet_internal_checkpoint`` is deleted, ``kubelet.sock``
  is re-created (a new inode) and plugins must register again. Allocations survive
  (in memory, and in the checkpoint, which a new manager on the same directory reads
  back). The checkpoint's format is this simulator's own: nobody else is to parse it,
  just as nobody is to parse a real kubelet's.

For tests of a plugin, ``registrations`` records every Register call (the options it
carried and those the plugin answered), ``lists_received`` counts a registration's
ListAndWatch lists, ``refuse_registrations`` makes the next Register calls fail and
``disconnect`` ends a plugin's stream from the kubelet's side.

No lock is held across a gRPC call. ``add_listener`` callbacks run, without locks, on
the thread that changed the state (a plugin's stream consumer, a Register handler).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any

import grpc
import structlog

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as dp
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from podres_exporter.core.errors import UNEXPECTED_ADMISSION_ERROR, AdmissionError, PreStartError
from podres_exporter.core.kube import extended_resource_problem
from podres_exporter.daemon.unixsock import MAX_SOCKET_PATH, socket_path_too_long
from podres_sim.kubelet.grpcserve import bind, old_inode_held, shut_down, unlink_socket

__all__ = [
    "CHECKPOINT",
    "HEALTHY",
    "KUBELET_SOCKET",
    "PRE_START_TIMEOUT_S",
    "UNEXPECTED_ADMISSION_ERROR",
    "UNHEALTHY",
    "VERSION",
    "AdmissionError",
    "AllocationResult",
    "ContainerMount",
    "DeviceNodeSpec",
    "PluginDevice",
    "PluginOptions",
    "PreStartError",
    "RegistrationRecord",
    "SimDeviceManager",
    "go_rpc_error",
]

log = structlog.get_logger("podres_sim")

VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
CHECKPOINT = "kubelet_internal_checkpoint"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
PRE_START_TIMEOUT_S = 30.0


REGISTER = f"/{VERSION}.Registration/Register"
_CHECKPOINT_FORMAT = "podres-sim-devicemanager/1"


@dataclass(frozen=True, slots=True)
class PluginOptions:
    """A plugin's ``DevicePluginOptions``."""

    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """One device from a plugin's latest ``ListAndWatch`` message. ``health`` is the string
    as sent; ``numa`` the sorted NUMA nodes of its TopologyInfo, None when it has none."""

    id: str
    health: str = HEALTHY
    numa: tuple[int, ...] | None = None

    @property
    def healthy(self) -> bool:
        """Only the exact string ``Healthy`` is healthy."""
        return self.health == HEALTHY


@dataclass(frozen=True, slots=True)
class RegistrationRecord:
    """One ``Register`` call: ``result`` is ``"ok"`` or the error the plugin got.
    ``options`` are what the plugin's ``GetDevicePluginOptions`` answered (accepted
    registrations only: it answers before Register does); ``request_options`` what
    the RegisterRequest itself carried (None: none), which the kubelet does not use."""

    resource: str
    endpoint: str
    version: str
    result: str
    options: PluginOptions | None = None
    request_options: PluginOptions | None = None

    @property
    def ok(self) -> bool:
        """Whether the registration was accepted."""
        return self.result == "ok"


@dataclass(frozen=True, slots=True)
class ContainerMount:
    """A ``Mount`` of an AllocateResponse."""

    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class DeviceNodeSpec:
    """A ``DeviceSpec`` of an AllocateResponse (a device node for the container)."""

    container_path: str
    host_path: str
    permissions: str = ""


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """What one container got of one resource: the device ids (with the NUMA nodes the
    plugin advertised for each at allocation time) and ``container_responses[0]`` of
    the plugin's AllocateResponse as plain data. ``preferred`` is what
    GetPreferredAllocation answered, None when it was not called."""

    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...] = ()
    topology: Mapping[str, tuple[int, ...] | None] = field(
        default_factory=lambda: MappingProxyType({})
    )
    envs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    mounts: tuple[ContainerMount, ...] = ()
    devices: tuple[DeviceNodeSpec, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    cdi_devices: tuple[str, ...] = ()
    preferred: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (the checkpoint's entry)."""
        return {
            "pod": self.pod,
            "container": self.container,
            "resource": self.resource,
            "devices": [
                {"id": i, "numa": None if (n := self.topology.get(i)) is None else list(n)}
                for i in self.device_ids
            ],
            "envs": dict(self.envs),
            "mounts": [[m.container_path, m.host_path, m.read_only] for m in self.mounts],
            "device_specs": [[d.container_path, d.host_path, d.permissions] for d in self.devices],
            "annotations": dict(self.annotations),
            "cdi_devices": list(self.cdi_devices),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AllocationResult:
        """The inverse of ``to_json``."""
        devices = data.get("devices", [])
        return cls(
            pod=str(data["pod"]),
            container=str(data["container"]),
            resource=str(data["resource"]),
            device_ids=tuple(str(d["id"]) for d in devices),
            topology=MappingProxyType(
                {str(d["id"]): None if d.get("numa") is None else tuple(d["numa"]) for d in devices}
            ),
            envs=MappingProxyType(dict(data.get("envs", {}))),
            mounts=tuple(
                ContainerMount(str(a), str(b), bool(c)) for a, b, c in data.get("mounts", [])
            ),
            devices=tuple(
                DeviceNodeSpec(str(a), str(b), str(c)) for a, b, c in data.get("device_specs", [])
            ),
            annotations=MappingProxyType(dict(data.get("annotations", {}))),
            cdi_devices=tuple(str(n) for n in data.get("cdi_devices", [])),
        )


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


def _options_of(msg: dp.DevicePluginOptions) -> PluginOptions:
    return PluginOptions(
        pre_start_required=msg.pre_start_required,
        get_preferred_allocation_available=msg.get_preferred_allocation_available,
    )


def _requested_options(request: dp.RegisterRequest) -> PluginOptions | None:
    return _options_of(request.options) if request.HasField("options") else None


def _devices_of(msg: dp.ListAndWatchResponse) -> dict[str, PluginDevice]:
    out: dict[str, PluginDevice] = {}
    for d in msg.devices:
        nodes = sorted({n.ID for n in d.topology.nodes}) if d.HasField("topology") else []
        out[d.ID] = PluginDevice(d.ID, d.health, tuple(nodes) if nodes else None)
    return out


class _Endpoint:
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


@dataclass(slots=True)
class _Resource:
    """What the manager knows of one resource (registered now, or within its grace)."""

    name: str
    devices: dict[str, PluginDevice] = field(default_factory=dict)
    endpoint: _Endpoint | None = None
    stopped_at: float | None = None  # stream ended (or kubelet started without the plugin)


@dataclass(slots=True)
class _Plan:
    """One admission request on its way through ``allocate``."""

    pod: str
    container: str
    resource: str
    count: int
    hint: frozenset[int] | None
    aligned: set[str] = field(default_factory=set)
    unaligned: set[str] = field(default_factory=set)
    no_affinity: set[str] = field(default_factory=set)
    within_aligned: bool = False
    chosen: list[str] = field(default_factory=list)
    ask: tuple[list[str], list[str]] | None = None  # GetPreferredAllocation: available, must
    endpoint: _Endpoint | None = None


class SimDeviceManager:
    """A simulated kubelet device manager serving ``<directory>/kubelet.sock``.

    Nothing is served until ``start`` (or ``with``). See the module docstring.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        resource_grace_s: float = 300.0,
        dial_timeout_s: float = 10.0,
        workers: int = 16,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if resource_grace_s < 0 or dial_timeout_s <= 0 or workers < 1:
            raise ValueError("resource_grace_s >= 0, dial_timeout_s > 0 and workers >= 1")
        self._dir = Path(directory).absolute()
        self._socket = self._dir / KUBELET_SOCKET
        if socket_path_too_long(self._socket):
            raise ValueError(
                f"unix socket path too long ({MAX_SOCKET_PATH} bytes at most): {self._socket}"
            )
        self._grace = resource_grace_s
        self._dial_timeout = dial_timeout_s
        self._workers = workers
        self._clock = clock
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._life = threading.RLock()  # start / stop
        self._ckpt_lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._epoch = 0  # increases at every start and stop
        self._serial = 0
        self._version = 0  # increases with every change of state
        self._resources: dict[str, _Resource] = {}
        self._allocs: dict[tuple[str, str, str], AllocationResult] = {}
        self._reserved: dict[str, set[str]] = {}  # chosen, Allocate in flight
        self._registrations: list[RegistrationRecord] = []
        self._refusals: list[str] = []  # the reasons for the next Register calls refused
        self._listeners: list[Callable[[str], None]] = []
        self._threads: list[threading.Thread] = []
        self._load_checkpoint()

    # ------------------------------------------------------------------ properties

    @property
    def directory(self) -> Path:
        """The device-plugins directory."""
        return self._dir

    @property
    def socket_path(self) -> Path:
        """``<directory>/kubelet.sock``."""
        return self._socket

    @property
    def checkpoint_path(self) -> Path:
        """``<directory>/kubelet_internal_checkpoint`` (this simulator's own format)."""
        return self._dir / CHECKPOINT

    @property
    def running(self) -> bool:
        """Whether Register is served."""
        with self._life:
            return self._server is not None

    @property
    def registrations(self) -> tuple[RegistrationRecord, ...]:
        """Every Register call so far, in order, refused ones included."""
        with self._lock:
            return tuple(self._registrations)

    @property
    def version(self) -> int:
        """A counter that increases with every change of state."""
        with self._lock:
            return self._version

    # ------------------------------------------------------------------ queries

    def resources(self) -> tuple[str, ...]:
        """Registered resources (those whose plugin went away included, until dropped)."""
        with self._lock:
            self._purge()
            return tuple(self._resources)

    def devices(self, resource: str) -> tuple[PluginDevice, ...]:
        """The devices of the plugin's latest complete list (empty: unknown resource)."""
        with self._lock:
            self._purge()
            res = self._resources.get(resource)
            return tuple(res.devices.values()) if res else ()

    def allocatable(self, resource: str) -> int:
        """How many healthy devices the resource has."""
        return sum(d.healthy for d in self.devices(resource))

    def capacity(self, resource: str) -> int:
        """How many devices the resource has, healthy or not."""
        return len(self.devices(resource))

    def free_devices(self, resource: str) -> frozenset[str]:
        """Healthy devices that no container holds."""
        with self._lock:
            self._purge()
            return frozenset(self._available(resource))

    def options(self, resource: str) -> PluginOptions | None:
        """The options of the resource's plugin (None: none registered since the start)."""
        with self._lock:
            res = self._resources.get(resource)
            return res.endpoint.options if res and res.endpoint else None

    def endpoint(self, resource: str) -> str | None:
        """The socket file name of the resource's plugin."""
        with self._lock:
            res = self._resources.get(resource)
            return res.endpoint.endpoint if res and res.endpoint else None

    def connected(self, resource: str) -> bool:
        """Whether the resource's plugin is registered and its stream is open."""
        with self._lock:
            res = self._resources.get(resource)
            return bool(res and res.endpoint and res.stopped_at is None)

    def lists_received(self, resource: str) -> int:
        """How many ListAndWatch lists the resource's latest registration has sent (0: none
        yet, or none registered since the start); an empty list counts."""
        with self._lock:
            res = self._resources.get(resource)
            return res.endpoint.lists if res and res.endpoint else 0

    def allocations(self, pod: str | None = None) -> tuple[AllocationResult, ...]:
        """Every allocation (of one pod), in the order they were made."""
        with self._lock:
            return tuple(a for a in self._allocs.values() if pod is None or a.pod == pod)

    def allocation(self, pod: str, container: str, resource: str) -> AllocationResult | None:
        """What one container holds of one resource."""
        with self._lock:
            return self._allocs.get((pod, container, resource))

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0) -> bool:
        """Wait until ``predicate()`` is truthy (re-checked at every change and every
        50 ms, never under the manager's lock); False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                seen = self._version
            if predicate():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._cond:
                if self._version == seen:
                    self._cond.wait(min(left, 0.05))

    def add_listener(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(resource)`` after every change of a resource's registration or devices."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[str], None]) -> None:
        """Forget a listener added by ``add_listener``."""
        with self._lock, contextlib.suppress(ValueError):
            self._listeners.remove(fn)

    def refuse_registrations(self, count: int, reason: str) -> None:
        """Refuse the next ``count`` Register calls that are otherwise valid: the plugin
        gets ``reason`` as the error (``UNKNOWN``), as from a kubelet that cannot take
        it just now, and the record's ``result`` says it."""
        if count < 0:
            raise ValueError("count >= 0")
        with self._lock:
            self._refusals.extend([reason] * count)

    def disconnect(self, resource: str, timeout: float = 5.0) -> bool:
        """End the resource's ListAndWatch stream from the kubelet's side, as a kubelet
        drops a plugin's client, without a restart: the devices turn unhealthy and the
        plugin must register again (it is never dialled again by itself). Returns once
        the stream has ended (or ``timeout`` passed); False when none was open."""
        with self._lock:
            res = self._resources.get(resource)
            ep = res.endpoint if res is not None and res.stopped_at is None else None
        if ep is None:
            return False
        ep.hang_up()
        thread = ep.thread
        if thread is not None and thread is not threading.current_thread():
            deadline = time.monotonic() + timeout
            while thread.ident is None and time.monotonic() < deadline:
                time.sleep(0.01)  # started once Register has answered
            if thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        return True

    # ------------------------------------------------------------------ admission

    def allocate(
        self,
        pod: str,
        container: str,
        resource: str,
        count: int,
        *,
        numa_hint: int | Iterable[int] | None = None,
    ) -> AllocationResult:
        """Allocate ``count`` devices of ``resource`` to a container, as the kubelet admits
        it (``pod`` is a pod UID or any unique pod key). ``numa_hint`` is the topology
        manager's NUMA affinity: devices on those nodes are taken first. Raises
        AdmissionError. No lock is held during the gRPC calls."""
        hint = (
            None
            if numa_hint is None
            else frozenset([numa_hint] if isinstance(numa_hint, int) else numa_hint)
        )
        plan = self._plan(_Plan(pod, container, resource, count, hint))
        if isinstance(plan, AllocationResult):
            return plan
        preferred = self._ask_preferred(plan)
        picked, ep, topology = self._pick(plan, preferred)
        try:
            result = self._call_allocate(plan, ep, picked, topology, preferred)
        finally:
            with self._lock:
                self._reserved[resource].difference_update(picked)
        with self._lock:
            self._allocs[(pod, container, resource)] = result
            self._changed()
        self._write_checkpoint()
        log.debug(
            "sim_device_allocated",
            pod=pod,
            container=container,
            resource=resource,
            devices=list(picked),
        )
        return result

    def _plan(self, plan: _Plan) -> _Plan | AllocationResult:
        """Check the request and work out what to ask the plugin (lock taken here)."""
        pod, container, resource, count = plan.pod, plan.container, plan.resource, plan.count
        with self._lock:
            self._purge()
            held = self._allocs.get((pod, container, resource))
            if held is not None:
                if len(held.device_ids) != count:
                    raise AdmissionError(
                        f"pod {pod!r} container {container!r} changed request for resource "
                        f"{resource!r} from {len(held.device_ids)} to {count}"
                    )
                return held  # admitted again (kubelet restart): no new Allocate
            if count <= 0:
                return AllocationResult(pod, container, resource)
            res = self._resources.get(resource)
            if res is None:
                if any(r == resource for _, _, r in self._allocs):
                    # Known from earlier allocations, but no plugin (any more).
                    raise AdmissionError(f"can't allocate unregistered device {resource}")
                # Not a device-plugin resource at all: the node has none of it.
                raise AdmissionError(
                    f"Node didn't have enough resource: {resource}, requested: {count}, "
                    f"used: 0, capacity: 0",
                    reason=f"OutOf{resource}",
                )
            available = self._available(resource)
            if len(available) < count:
                raise AdmissionError(self._unavailable(resource, count, len(available)))
            plan.aligned, plan.unaligned, plan.no_affinity = self._by_affinity(
                res, available, plan.hint
            )
            # As the kubelet's devicesToAllocate: when the aligned devices are more than
            # needed, the plugin picks among them; otherwise all aligned ones are taken
            # and the plugin picks the rest among all candidates, those included.
            plan.within_aligned = plan.hint is not None and count < len(plan.aligned)
            if plan.within_aligned:
                plan.ask = (sorted(plan.aligned), [])
            else:
                plan.chosen = sorted(plan.aligned)[:count]
                if len(plan.chosen) < count:
                    plan.ask = (sorted(available), list(plan.chosen))
            plan.endpoint = res.endpoint
            if not (plan.endpoint and plan.endpoint.options.get_preferred_allocation_available):
                plan.ask = None
            return plan

    @staticmethod
    def _ask_preferred(plan: _Plan) -> tuple[str, ...] | None:
        """GetPreferredAllocation, when the plan asks for it (no lock held)."""
        if plan.ask is None or plan.endpoint is None:
            return None
        request = dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(
                    available_deviceIDs=plan.ask[0],
                    must_include_deviceIDs=plan.ask[1],
                    allocation_size=plan.count,
                )
            ]
        )
        try:
            answer = plan.endpoint.get_preferred(request)
        except grpc.RpcError as err:
            raise AdmissionError(
                f"device plugin GetPreferredAllocation rpc failed with err: {go_rpc_error(err)}"
            ) from None
        if not answer.container_responses:
            return ()
        return tuple(answer.container_responses[0].deviceIDs)

    def _pick(
        self, plan: _Plan, preferred: tuple[str, ...] | None
    ) -> tuple[list[str], _Endpoint | None, dict[str, tuple[int, ...] | None]]:
        """Choose the devices (the plugin's preference first, ids it does not offer
        ignored) and reserve them; devices taken meanwhile by others are replaced."""
        resource, count = plan.resource, plan.count
        with self._lock:
            if (plan.pod, plan.container, resource) in self._allocs:
                raise AdmissionError(
                    f"pod {plan.pod!r} container {plan.container!r} is being admitted twice"
                )
            res = self._resources.get(resource)
            if res is None:
                raise AdmissionError(f"can't allocate unregistered device {resource}")
            now = self._available(resource)
            picked = [d for d in plan.chosen if d in now]

            def take(ids: Iterable[str]) -> None:
                for d in ids:
                    if len(picked) >= count:
                        return
                    if d in now and d not in picked:
                        picked.append(d)

            if plan.within_aligned:
                take(d for d in preferred or () if d in plan.aligned)
                take(sorted(plan.aligned))
            else:
                take(preferred or ())
                take(sorted(plan.unaligned))
                take(sorted(plan.no_affinity))
            take(sorted(now))  # others took some meanwhile: any free healthy device
            if len(picked) < count:
                raise AdmissionError(self._unavailable(resource, count, len(now)))
            self._reserved.setdefault(resource, set()).update(picked)
            return picked, res.endpoint, {d: res.devices[d].numa for d in picked}

    @staticmethod
    def _call_allocate(
        plan: _Plan,
        ep: _Endpoint | None,
        picked: list[str],
        topology: dict[str, tuple[int, ...] | None],
        preferred: tuple[str, ...] | None,
    ) -> AllocationResult:
        """Allocate with exactly one ContainerAllocateRequest (no lock held)."""
        if ep is None or ep.ended:
            raise AdmissionError(f"endpoint {ep!r} for {plan.resource} has been stopped")
        request = dp.AllocateRequest(
            container_requests=[dp.ContainerAllocateRequest(devices_ids=picked)]
        )
        try:
            response = ep.allocate(request)
        except grpc.RpcError as err:
            raise AdmissionError(go_rpc_error(err)) from None
        if not response.container_responses:
            raise AdmissionError(f"no containers return in allocation response {response}")
        first = response.container_responses[0]  # only the first one counts
        return AllocationResult(
            pod=plan.pod,
            container=plan.container,
            resource=plan.resource,
            device_ids=tuple(picked),
            topology=MappingProxyType(topology),
            envs=MappingProxyType(dict(first.envs)),
            mounts=tuple(
                ContainerMount(m.container_path, m.host_path, m.read_only) for m in first.mounts
            ),
            devices=tuple(
                DeviceNodeSpec(d.container_path, d.host_path, d.permissions) for d in first.devices
            ),
            annotations=MappingProxyType(dict(first.annotations)),
            cdi_devices=tuple(c.name for c in first.cdi_devices),
            preferred=preferred,
        )

    def pre_start(self, pod: str, container: str) -> tuple[str, ...]:
        """Call ``PreStartContainer`` for each resource the container holds whose plugin
        asks for it (30 s deadline); return those resources. Raises PreStartError."""
        calls: list[tuple[str, _Endpoint, tuple[str, ...]]] = []
        with self._lock:
            for (p, c, resource), alloc in self._allocs.items():
                if p != pod or c != container or not alloc.device_ids:
                    continue
                res = self._resources.get(resource)
                if res is None:
                    raise PreStartError(
                        f"endpoint not found in cache for a registered resource: {resource}"
                    )
                ep = res.endpoint  # None after a restart, until the plugin is back: no options
                if ep is not None and ep.options.pre_start_required:
                    calls.append((resource, ep, alloc.device_ids))
        for resource, ep, ids in calls:
            if ep.ended:
                raise PreStartError(f"endpoint {ep!r} for {resource} has been stopped")
            try:
                ep.pre_start(
                    dp.PreStartContainerRequest(devices_ids=ids), timeout=PRE_START_TIMEOUT_S
                )
            except grpc.RpcError as err:
                raise PreStartError(
                    f"device plugin PreStartContainer rpc failed with err: {go_rpc_error(err)}"
                ) from None
        return tuple(r for r, _, _ in calls)

    def release(self, pod: str, container: str | None = None) -> int:
        """Free what a pod (or one of its containers) holds; return how many allocations."""
        with self._lock:
            keys = [k for k in self._allocs if k[0] == pod and container in (None, k[1])]
            for k in keys:
                del self._allocs[k]
            if keys:
                self._changed()
        if keys:
            self._write_checkpoint()
        return len(keys)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> SimDeviceManager:
        """Start like a kubelet: delete every file in the directory but the checkpoint,
        create ``kubelet.sock`` (a new inode) and serve Register. Known resources stay,
        with no devices, until their plugin registers again or the grace runs out."""
        with self._life:
            if self._server is not None:
                raise RuntimeError("the simulated device manager is already running")
            self._dir.mkdir(mode=0o750, parents=True, exist_ok=True)
            executor = ThreadPoolExecutor(
                max_workers=self._workers, thread_name_prefix="sim-devicemanager"
            )
            server = grpc.server(
                executor,
                handlers=[
                    grpc.method_handlers_generic_handler(
                        f"{VERSION}.Registration",
                        {
                            "Register": grpc.unary_unary_rpc_method_handler(
                                self._register,
                                request_deserializer=dp.RegisterRequest.FromString,
                                response_serializer=dp.Empty.SerializeToString,
                            )
                        },
                    )
                ],
            )
            with self._lock:
                self._epoch += 1
                now = self._clock()
                for res in self._resources.values():
                    res.devices = {}
                    res.endpoint = None
                    res.stopped_at = now
                self._changed()
            with old_inode_held(self._socket, self) as hold:
                self._clean_directory(keep=hold)
                bind(server, executor, self._socket)
                server.start()
            self._server, self._executor = server, executor
            log.info("sim_device_manager_started", socket=str(self._socket))
        self._write_checkpoint()
        self._notify(*self.resources())
        return self

    def stop(self, *, remove_socket: bool = False) -> None:
        """Stop like a kubelet: Register is no longer served (``kubelet.sock`` stays on
        disk, stale, unless ``remove_socket``) and every plugin stream ends, which turns
        every device unhealthy. Safe to call twice."""
        with self._life:
            server, executor = self._server, self._executor
            self._server = self._executor = None
            with self._lock:
                self._epoch += 1
                endpoints = [r.endpoint for r in self._resources.values() if r.endpoint]
                now = self._clock()
                for res in self._resources.values():
                    if res.endpoint is not None and res.stopped_at is None:
                        self._mark_unhealthy(res, now)
                self._changed()
                threads, self._threads = self._threads, []
            for ep in endpoints:
                ep.close()
            for t in threads:
                # A consumer not started yet (Register still answering) finds its
                # endpoint closed when it starts.
                if t.ident is not None and t is not threading.current_thread():
                    t.join(timeout=5.0)
            if server is not None:
                shut_down(server, executor, self._socket, owner=self, stale=not remove_socket)
                log.info("sim_device_manager_stopped", socket=str(self._socket))
            if remove_socket:
                unlink_socket(self._socket)
        self._notify(*self.resources())

    def restart(self, gap_s: float = 0.0) -> None:
        """A kubelet restart: ``stop``, ``gap_s`` seconds down, ``start``."""
        with self._life:
            self.stop()
            if gap_s > 0:
                time.sleep(gap_s)
            self.start()

    def __enter__(self) -> SimDeviceManager:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(remove_socket=True)

    # ------------------------------------------------------------------ Register

    def _register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:
        resource, endpoint = request.resource_name, request.endpoint
        with self._lock:
            epoch = self._epoch
        log.info("sim_device_plugin_register", resource=resource, endpoint=endpoint)
        problem: str | None = None
        if request.version != VERSION:
            problem = (
                f"requested API version {request.version!r} is not supported by kubelet. "
                f"Supported versions are [{VERSION!r}]"
            )
        elif extended_resource_problem(resource) is not None:
            problem = f"the ResourceName {resource!r} is invalid"
        elif not endpoint or endpoint in (".", "..") or "/" in endpoint or "\0" in endpoint:
            problem = f"invalid endpoint {endpoint!r}: not a file name in {self._dir}"
        else:
            with self._lock:
                problem = self._refusals.pop(0) if self._refusals else None
        if problem is not None:
            return self._refuse(request, context, problem)

        with self._lock:
            self._serial += 1
            ep = _Endpoint(resource, endpoint, self._dir / endpoint, self._serial)
        try:
            self._dial(ep, epoch)
        except _DialError as exc:
            ep.close()
            return self._refuse(request, context, str(exc))
        try:
            answer = ep.get_options(dp.Empty(), timeout=self._dial_timeout)
        except grpc.RpcError as err:
            ep.close()
            return self._refuse(
                request, context, f"failed to get device plugin options: {go_rpc_error(err)}"
            )
        ep.options = _options_of(answer)
        with self._lock:
            stale = self._epoch != epoch
            if not stale:
                res = self._resources.setdefault(resource, _Resource(resource))
                old, res.endpoint = res.endpoint, ep
                res.stopped_at = None
                self._registrations.append(
                    RegistrationRecord(
                        resource,
                        endpoint,
                        request.version,
                        "ok",
                        ep.options,
                        _requested_options(request),
                    )
                )
                thread = threading.Thread(
                    target=self._consume,
                    args=(ep,),
                    name=f"sim-devicemanager-{resource}",
                    daemon=True,
                )
                ep.thread = thread
                self._threads = [t for t in self._threads if t.is_alive()] + [thread]
                self._changed()
        if stale:  # the kubelet stopped while this Register was in flight
            ep.close()
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is shutting down")
        if old is not None:
            old.close()  # a new registration replaces the old one: drop its stream
        # ListAndWatch starts once Register has answered (the RPC's end). The plugin may
        # still see the stream open before its Register call returns, as with a kubelet.
        if not context.add_callback(thread.start):
            thread.start()
        log.info(
            "sim_device_plugin_registered",
            resource=resource,
            endpoint=endpoint,
            pre_start_required=ep.options.pre_start_required,
            get_preferred_allocation_available=ep.options.get_preferred_allocation_available,
        )
        self._notify(resource)
        return dp.Empty()

    def _refuse(
        self, request: dp.RegisterRequest, context: grpc.ServicerContext, problem: str
    ) -> dp.Empty:
        with self._lock:
            self._registrations.append(
                RegistrationRecord(
                    request.resource_name,
                    request.endpoint,
                    request.version,
                    problem,
                    request_options=_requested_options(request),
                )
            )
            self._changed()
        log.info("sim_device_plugin_refused", resource=request.resource_name, error=problem)
        context.abort(grpc.StatusCode.UNKNOWN, problem)

    def _dial(self, ep: _Endpoint, epoch: int) -> None:
        """Wait for the plugin's socket to answer, like grpc.DialContext with WithBlock."""
        ready = grpc.channel_ready_future(ep.channel)
        deadline = time.monotonic() + self._dial_timeout
        while True:
            try:
                ready.result(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
                return
            except grpc.FutureTimeoutError:
                pass
            with self._lock:
                if self._epoch != epoch:
                    ready.cancel()
                    raise _DialError("failed to dial device plugin: context canceled")
            if time.monotonic() >= deadline:
                ready.cancel()
                raise _DialError("failed to dial device plugin: context deadline exceeded")

    # ------------------------------------------------------------------ ListAndWatch

    def _consume(self, ep: _Endpoint) -> None:
        resource = ep.resource
        try:
            call = ep.list_and_watch(dp.Empty())
            ep.call = call
            if ep.closed or ep.hung_up:
                call.cancel()
            for msg in call:
                devices = _devices_of(msg)
                with self._lock:
                    res = self._resources.get(resource)
                    if ep.closed or res is None or res.endpoint is not ep:
                        break
                    res.devices = devices
                    ep.lists += 1
                    self._changed()
                log.debug(
                    "sim_device_plugin_devices",
                    resource=resource,
                    healthy=sum(d.healthy for d in devices.values()),
                    total=len(devices),
                )
                self._write_checkpoint()
                self._notify(resource)
        except grpc.RpcError as err:
            if not ep.closed:
                log.info(
                    "sim_device_plugin_stream_ended", resource=resource, error=go_rpc_error(err)
                )
        except ValueError:  # the channel was closed under the iterator
            pass
        finally:
            ep.ended = True
            with self._lock:
                res = self._resources.get(resource)
                current = not ep.closed and res is not None and res.endpoint is ep
                if current and res is not None:
                    self._mark_unhealthy(res, self._clock())
                    self._changed()
            ep.channel.close()
            if current:
                log.info("sim_device_plugin_disconnected", resource=resource)
                self._write_checkpoint()
                self._notify(resource)

    # ------------------------------------------------------------------ internals

    def _changed(self) -> None:
        """Note a change (lock held)."""
        self._version += 1
        self._cond.notify_all()

    def _notify(self, *resources: str) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for resource in resources:
            for fn in listeners:
                try:
                    fn(resource)
                except Exception:  # a listener must not break the manager
                    log.exception("sim_device_manager_listener_failed", resource=resource)

    def _mark_unhealthy(self, res: _Resource, now: float) -> None:
        res.devices = {i: PluginDevice(i, UNHEALTHY, d.numa) for i, d in res.devices.items()}
        res.stopped_at = now

    def _purge(self) -> None:
        """Drop resources whose plugin has been gone longer than the grace (lock held)."""
        now = self._clock()
        gone = [
            name
            for name, res in self._resources.items()
            if res.stopped_at is not None and now - res.stopped_at >= self._grace
        ]
        for name in gone:
            del self._resources[name]
            log.info("sim_device_plugin_resource_dropped", resource=name)
        if gone:
            self._changed()

    def _available(self, resource: str) -> set[str]:
        """Healthy devices nobody holds or is being given (lock held)."""
        res = self._resources.get(resource)
        if res is None:
            return set()
        taken = set(self._reserved.get(resource, ()))
        for (_, _, r), a in self._allocs.items():
            if r == resource:
                taken.update(a.device_ids)
        return {i for i, d in res.devices.items() if d.healthy and i not in taken}

    @staticmethod
    def _unavailable(resource: str, count: int, have: int) -> str:
        return (
            f"requested number of devices unavailable for {resource}. "
            f"Requested: {count}, Available: {have}"
        )

    @staticmethod
    def _by_affinity(
        res: _Resource, available: set[str], hint: frozenset[int] | None
    ) -> tuple[set[str], set[str], set[str]]:
        """Aligned, unaligned and topology-less devices for a NUMA hint (none: all are
        'no affinity', as the kubelet without a hint)."""
        if hint is None:
            return set(), set(), set(available)
        aligned: set[str] = set()
        unaligned: set[str] = set()
        none: set[str] = set()
        for i in available:
            numa = res.devices[i].numa
            if numa is None:
                none.add(i)
            elif hint & set(numa):
                aligned.add(i)
            else:
                unaligned.add(i)
        return aligned, unaligned, none

    def _clean_directory(self, keep: Path | None) -> None:
        """Delete every file in the directory but the checkpoint (a kubelet start)."""
        for entry in os.scandir(self._dir):
            if entry.name == CHECKPOINT or entry.is_dir(follow_symlinks=False):
                continue
            if keep is not None and entry.name == keep.name:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)

    def _write_checkpoint(self) -> None:
        """Write allocations and registered devices (this simulator's own format)."""
        with self._ckpt_lock:
            with self._lock:
                data = {
                    "format": _CHECKPOINT_FORMAT,
                    "allocations": [a.to_json() for a in self._allocs.values()],
                    "registered": {n: sorted(r.devices) for n, r in self._resources.items()},
                }
            if not self._dir.is_dir():
                return
            tmp = self._dir / f".{CHECKPOINT}.tmp"
            try:
                tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
                tmp.replace(self.checkpoint_path)
            except OSError as exc:  # the directory went away under us
                log.warning("sim_device_manager_checkpoint_failed", error=str(exc))

    def _load_checkpoint(self) -> None:
        """Read back our own checkpoint, if the directory holds one."""
        try:
            data = json.loads(self.checkpoint_path.read_text())
        except (OSError, ValueError):
            return
        if not isinstance(data, dict) or data.get("format") != _CHECKPOINT_FORMAT:
            return
        try:
            allocs = [AllocationResult.from_json(a) for a in data.get("allocations", [])]
            registered = [str(n) for n in data.get("registered", {})]
        except (KeyError, TypeError, ValueError):
            log.warning("sim_device_manager_checkpoint_unreadable", path=str(self.checkpoint_path))
            return
        now = self._clock()
        for a in allocs:
            self._allocs[(a.pod, a.container, a.resource)] = a
        for name in registered:
            self._resources[name] = _Resource(name, stopped_at=now)


class _DialError(Exception):
    pass
