"""The pod-resources wire messages a kubelet builds from its node's state.

``pod_message`` (v1), ``alpha_pod_message`` (v1alpha1) and ``allocatable_message``
turn the node's records into the generated protobuf messages, in the kubelet's
shapes: one ContainerDevices entry per device and NUMA node, or per resource (kubelet
~1.20); the pod-level ``cpu_ids``/``memory`` and DRA ``share_id`` only when the
kubelet's version sends them. ``listed`` says which pods List and Get show.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from podres_exporter._generated.podresources.v1 import api_pb2
from podres_exporter._generated.podresources.v1alpha1 import api_pb2 as alpha_pb2
from podres_sim.kubelet.pods import (
    ContainerState,
    DeviceGrant,
    MemoryGrant,
    NodeSnapshot,
    PodState,
)
from podres_sim.scenario import DeviceGrouping, KubeletBehaviour

__all__ = [
    "allocatable_message",
    "alpha_pod_message",
    "listed",
    "pod_message",
    "wire_shape",
]


_TOPOLOGIES: dict[tuple[int, ...], Any] = {}


def _topology(nodes: Iterable[int]) -> Any:
    """A TopologyInfo for ``nodes`` (node 0 included: a present message, ``ID`` 0)."""
    key = tuple(nodes)
    msg = _TOPOLOGIES.get(key)
    if msg is None:
        msg = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=n) for n in key])
        _TOPOLOGIES[key] = msg
    return msg


def _device_pairs(grants: Iterable[DeviceGrant], grouping: DeviceGrouping) -> list[Any]:
    """ContainerDevices entries: one per device id and NUMA node (a device with no
    topology once, without the field), or one per resource (kubelet ~1.20)."""
    out: list[Any] = []
    if grouping == "per_device":
        for g in grants:
            if g.numa is None:
                out.append(
                    api_pb2.ContainerDevices(resource_name=g.resource, device_ids=[g.device_id])
                )
            else:
                out.extend(
                    api_pb2.ContainerDevices(
                        resource_name=g.resource, device_ids=[g.device_id], topology=_topology((n,))
                    )
                    for n in g.numa
                )
        return out
    groups: dict[str, list[DeviceGrant]] = {}
    for g in grants:
        groups.setdefault(g.resource, []).append(g)
    for resource, members in groups.items():
        numa = sorted({n for g in members for n in g.numa or ()})
        entry = api_pb2.ContainerDevices(
            resource_name=resource, device_ids=[g.device_id for g in members]
        )
        if numa:
            entry.topology.CopyFrom(_topology(numa))
        out.append(entry)
    return out


def _memory(blocks: Iterable[MemoryGrant]) -> list[Any]:
    return [
        api_pb2.ContainerMemory(memory_type=b.memory_type, size=b.size, topology=_topology(b.numa))
        for b in blocks
    ]


def _container(c: ContainerState, grouping: DeviceGrouping, share_ids: bool = True) -> Any:
    if c.empty:
        return api_pb2.ContainerResources(name=c.name)
    dynamic = [
        api_pb2.DynamicResource(
            claim_name=cl.name,
            claim_namespace=cl.namespace,
            claim_resources=[
                api_pb2.ClaimResource(
                    cdi_devices=[api_pb2.CDIDevice(name=n) for n in d.cdi_devices],
                    driver_name=d.driver,
                    pool_name=d.pool,
                    device_name=d.device,
                    **({"share_id": d.share_id} if share_ids and d.share_id is not None else {}),
                )
                for d in cl.devices
            ],
        )
        for cl in c.claims
    ]
    return api_pb2.ContainerResources(
        name=c.name,
        devices=_device_pairs(c.devices, grouping),
        cpu_ids=c.cpu_ids,
        memory=_memory(c.memory),
        dynamic_resources=dynamic,
    )


def pod_message(
    pod: PodState,
    grouping: DeviceGrouping = "per_device",
    *,
    pod_level: bool = False,
    share_ids: bool = True,
) -> Any:
    """The v1 ``PodResources`` message for a pod. ``pod_level``: with the pod-level
    ``cpu_ids`` and ``memory`` (``PodLevelResourceManagers``); ``share_ids``: with the
    DRA ``share_id`` of claim devices (1.35+)."""
    return api_pb2.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[_container(c, grouping, share_ids) for c in pod.containers],
        cpu_ids=pod.cpu_ids if pod_level else (),
        memory=_memory(pod.memory) if pod_level else [],
    )


def wire_shape(behaviour: KubeletBehaviour) -> tuple[DeviceGrouping, bool, bool]:
    """What of the kubelet's behaviour shapes a pod's message (its cache key)."""
    return (behaviour.device_grouping, behaviour.pod_level_resources, behaviour.dra_share_ids)


def listed(pod: PodState, behaviour: KubeletBehaviour) -> bool:
    """Whether List and Get show ``pod``: a rejected pod per ``list_rejected``, a
    finished one only without the active-pods filter (kubelets before 1.34)."""
    if not pod.admitted:
        return behaviour.list_rejected
    return pod.active or not behaviour.list_active_only


def alpha_pod_message(pod: PodState, grouping: DeviceGrouping = "per_device") -> Any:
    """The v1alpha1 ``PodResources`` message: devices only, no topology."""
    return alpha_pb2.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            alpha_pb2.ContainerResources(
                name=c.name,
                devices=[
                    alpha_pb2.ContainerDevices(
                        resource_name=d.resource_name, device_ids=list(d.device_ids)
                    )
                    for d in _device_pairs(c.devices, grouping)
                ],
            )
            for c in pod.containers
        ],
    )


def allocatable_message(
    snap: NodeSnapshot, grouping: DeviceGrouping = "per_device", *, warming: bool = False
) -> Any:
    """The ``AllocatableResourcesResponse`` for a node snapshot."""
    grants = (DeviceGrant(d.resource, d.id, d.numa) for d in snap.healthy_devices)
    return api_pb2.AllocatableResourcesResponse(
        devices=_device_pairs(grants, grouping),
        cpu_ids=() if warming else snap.allocatable_cpus,
        memory=_memory(snap.allocatable_memory),
    )
