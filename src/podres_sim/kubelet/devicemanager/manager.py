"""The kubelet's device manager, simulated: device plugins register with it over the
real ``v1beta1`` gRPC protocol and it admits containers through them.

``SimDeviceManager`` serves ``/v1beta1.Registration/Register`` on
``<directory>/kubelet.sock`` and behaves like the kubelet's device manager. Its rooms:

* ``registration``: Register and the ListAndWatch consumers. Allocatable = healthy
  devices, capacity = healthy + unhealthy. When a stream ends every device of the
  resource turns unhealthy and the resource is dropped ``resource_grace_s`` later
  (5 minutes on a kubelet) unless the plugin registers again.
* ``admission``: ``allocate`` (GetPreferredAllocation and Allocate, with the Topology
  Manager's NUMA hint), ``pre_start`` and ``release``.
* ``checkpoint``: ``kubelet_internal_checkpoint``, in this simulator's own format.
* ``state``: the ledger they share, under one lock.

This module is the lifecycle and the queries. ``restart`` is a kubelet restart: the
server stops, every plugin stream ends, every file in the directory but the
checkpoint is deleted, ``kubelet.sock`` is re-created (a new inode) and plugins must
register again. Allocations survive (in memory, and in the checkpoint, which a new
manager on the same directory reads back).

For tests of a plugin, ``registrations`` records every Register call (the options it
carried and those the plugin answered), ``lists_received`` counts a registration's
ListAndWatch lists, ``refuse_registrations`` makes the next Register calls fail and
``disconnect`` ends a plugin's stream from the kubelet's side.

No lock is held across a gRPC call. ``add_listener`` callbacks run, without locks, on
the thread that changed the state (a plugin's stream consumer, a Register handler).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
import structlog

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as dp
from podres_exporter.daemon.unixsock import MAX_SOCKET_PATH, socket_path_too_long
from podres_sim.kubelet.devicemanager.admission import Admission
from podres_sim.kubelet.devicemanager.checkpoint import CHECKPOINT
from podres_sim.kubelet.devicemanager.records import (
    KUBELET_SOCKET,
    VERSION,
    AllocationResult,
    PluginDevice,
    PluginOptions,
    RegistrationRecord,
)
from podres_sim.kubelet.devicemanager.registration import Registration
from podres_sim.kubelet.devicemanager.state import Ledger
from podres_sim.kubelet.grpcserve import bind, old_inode_held, shut_down, unlink_socket

__all__ = ["SimDeviceManager"]

log = structlog.get_logger("podres_sim")


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
        self._workers = workers
        self._life = threading.RLock()  # start / stop
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._s = Ledger(self._dir, grace=resource_grace_s, clock=clock)
        self._registration = Registration(self._s, dial_timeout_s=dial_timeout_s)
        self._admission = Admission(self._s)
        self._s.load()

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
        with self._s.lock:
            return tuple(self._s.registrations)

    @property
    def version(self) -> int:
        """A counter that increases with every change of state."""
        with self._s.lock:
            return self._s.version

    # ------------------------------------------------------------------ queries

    def resources(self) -> tuple[str, ...]:
        """Registered resources (those whose plugin went away included, until dropped)."""
        with self._s.lock:
            self._s.purge()
            return tuple(self._s.resources)

    def devices(self, resource: str) -> tuple[PluginDevice, ...]:
        """The devices of the plugin's latest complete list (empty: unknown resource)."""
        with self._s.lock:
            self._s.purge()
            res = self._s.resources.get(resource)
            return tuple(res.devices.values()) if res else ()

    def allocatable(self, resource: str) -> int:
        """How many healthy devices the resource has."""
        return sum(d.healthy for d in self.devices(resource))

    def capacity(self, resource: str) -> int:
        """How many devices the resource has, healthy or not."""
        return len(self.devices(resource))

    def free_devices(self, resource: str) -> frozenset[str]:
        """Healthy devices that no container holds."""
        with self._s.lock:
            self._s.purge()
            return frozenset(self._s.available(resource))

    def options(self, resource: str) -> PluginOptions | None:
        """The options of the resource's plugin (None: none registered since the start)."""
        with self._s.lock:
            res = self._s.resources.get(resource)
            return res.endpoint.options if res and res.endpoint else None

    def endpoint(self, resource: str) -> str | None:
        """The socket file name of the resource's plugin."""
        with self._s.lock:
            res = self._s.resources.get(resource)
            return res.endpoint.endpoint if res and res.endpoint else None

    def connected(self, resource: str) -> bool:
        """Whether the resource's plugin is registered and its stream is open."""
        with self._s.lock:
            res = self._s.resources.get(resource)
            return bool(res and res.endpoint and res.stopped_at is None)

    def lists_received(self, resource: str) -> int:
        """How many ListAndWatch lists the resource's latest registration has sent (0: none
        yet, or none registered since the start); an empty list counts."""
        with self._s.lock:
            res = self._s.resources.get(resource)
            return res.endpoint.lists if res and res.endpoint else 0

    def allocations(self, pod: str | None = None) -> tuple[AllocationResult, ...]:
        """Every allocation (of one pod), in the order they were made."""
        with self._s.lock:
            return tuple(a for a in self._s.allocs.values() if pod is None or a.pod == pod)

    def allocation(self, pod: str, container: str, resource: str) -> AllocationResult | None:
        """What one container holds of one resource."""
        with self._s.lock:
            return self._s.allocs.get((pod, container, resource))

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0) -> bool:
        """Wait until ``predicate()`` is truthy (re-checked at every change and every
        50 ms, never under the manager's lock); False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            with self._s.lock:
                seen = self._s.version
            if predicate():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._s.cond:
                if self._s.version == seen:
                    self._s.cond.wait(min(left, 0.05))

    def add_listener(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(resource)`` after every change of a resource's registration or devices."""
        with self._s.lock:
            self._s.listeners.append(fn)

    def refuse_registrations(self, count: int, reason: str) -> None:
        """Refuse the next ``count`` Register calls that are otherwise valid: the plugin
        gets ``reason`` as the error (``UNKNOWN``), as from a kubelet that cannot take
        it just now, and the record's ``result`` says it."""
        if count < 0:
            raise ValueError("count >= 0")
        with self._s.lock:
            self._s.refusals.extend([reason] * count)

    def disconnect(self, resource: str, timeout: float = 5.0) -> bool:
        """End the resource's ListAndWatch stream from the kubelet's side, as a kubelet
        drops a plugin's client, without a restart: the devices turn unhealthy and the
        plugin must register again (it is never dialled again by itself). Returns once
        the stream has ended (or ``timeout`` passed); False when none was open."""
        with self._s.lock:
            res = self._s.resources.get(resource)
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
        """Admit a container's ``count`` devices of ``resource``: see
        :meth:`~podres_sim.kubelet.devicemanager.admission.Admission.allocate`."""
        return self._admission.allocate(pod, container, resource, count, numa_hint=numa_hint)

    def pre_start(self, pod: str, container: str) -> tuple[str, ...]:
        """Call ``PreStartContainer`` for each resource the container holds whose plugin
        asks for it (30 s deadline); return those resources. Raises PreStartError."""
        return self._admission.pre_start(pod, container)

    def release(self, pod: str, container: str | None = None) -> int:
        """Free what a pod (or one of its containers) holds; return how many allocations."""
        return self._admission.release(pod, container)

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
                                self._registration.register,
                                request_deserializer=dp.RegisterRequest.FromString,
                                response_serializer=dp.Empty.SerializeToString,
                            )
                        },
                    )
                ],
            )
            with self._s.lock:
                self._s.epoch += 1
                now = self._s.clock()
                for res in self._s.resources.values():
                    res.devices = {}
                    res.endpoint = None
                    res.stopped_at = now
                self._s.changed()
            with old_inode_held(self._socket, self) as hold:
                self._clean_directory(keep=hold)
                bind(server, executor, self._socket)
                server.start()
            self._server, self._executor = server, executor
            log.info("sim_device_manager_started", socket=str(self._socket))
        self._s.save()
        self._s.notify(*self.resources())
        return self

    def stop(self, *, remove_socket: bool = False) -> None:
        """Stop like a kubelet: Register is no longer served (``kubelet.sock`` stays on
        disk, stale, unless ``remove_socket``) and every plugin stream ends, which turns
        every device unhealthy. Safe to call twice."""
        with self._life:
            server, executor = self._server, self._executor
            self._server = self._executor = None
            with self._s.lock:
                self._s.epoch += 1
                endpoints = [r.endpoint for r in self._s.resources.values() if r.endpoint]
                now = self._s.clock()
                for res in self._s.resources.values():
                    if res.endpoint is not None and res.stopped_at is None:
                        self._s.mark_unhealthy(res, now)
                self._s.changed()
                threads, self._s.threads = self._s.threads, []
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
        self._s.notify(*self.resources())

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

    # ------------------------------------------------------------------ internals

    def _clean_directory(self, keep: Path | None) -> None:
        """Delete every file in the directory but the checkpoint (a kubelet start)."""
        for entry in os.scandir(self._dir):
            if entry.name == CHECKPOINT or entry.is_dir(follow_symlinks=False):
                continue
            if keep is not None and entry.name == keep.name:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
