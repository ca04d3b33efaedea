"""Admitting a container's devices the way the kubelet does, through the plugins.

``allocate`` admits one container's request for one resource: candidates are the
healthy devices nobody holds; the Topology Manager's NUMA hint splits them into
aligned, unaligned and topology-less devices; ``GetPreferredAllocation`` is asked only
when the plugin advertises it (available = candidates + must-include, must-include =
what is already chosen, size = the total); then ``Allocate`` with exactly one
``ContainerAllocateRequest``, of whose answer only ``container_responses[0]`` counts.
Every failure raises ``AdmissionError``. A container that already holds devices of the
resource gets them again without a call (a pod admitted again after a kubelet restart
is not re-Allocated). ``pre_start`` calls ``PreStartContainer`` (30 s deadline) when
advertised. No lock is held during a gRPC call.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from types import MappingProxyType

import grpc
import structlog

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as dp
from podres_exporter.core.errors import AdmissionError, PreStartError
from podres_sim.kubelet.devicemanager.endpoint import PluginEndpoint, go_rpc_error
from podres_sim.kubelet.devicemanager.records import (
    AllocationResult,
    ContainerMount,
    DeviceNodeSpec,
)
from podres_sim.kubelet.devicemanager.state import Ledger, Resource

__all__ = ["PRE_START_TIMEOUT_S", "Admission"]

log = structlog.get_logger("podres_sim")

PRE_START_TIMEOUT_S = 30.0


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
    endpoint: PluginEndpoint | None = None


class Admission:
    """Allocate, PreStartContainer and release, over one ledger."""

    def __init__(self, ledger: Ledger) -> None:
        self._s = ledger

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
            with self._s.lock:
                self._s.reserved[resource].difference_update(picked)
        with self._s.lock:
            self._s.allocs[(pod, container, resource)] = result
            self._s.changed()
        self._s.save()
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
        with self._s.lock:
            self._s.purge()
            held = self._s.allocs.get((pod, container, resource))
            if held is not None:
                if len(held.device_ids) != count:
                    raise AdmissionError(
                        f"pod {pod!r} container {container!r} changed request for resource "
                        f"{resource!r} from {len(held.device_ids)} to {count}"
                    )
                return held  # admitted again (kubelet restart): no new Allocate
            if count <= 0:
                return AllocationResult(pod, container, resource)
            res = self._s.resources.get(resource)
            if res is None:
                if any(r == resource for _, _, r in self._s.allocs):
                    # Known from earlier allocations, but no plugin (any more).
                    raise AdmissionError(f"can't allocate unregistered device {resource}")
                # Not a device-plugin resource at all: the node has none of it.
                raise AdmissionError(
                    f"Node didn't have enough resource: {resource}, requested: {count}, "
                    f"used: 0, capacity: 0",
                    reason=f"OutOf{resource}",
                )
            available = self._s.available(resource)
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
    ) -> tuple[list[str], PluginEndpoint | None, dict[str, tuple[int, ...] | None]]:
        """Choose the devices (the plugin's preference first, ids it does not offer
        ignored) and reserve them; devices taken meanwhile by others are replaced."""
        resource, count = plan.resource, plan.count
        with self._s.lock:
            if (plan.pod, plan.container, resource) in self._s.allocs:
                raise AdmissionError(
                    f"pod {plan.pod!r} container {plan.container!r} is being admitted twice"
                )
            res = self._s.resources.get(resource)
            if res is None:
                raise AdmissionError(f"can't allocate unregistered device {resource}")
            now = self._s.available(resource)
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
            self._s.reserved.setdefault(resource, set()).update(picked)
            return picked, res.endpoint, {d: res.devices[d].numa for d in picked}

    @staticmethod
    def _call_allocate(
        plan: _Plan,
        ep: PluginEndpoint | None,
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
        calls: list[tuple[str, PluginEndpoint, tuple[str, ...]]] = []
        with self._s.lock:
            for (p, c, resource), alloc in self._s.allocs.items():
                if p != pod or c != container or not alloc.device_ids:
                    continue
                res = self._s.resources.get(resource)
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
        with self._s.lock:
            keys = [k for k in self._s.allocs if k[0] == pod and container in (None, k[1])]
            for k in keys:
                del self._s.allocs[k]
            if keys:
                self._s.changed()
        if keys:
            self._s.save()
        return len(keys)

    @staticmethod
    def _unavailable(resource: str, count: int, have: int) -> str:
        return (
            f"requested number of devices unavailable for {resource}. "
            f"Requested: {count}, Available: {have}"
        )

    @staticmethod
    def _by_affinity(
        res: Resource, available: set[str], hint: frozenset[int] | None
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
