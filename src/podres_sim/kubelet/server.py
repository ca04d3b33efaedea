"""``SimKubelet``: the kubelet's pod-resources gRPC API on a unix socket, simulated.

It serves ``/v1.PodResourcesLister/{List,GetAllocatableResources,Get}`` and
``/v1alpha1.PodResourcesLister/List`` over the real wire protocol (the generated
messages), answering from a ``node.Node`` and behaving like a real kubelet:

* List's pod order changes from call to call (a seeded RNG shuffles it);
* the optional RPCs can be served, switched off (``UNKNOWN`` with the kubelet's
  message) or missing (``UNIMPLEMENTED``, as from an older kubelet); with
  ``api="v1alpha1"`` the v1 service does not exist at all;
* version knobs: finished pods listed with the resources they gave back (before
  1.34, ``list_active_only`` false), the pod-level ``cpu_ids``/``memory``
  (``pod_level_resources``, 1.36+ with its gate) and DRA ``share_id`` (1.35+);
* an optional global token bucket (100 qps, burst 10, shared by every method)
  answers ``RESOURCE_EXHAUSTED`` "rejected by rate limit";
* responses have no size limit (a real kubelet sets none), so they can exceed a
  client's default 4 MiB receive limit;
* faults for tests of a client, on every call until cleared: ``hang_calls`` (the
  call is accepted and never answered; it ends when the client gives up),
  ``fail_calls`` (a status code, e.g. ``RESOURCE_EXHAUSTED`` in a rate-limit storm),
  ``answer_garbage`` (bytes that are no protobuf message);
* ``stop`` leaves a stale socket file behind (clients get ``UNAVAILABLE``);
  ``restart`` deletes and re-creates the socket (a new inode) and, for a warm-up
  window, answers List with no pods and allocatable ``cpu_ids`` empty, like a kubelet
  whose CPU manager has not loaded yet.

Every knob can be set in the scenario's ``[kubelet]`` table and changed at run time
with ``set_behaviour``; all methods are thread-safe.

A scenario with a ``[device_plugins]`` table (or a ``device_plugin_dir``) gets a
``SimDeviceManager`` serving ``kubelet.sock`` in the device-plugins directory, started,
stopped and restarted with the simulated kubelet (``attach_device_manager`` attaches
one made elsewhere). Its plugins' devices are what pods asking for those resources
get and what GetAllocatableResources reports (healthy ones only); with
``retry_pending`` a pod rejected for want of such a resource is admitted again when
the resource's allocatable count grows (when its plugin registers, say).

With ``pods_api`` (the ``PodsAPI`` gate, see ``KubeletBehaviour``) the simulator also
serves the kubelet's Pods API on its own socket (``pods_api_socket_path``), started,
stopped and restarted with it (``kubelet.podsapi``); the knob is read at each start.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
import structlog

from podres_exporter._generated.podresources.v1 import api_pb2
from podres_exporter._generated.podresources.v1alpha1 import api_pb2 as alpha_pb2
from podres_exporter.daemon.unixsock import MAX_SOCKET_PATH, socket_path_too_long
from podres_sim.kubelet.devicemanager import SimDeviceManager
from podres_sim.kubelet.grpcserve import bind, old_inode_held, shut_down, unlink_socket
from podres_sim.kubelet.node import Node
from podres_sim.kubelet.pods import ChurnEvent, PodState
from podres_sim.kubelet.podsapi import SimPodsApi, pods_api_socket_for
from podres_sim.kubelet.ratelimit import (
    RATE_LIMITED,
    TokenBucket,
)
from podres_sim.kubelet.wire import (
    allocatable_message,
    alpha_pod_message,
    listed,
    pod_message,
    wire_shape,
)
from podres_sim.scenario import (
    DeviceGrouping,
    DevicePluginsSpec,
    KubeletBehaviour,
    PodSpec,
    Scenario,
    load_builtin,
    read_scenario,
)

__all__ = [
    "ALL_METHODS",
    "GARBAGE",
    "GET_ALLOCATABLE_DISABLED",
    "GET_DISABLED",
    "V1ALPHA1_LIST_METHOD",
    "V1_GET_ALLOCATABLE_METHOD",
    "V1_GET_METHOD",
    "V1_LIST_METHOD",
    "SimKubelet",
]

log = structlog.get_logger("podres_sim")

V1_SERVICE = "v1.PodResourcesLister"
V1ALPHA1_SERVICE = "v1alpha1.PodResourcesLister"
V1_LIST_METHOD = f"/{V1_SERVICE}/List"
V1_GET_ALLOCATABLE_METHOD = f"/{V1_SERVICE}/GetAllocatableResources"
V1_GET_METHOD = f"/{V1_SERVICE}/Get"
V1ALPHA1_LIST_METHOD = f"/{V1ALPHA1_SERVICE}/List"
ALL_METHODS = (V1_LIST_METHOD, V1_GET_ALLOCATABLE_METHOD, V1_GET_METHOD, V1ALPHA1_LIST_METHOD)

# The kubelet's own words.
GET_ALLOCATABLE_DISABLED = "Pod Resources API GetAllocatableResources disabled"
GET_DISABLED = "PodResources API Get method disabled"
# What ``answer_garbage`` sends: a varint cut short, which no protobuf parser accepts.
GARBAGE = b"\xff\xff\xff\xff\xff"
# How often a hung call looks whether its client gave up or the fault was cleared.
_HANG_POLL_S = 0.05


# --------------------------------------------------------------------------- the server


class _Router(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """Looks up the handler per call, so that knobs changed at run time take effect."""

    def __init__(self, sim: SimKubelet) -> None:
        self._sim = sim

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        return self._sim._handler_for(handler_call_details.method)


def _unimplemented(details: str) -> Any:
    def deny(_request: bytes, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, details)

    return grpc.unary_unary_rpc_method_handler(deny)


class SimKubelet:
    """A simulated kubelet serving the pod-resources API on ``socket_path``.

    ``scenario`` is a Scenario, a built-in scenario name (``"demo"``) or a TOML path.
    Nothing is served until ``start``; use it as a context manager to start it and to
    stop it with its socket removed. Churn runs only after ``start_churn`` (or with
    ``auto_churn``, at the scenario's interval, on every start).

    When the scenario declares ``[device_plugins]`` (or ``device_plugin_dir`` is given,
    which overrides the scenario's directory) the simulator owns a
    ``SimDeviceManager`` on that directory (``device_manager``), started, stopped and
    restarted with it.
    """

    def __init__(
        self,
        scenario: Scenario | str | Path,
        socket_path: str | Path,
        *,
        workers: int = 8,
        auto_churn: bool = False,
        device_plugin_dir: str | Path | None = None,
    ) -> None:
        if isinstance(scenario, Path) or (isinstance(scenario, str) and scenario.endswith(".toml")):
            scenario = read_scenario(scenario)
        elif isinstance(scenario, str):
            scenario = load_builtin(scenario)
        self._scenario = scenario
        self._socket_path = Path(socket_path).absolute()
        if socket_path_too_long(self._socket_path):
            raise ValueError(
                f"unix socket path too long ({MAX_SOCKET_PATH} bytes at most): {self._socket_path}"
            )
        self._workers = workers
        self._auto_churn = auto_churn
        plugins = scenario.device_plugins
        self._dm: SimDeviceManager | None = None
        self._dm_managed = False
        self._retry_pending = plugins.retry_pending if plugins else True
        self._retry_lock = threading.Lock()
        self._retry_wake = threading.Event()
        self._retry_stop = threading.Event()
        self._retry_thread: threading.Thread | None = None
        self._retry_resources: set[str] = set()
        self._seen_allocatable: dict[str, int] = {}
        self._dm = self._own_device_manager(plugins, device_plugin_dir)
        if self._dm is not None:
            self._dm_managed = True
            self._dm.add_listener(self._on_plugin_change)
        self._node = Node.from_scenario(scenario, device_manager=self._dm)
        self._lock = threading.Lock()  # behaviour, counters, RNGs
        self._life = threading.RLock()  # start / stop / restart
        self._behaviour = scenario.kubelet
        self._bucket = TokenBucket()
        self._list_rng = random.Random(scenario.seed + 1)
        self._churn_rng = random.Random(scenario.seed + 2)
        self._churn_lock = threading.Lock()  # the churn RNG; never held by a gRPC handler
        self._counts = dict.fromkeys(ALL_METHODS, 0)
        self._rate_limited = 0
        self._released = threading.Event()  # clear while calls hang (hang_calls)
        self._released.set()
        self._fail: tuple[grpc.StatusCode, str] | None = None
        self._garbage = False
        self._ready_at = 0.0
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._churn_thread: threading.Thread | None = None
        self._churn_stop = threading.Event()
        self._pods_api_path = pods_api_socket_for(self._socket_path)
        self._pods_api: SimPodsApi | None = None
        self._churn_interval = 0.0
        # Built v1 PodResources messages by pod, reused while the pod is unchanged.
        self._messages: dict[
            tuple[str, str], tuple[PodState, tuple[DeviceGrouping, bool, bool], Any]
        ] = {}
        self._raw_pods: tuple[Any, ...] = ()
        # The last GetAllocatableResources answer and what it was built from: a large
        # node's answer (50,000 devices) takes longer to build than a kubelet takes.
        self._allocatable: tuple[tuple[Any, ...], Any] | None = None
        self._handlers = {
            V1_LIST_METHOD: grpc.unary_unary_rpc_method_handler(
                self._list,
                request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
                response_serializer=api_pb2.ListPodResourcesResponse.SerializeToString,
            ),
            V1_GET_ALLOCATABLE_METHOD: grpc.unary_unary_rpc_method_handler(
                self._get_allocatable,
                request_deserializer=api_pb2.AllocatableResourcesRequest.FromString,
                response_serializer=api_pb2.AllocatableResourcesResponse.SerializeToString,
            ),
            V1_GET_METHOD: grpc.unary_unary_rpc_method_handler(
                self._get,
                request_deserializer=api_pb2.GetPodResourcesRequest.FromString,
                response_serializer=api_pb2.GetPodResourcesResponse.SerializeToString,
            ),
            V1ALPHA1_LIST_METHOD: grpc.unary_unary_rpc_method_handler(
                self._list_v1alpha1,
                request_deserializer=alpha_pb2.ListPodResourcesRequest.FromString,
                response_serializer=alpha_pb2.ListPodResourcesResponse.SerializeToString,
            ),
        }

    def _own_device_manager(
        self, plugins: DevicePluginsSpec | None, device_plugin_dir: str | Path | None
    ) -> SimDeviceManager | None:
        """The device manager the scenario (or ``device_plugin_dir``) asks for."""
        if plugins is None and device_plugin_dir is None:
            return None
        if device_plugin_dir is not None:
            directory = Path(device_plugin_dir)
        else:
            directory = Path(plugins.directory if plugins else "device-plugins")
        if not directory.is_absolute():
            directory = self._socket_path.parent / directory
        if directory.absolute() == self._socket_path.parent:
            # A kubelet start deletes every file there, the pod-resources socket too.
            raise ValueError(
                f"the device-plugins directory must not hold the pod-resources socket: {directory}"
            )
        grace = plugins.resource_grace_s if plugins else 300.0
        return SimDeviceManager(directory, resource_grace_s=grace)

    # ------------------------------------------------------------------ properties

    @property
    def scenario(self) -> Scenario:
        """The scenario the simulator was built from."""
        return self._scenario

    @property
    def node(self) -> Node:
        """The node's live state (thread-safe)."""
        return self._node

    @property
    def socket_path(self) -> Path:
        """The absolute path of the unix socket."""
        return self._socket_path

    @property
    def target(self) -> str:
        """The gRPC target for a client channel: ``unix:<socket path>``."""
        return f"unix:{self._socket_path}"

    @property
    def pods_api_socket_path(self) -> Path:
        """Where the Pods API is served when its gate is on (``podsapi.pods_api_socket_for``;
        not served, a warning logged, when the path is too long for a unix socket)."""
        return self._pods_api_path

    @property
    def pods_api(self) -> SimPodsApi | None:
        """The Pods API server while it serves (the gate on), else None."""
        api = self._pods_api
        return api if api is not None and api.running else None

    @property
    def device_manager(self) -> SimDeviceManager | None:
        """The simulated device manager plugins register with, if any."""
        return self._dm

    def attach_device_manager(
        self,
        device_manager: SimDeviceManager,
        *,
        resources: Iterable[str] = (),
        manage: bool = False,
        retry_pending: bool = True,
    ) -> None:
        """Admit plugin resources (the scenario's and ``resources``) through
        ``device_manager`` from now on. With ``manage`` it is started, stopped and
        restarted with the simulator (its owner does that otherwise); ``retry_pending``
        as in DevicePluginsSpec. RuntimeError if one is attached already."""
        with self._life:
            if self._dm is not None:
                raise RuntimeError("a device manager is attached already")
            self._dm, self._dm_managed = device_manager, manage
            self._retry_pending = retry_pending
            self._node.attach_device_manager(device_manager, resources)
            device_manager.add_listener(self._on_plugin_change)
            if self._server is not None:
                if manage and not device_manager.running:
                    device_manager.start()
                self._start_retry()
        for resource in device_manager.resources():
            self._on_plugin_change(resource)

    @property
    def running(self) -> bool:
        """Whether the server is serving."""
        with self._life:
            return self._server is not None

    @property
    def behaviour(self) -> KubeletBehaviour:
        """The current behaviour knobs."""
        with self._lock:
            return self._behaviour

    @property
    def request_count(self) -> dict[str, int]:
        """Requests that reached the simulated kubelet per method path (``V1_LIST_METHOD`` ...),
        rate-limited ones included; calls to a method or service it does not serve
        (UNIMPLEMENTED) are not counted."""
        with self._lock:
            return dict(self._counts)

    @property
    def total_requests(self) -> int:
        """The sum of ``request_count``."""
        with self._lock:
            return sum(self._counts.values())

    @property
    def rate_limited_count(self) -> int:
        """How many requests the rate limit rejected."""
        with self._lock:
            return self._rate_limited

    def reset_request_counts(self) -> None:
        """Zero ``request_count`` and ``rate_limited_count``."""
        with self._lock:
            self._counts = dict.fromkeys(ALL_METHODS, 0)
            self._rate_limited = 0

    # ------------------------------------------------------------------ knobs and state

    def set_behaviour(self, **knobs: Any) -> KubeletBehaviour:
        """Change behaviour knobs (``api``, ``get_allocatable``, ``get``, ``rate_limit``,
        ``device_grouping``, ``list_rejected``, ``list_active_only``,
        ``pod_level_resources``, ``dra_share_ids``) at run time; ValueError for a bad value,
        TypeError for an unknown knob. Switching the rate limit on starts a full bucket."""
        with self._lock:
            new = replace(self._behaviour, **knobs)
            if new.rate_limit and not self._behaviour.rate_limit:
                self._bucket = TokenBucket()
            self._behaviour = new
            return new

    def hang_calls(self, on: bool = True) -> None:
        """While on, every call is accepted and never answered: it waits until its client
        gives up (a deadline), the server stops, or ``hang_calls(False)``."""
        if on:
            self._released.clear()
        else:
            self._released.set()

    def fail_calls(self, code: grpc.StatusCode | None, details: str = "") -> None:
        """Every call answers ``code`` with ``details`` (``RESOURCE_EXHAUSTED`` and
        RATE_LIMITED: a rate-limit storm); None answers again."""
        with self._lock:
            self._fail = None if code is None else (code, details)

    def answer_garbage(self, on: bool = True) -> None:
        """While on, every call answers GARBAGE: bytes no protobuf parser accepts."""
        with self._lock:
            self._garbage = on

    def clear_faults(self) -> None:
        """Undo ``hang_calls``, ``fail_calls`` and ``answer_garbage``."""
        self.hang_calls(False)
        self.fail_calls(None)
        self.answer_garbage(False)

    def set_device_health(self, resource: str, device_id: str, healthy: bool) -> None:
        """Mark a device healthy or unhealthy (KeyError if the node has no such device)."""
        self._node.set_device_health(resource, device_id, healthy)

    def admit(self, pod_spec: PodSpec, *, name: str | None = None) -> PodState:
        """Admit a new pod (Running, or Failed when its resources are not there)."""
        return self._node.admit(pod_spec, name=name)

    def remove(self, namespace: str, name: str) -> bool:
        """Delete a pod and free its resources; False when there was no such pod."""
        return self._node.remove(namespace, name) is not None

    def inject_raw_pods(self, *messages: Any) -> None:
        """Serve these v1 ``PodResources`` messages in List beside the node's pods, as
        they are, replacing any injected before: data no real allocator produces
        (duplicate device ids, CPUs the node does not have, odd names) for tests of
        how a client copes. ``inject_raw_pods()`` clears them."""
        with self._lock:
            self._raw_pods = tuple(messages)

    def churn_once(self) -> ChurnEvent | None:
        """One churn step: delete a random churnable pod, admit a replacement."""
        with self._churn_lock:
            event = self._node.step(self._churn_rng)
        if event is not None:
            log.debug(
                "sim_churn",
                removed=f"{event.removed.namespace}/{event.removed.name}",
                added=f"{event.added.namespace}/{event.added.name}",
                added_phase=event.added.phase,
            )
        return event

    def start_churn(self, interval_s: float | None = None) -> None:
        """Run ``churn_once`` every ``interval_s`` seconds (default: the scenario's) on a
        daemon thread until ``stop_churn`` or ``stop``."""
        interval = self._scenario.churn_interval_s if interval_s is None else interval_s
        if interval <= 0:
            raise ValueError(f"churn interval must be positive, got {interval}")
        with self._life:
            self.stop_churn()
            stop = threading.Event()
            thread = threading.Thread(
                target=self._churn_loop,
                args=(interval, stop),
                name="sim-kubelet-churn",
                daemon=True,
            )
            self._churn_stop = stop
            self._churn_thread = thread
            self._churn_interval = interval
            thread.start()

    def stop_churn(self) -> None:
        """Stop the churn thread, if any, and wait for it."""
        with self._life:
            thread, self._churn_thread = self._churn_thread, None
            self._churn_stop.set()
            if thread is not None and thread is not threading.current_thread():
                thread.join()

    def _churn_loop(self, interval: float, stop: threading.Event) -> None:
        while not stop.wait(interval):
            self.churn_once()

    # ------------------------------------------------------------------ device plugins

    def _on_plugin_change(self, resource: str) -> None:
        """A device manager listener (no lock held): the node changed; when a resource's
        allocatable count grew, wake the retry of the pods rejected for want of it."""
        self._node.note_devices_changed()
        dm = self._dm
        if dm is None:
            return
        count = dm.allocatable(resource)
        with self._retry_lock:
            grew = count > self._seen_allocatable.get(resource, 0)
            self._seen_allocatable[resource] = count
            if grew and self._retry_pending:
                self._retry_resources.add(resource)
                self._retry_wake.set()

    def _start_retry(self) -> None:
        if self._dm is None or not self._retry_pending or self._retry_thread is not None:
            return
        self._retry_stop = threading.Event()
        thread = threading.Thread(
            target=self._retry_loop,
            args=(self._retry_stop,),
            name="sim-kubelet-admission-retry",
            daemon=True,
        )
        self._retry_thread = thread
        thread.start()

    def _stop_retry(self) -> None:
        thread, self._retry_thread = self._retry_thread, None
        self._retry_stop.set()
        self._retry_wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _retry_loop(self, stop: threading.Event) -> None:
        # Resources that grew before the thread started are waiting in _retry_resources.
        while True:
            self._retry_wake.wait()
            if stop.is_set():
                return
            with self._retry_lock:
                self._retry_wake.clear()
                resources, self._retry_resources = self._retry_resources, set()
            if not resources:
                continue
            for pod in self._node.retry_rejected(resources):
                log.info(
                    "sim_pod_admitted_again",
                    pod=f"{pod.namespace}/{pod.name}",
                    phase=pod.phase,
                    message=pod.message,
                )

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, warmup: float = 0.0) -> SimKubelet:
        """Create the socket (a new inode) and serve. For ``warmup`` seconds List has no
        pods and allocatable ``cpu_ids`` is empty. RuntimeError if already running. An
        owned device manager starts first (it deletes the plugins' sockets and creates
        its ``kubelet.sock``)."""
        with self._life:
            if self._server is not None:
                raise RuntimeError("the simulated kubelet is already running")
            dm = self._dm
            dm_started = dm is not None and self._dm_managed and not dm.running
            if dm is not None and dm_started:
                dm.start()  # the device manager starts before the pod-resources server
            try:
                self._serve(warmup)
            except BaseException:
                if dm is not None and dm_started:
                    dm.stop()
                raise
            self._start_retry()
        if self._auto_churn and self._scenario.churn_interval_s > 0:
            self.start_churn()
        return self

    def _serve(self, warmup: float) -> None:
        with self._life:
            path = self._socket_path
            path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
            executor = ThreadPoolExecutor(
                max_workers=self._workers, thread_name_prefix="sim-kubelet"
            )
            server = grpc.server(
                executor,
                handlers=[_Router(self)],
                options=[
                    ("grpc.max_send_message_length", -1),
                    ("grpc.max_receive_message_length", -1),
                ],
            )
            # Keep the old inode alive while the new socket is bound, so that the new
            # socket cannot reuse its number: a client watching the inode sees a restart.
            with old_inode_held(path, self):
                unlink_socket(path)
                bind(server, executor, path)
                with self._lock:
                    self._ready_at = time.monotonic() + max(0.0, warmup)
                server.start()
            self._server, self._executor = server, executor
            log.info("sim_kubelet_started", socket=str(path), scenario=self._scenario.name)
            if self.behaviour.pods_api and socket_path_too_long(self._pods_api_path):
                log.warning("sim_pods_api_not_served", socket=str(self._pods_api_path))
            elif self.behaviour.pods_api:
                if self._pods_api is None:
                    self._pods_api = SimPodsApi(self._node, self._pods_api_path)
                self._pods_api.start(warmup=warmup)

    def stop(self, *, remove_socket: bool = False) -> None:
        """Stop serving at once (in-flight calls are cancelled) and stop churn.

        The socket file stays on disk, stale, like a stopped kubelet's: clients get
        ``UNAVAILABLE``. ``remove_socket`` removes it instead. Safe to call twice.
        An owned device manager stops too (its ``kubelet.sock`` likewise)."""
        self._stop(remove_socket=remove_socket, device_manager=True)

    def _stop(self, *, remove_socket: bool, device_manager: bool) -> None:
        self.stop_churn()
        with self._life:
            self._stop_retry()
            if device_manager and self._dm is not None and self._dm_managed:
                self._dm.stop(remove_socket=remove_socket)
            if self._pods_api is not None:
                self._pods_api.stop(remove_socket=remove_socket)
            server, executor = self._server, self._executor
            self._server = self._executor = None
            path = self._socket_path
            if server is not None:
                shut_down(server, executor, path, owner=self, stale=not remove_socket)
                log.info("sim_kubelet_stopped", socket=str(path), stale=not remove_socket)
            if remove_socket:
                unlink_socket(path)

    def restart(self, warmup: float = 0.1, *, device_manager: bool = True) -> None:
        """Stop, then start with a NEW socket inode and a ``warmup`` window. Churn that
        was running goes on at the same interval. An owned device manager restarts too
        (unless ``device_manager`` is False), as with a real kubelet: the plugins' sockets
        are deleted, its ``kubelet.sock`` re-created, plugins must register again, and
        the pods keep their devices."""
        with self._life:
            churning = self._churn_thread is not None
            self._stop(remove_socket=False, device_manager=device_manager)
            self.start(warmup=warmup)
            if churning and self._churn_thread is None:
                self.start_churn(self._churn_interval)

    def __enter__(self) -> SimKubelet:
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

    # ------------------------------------------------------------------ RPCs

    def _handler_for(self, method: str) -> Any:
        handler = self._handlers.get(method)
        if handler is None:
            return None
        with self._lock:
            garbage = self._garbage
        if garbage:
            return self._garbage_handler(method)
        behaviour = self.behaviour
        if method == V1ALPHA1_LIST_METHOD:
            return handler
        if behaviour.api != "v1":
            return _unimplemented(f"unknown service {V1_SERVICE}")
        mode = {
            V1_GET_ALLOCATABLE_METHOD: behaviour.get_allocatable,
            V1_GET_METHOD: behaviour.get,
        }.get(method)
        if mode == "unimplemented":
            return _unimplemented(
                f"unknown method {method.rsplit('/', 1)[1]} for service {V1_SERVICE}"
            )
        return handler

    def _garbage_handler(self, method: str) -> Any:
        """A handler that answers GARBAGE, unserialised, whatever was asked."""

        def answer(_request: bytes, context: grpc.ServicerContext) -> bytes:
            self._enter(method, context)
            return GARBAGE

        return grpc.unary_unary_rpc_method_handler(answer)

    def _enter(self, method: str, context: grpc.ServicerContext) -> tuple[KubeletBehaviour, bool]:
        """Count the call, apply the faults and the rate limit; return the behaviour and
        whether the kubelet is still warming up."""
        with self._lock:
            self._counts[method] += 1
            behaviour = self._behaviour
            fail = self._fail
            allowed = not behaviour.rate_limit or self._bucket.allow()
            if not allowed:
                self._rate_limited += 1
            warming = time.monotonic() < self._ready_at
        while not self._released.wait(_HANG_POLL_S) and context.is_active():
            pass
        if fail is not None:
            context.abort(*fail)
        if not allowed:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED)
        return behaviour, warming

    def _listed_pods(self, behaviour: KubeletBehaviour, warming: bool) -> list[PodState]:
        if warming:
            return []
        pods = [p for p in self._node.pods if listed(p, behaviour)]
        with self._lock:
            self._list_rng.shuffle(pods)
        return pods

    def _pod_messages(self, pods: list[PodState], behaviour: KubeletBehaviour) -> list[Any]:
        """v1 messages for ``pods``, built once per pod state and wire shape."""
        with self._lock:
            cache = self._messages
        wire = wire_shape(behaviour)
        fresh: dict[tuple[str, str], tuple[PodState, tuple[DeviceGrouping, bool, bool], Any]] = {}
        out: list[Any] = []
        for pod in pods:
            hit = cache.get(pod.key)
            if hit is not None and hit[0] is pod and hit[1] == wire:
                msg = hit[2]
            else:
                msg = pod_message(pod, wire[0], pod_level=wire[1], share_ids=wire[2])
            fresh[pod.key] = (pod, wire, msg)
            out.append(msg)
        with self._lock:
            self._messages = fresh
        return out

    def _list(self, request: Any, context: grpc.ServicerContext) -> Any:
        behaviour, warming = self._enter(V1_LIST_METHOD, context)
        pods = self._listed_pods(behaviour, warming)
        with self._lock:
            raw = [] if warming else list(self._raw_pods)
        return api_pb2.ListPodResourcesResponse(
            pod_resources=self._pod_messages(pods, behaviour) + raw
        )

    def _list_v1alpha1(self, request: Any, context: grpc.ServicerContext) -> Any:
        behaviour, warming = self._enter(V1ALPHA1_LIST_METHOD, context)
        grouping = behaviour.device_grouping
        pods = self._listed_pods(behaviour, warming)
        return alpha_pb2.ListPodResourcesResponse(
            pod_resources=[alpha_pod_message(p, grouping) for p in pods]
        )

    def _get_allocatable(self, request: Any, context: grpc.ServicerContext) -> Any:
        behaviour, warming = self._enter(V1_GET_ALLOCATABLE_METHOD, context)
        if behaviour.get_allocatable == "disabled":
            context.abort(grpc.StatusCode.UNKNOWN, GET_ALLOCATABLE_DISABLED)
        snap = self._node.snapshot()
        key = (
            snap.healthy_devices,
            snap.allocatable_cpus,
            snap.allocatable_memory,
            behaviour.device_grouping,
            warming,
        )
        with self._lock:
            last = self._allocatable
        if last is not None and last[0] == key:
            return last[1]
        message = allocatable_message(snap, behaviour.device_grouping, warming=warming)
        with self._lock:
            self._allocatable = (key, message)
        return message

    def _get(self, request: Any, context: grpc.ServicerContext) -> Any:
        behaviour, warming = self._enter(V1_GET_METHOD, context)
        if behaviour.get == "disabled":
            context.abort(grpc.StatusCode.UNKNOWN, GET_DISABLED)
        pod = None if warming else self._node.pod(request.pod_namespace, request.pod_name)
        if pod is not None and not listed(pod, behaviour):
            pod = None
        if pod is None:
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        grouping, pod_level, share_ids = wire_shape(behaviour)
        return api_pb2.GetPodResourcesResponse(
            pod_resources=pod_message(pod, grouping, pod_level=pod_level, share_ids=share_ids)
        )
