"""Device plugins registering: the Register service and the ListAndWatch consumers.

``Register`` checks the version (``v1beta1``), the resource name (an extended resource
name) and the endpoint (a file name in the directory), dials the plugin's socket
(``dial_timeout_s``, 10 s as the kubelet), calls ``GetDevicePluginOptions`` and only
then answers; a plugin must already serve its socket on other threads. A second
registration of a resource replaces the first (the old stream is dropped).

Right after, a thread consumes the plugin's ``ListAndWatch`` stream: every message is
the complete device list (a device left out is gone), only the exact string
``Healthy`` is healthy. When the stream ends every device of the resource turns
unhealthy; the ledger drops the resource after its grace unless the plugin registers
again. The kubelet never dials a plugin again by itself.
"""

from __future__ import annotations

import threading
import time

import grpc
import structlog

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as dp
from podres_exporter.core.kube import extended_resource_problem
from podres_sim.kubelet.devicemanager.endpoint import (
    DialError,
    PluginEndpoint,
    devices_of,
    go_rpc_error,
    options_of,
    requested_options,
)
from podres_sim.kubelet.devicemanager.records import VERSION, RegistrationRecord
from podres_sim.kubelet.devicemanager.state import Ledger, Resource

__all__ = ["Registration"]

log = structlog.get_logger("podres_sim")


class Registration:
    """The Register handler and the ListAndWatch consumers, over one ledger."""

    def __init__(self, ledger: Ledger, *, dial_timeout_s: float) -> None:
        self._s = ledger
        self._dial_timeout = dial_timeout_s

    def register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:
        """The Register RPC: check, dial the plugin, ask its options, then answer and start
        consuming its ListAndWatch stream."""
        resource, endpoint = request.resource_name, request.endpoint
        with self._s.lock:
            epoch = self._s.epoch
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
            problem = f"invalid endpoint {endpoint!r}: not a file name in {self._s.directory}"
        else:
            with self._s.lock:
                problem = self._s.refusals.pop(0) if self._s.refusals else None
        if problem is not None:
            return self._refuse(request, context, problem)

        with self._s.lock:
            self._s.serial += 1
            ep = PluginEndpoint(resource, endpoint, self._s.directory / endpoint, self._s.serial)
        try:
            self._dial(ep, epoch)
        except DialError as exc:
            ep.close()
            return self._refuse(request, context, str(exc))
        try:
            answer = ep.get_options(dp.Empty(), timeout=self._dial_timeout)
        except grpc.RpcError as err:
            ep.close()
            return self._refuse(
                request, context, f"failed to get device plugin options: {go_rpc_error(err)}"
            )
        ep.options = options_of(answer)
        with self._s.lock:
            stale = self._s.epoch != epoch
            if not stale:
                res = self._s.resources.setdefault(resource, Resource(resource))
                old, res.endpoint = res.endpoint, ep
                res.stopped_at = None
                self._s.registrations.append(
                    RegistrationRecord(
                        resource,
                        endpoint,
                        request.version,
                        "ok",
                        ep.options,
                        requested_options(request),
                    )
                )
                thread = threading.Thread(
                    target=self.consume,
                    args=(ep,),
                    name=f"sim-devicemanager-{resource}",
                    daemon=True,
                )
                ep.thread = thread
                self._s.threads = [t for t in self._s.threads if t.is_alive()] + [thread]
                self._s.changed()
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
        self._s.notify(resource)
        return dp.Empty()

    def _refuse(
        self, request: dp.RegisterRequest, context: grpc.ServicerContext, problem: str
    ) -> dp.Empty:
        with self._s.lock:
            self._s.registrations.append(
                RegistrationRecord(
                    request.resource_name,
                    request.endpoint,
                    request.version,
                    problem,
                    request_options=requested_options(request),
                )
            )
            self._s.changed()
        log.info("sim_device_plugin_refused", resource=request.resource_name, error=problem)
        context.abort(grpc.StatusCode.UNKNOWN, problem)

    def _dial(self, ep: PluginEndpoint, epoch: int) -> None:
        """Wait for the plugin's socket to answer, like grpc.DialContext with WithBlock."""
        ready = grpc.channel_ready_future(ep.channel)
        deadline = time.monotonic() + self._dial_timeout
        while True:
            try:
                ready.result(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
                return
            except grpc.FutureTimeoutError:
                pass
            with self._s.lock:
                if self._s.epoch != epoch:
                    ready.cancel()
                    raise DialError("failed to dial device plugin: context canceled")
            if time.monotonic() >= deadline:
                ready.cancel()
                raise DialError("failed to dial device plugin: context deadline exceeded")

    def consume(self, ep: PluginEndpoint) -> None:
        """Consume the plugin's ListAndWatch stream until it ends (on its own thread)."""
        resource = ep.resource
        try:
            call = ep.list_and_watch(dp.Empty())
            ep.call = call
            if ep.closed or ep.hung_up:
                call.cancel()
            for msg in call:
                devices = devices_of(msg)
                with self._s.lock:
                    res = self._s.resources.get(resource)
                    if ep.closed or res is None or res.endpoint is not ep:
                        break
                    res.devices = devices
                    ep.lists += 1
                    self._s.changed()
                log.debug(
                    "sim_device_plugin_devices",
                    resource=resource,
                    healthy=sum(d.healthy for d in devices.values()),
                    total=len(devices),
                )
                self._s.save()
                self._s.notify(resource)
        except grpc.RpcError as err:
            if not ep.closed:
                log.info(
                    "sim_device_plugin_stream_ended", resource=resource, error=go_rpc_error(err)
                )
        except ValueError:  # the channel was closed under the iterator
            pass
        finally:
            ep.ended = True
            with self._s.lock:
                res = self._s.resources.get(resource)
                current = not ep.closed and res is not None and res.endpoint is ep
                if current and res is not None:
                    self._s.mark_unhealthy(res, self._s.clock())
                    self._s.changed()
            ep.channel.close()
            if current:
                log.info("sim_device_plugin_disconnected", resource=resource)
                self._s.save()
                self._s.notify(resource)
