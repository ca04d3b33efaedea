"""A simulated pod as the kubelet's Pods API sends it: the bytes of a ``v1.Pod``.

The simulator has no API server, so what a pod object would carry is derived here from
the scenario the way Kubernetes' controllers set it: a Deployment's pod carries the
``pod-template-hash`` label and is owned by the ReplicaSet ``<name>-<hash>``; a
StatefulSet's its ``statefulset.kubernetes.io/pod-name``; a Job's ``job-name``; a static
pod is owned by its Node. Phase and QoS class are the kubelet's; each container's
``allocatedResourcesStatus`` (KEP-4680) gives the health of every device it holds, as
the node (or the device plugin that serves the device) says it now.

Pure: encoding only, through the generated ``k8s.io.api.core.v1`` messages (the minimal
proto of the fields the exporter reads, with the upstream field numbers).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from podres_exporter._generated.k8s.api.core.v1 import pod_pb2
from podres_sim.kubelet.pods import ContainerState, PodState

__all__ = [
    "HEALTHY",
    "UNHEALTHY",
    "UNKNOWN",
    "HealthOf",
    "deleted_pod_bytes",
    "owner_of",
    "pod_bytes",
    "pod_labels",
    "template_hash",
]

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"

HealthOf = Callable[[str, str], str]
"""(resource, device id) -> Healthy, Unhealthy or Unknown."""


def template_hash(pod: PodState) -> str:
    """The ``pod-template-hash`` of a Deployment's pod (``name-<hash>-<xxxxx>``); ""
    for other pods."""
    if pod.spec.naming != "deployment":
        return ""
    rest = pod.name[len(pod.spec.name) + 1 :]
    return rest.rpartition("-")[0]


_KIND_OF_NAMING = {"statefulset": "StatefulSet", "generated": "DaemonSet"}


def owner_of(pod: PodState, node_name: str) -> tuple[str, str] | None:
    """The kind and name of the pod's controlling owner, or None for a bare pod."""
    spec = pod.spec
    if spec.owner:
        return None if spec.owner == "none" else (spec.owner, spec.name)
    if spec.naming == "deployment":
        return ("ReplicaSet", f"{spec.name}-{template_hash(pod)}")
    if spec.naming == "static":
        return ("Node", node_name)
    kind = _KIND_OF_NAMING.get(spec.naming)
    return (kind, spec.name) if kind else None


def pod_labels(pod: PodState, owner: tuple[str, str] | None) -> dict[str, str]:
    """The scenario's labels and those the pod's controller sets."""
    labels = dict(pod.spec.labels)
    kind = owner[0] if owner else ""
    if kind == "ReplicaSet" and pod.spec.naming == "deployment":
        labels["pod-template-hash"] = template_hash(pod)
    elif kind == "StatefulSet":
        labels["statefulset.kubernetes.io/pod-name"] = pod.name
        labels["apps.kubernetes.io/pod-index"] = pod.name.rpartition("-")[2]
    elif kind == "Job" and owner is not None:
        labels["job-name"] = owner[1]
        labels["batch.kubernetes.io/job-name"] = owner[1]
    return labels


def _owner_uid(namespace: str, kind: str, name: str) -> str:
    """A stable UID-shaped id for an owner the simulator does not otherwise model."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"podres-sim:{namespace}/{kind}/{name}"))


def _api_version(kind: str) -> str:
    return {
        "ReplicaSet": "apps/v1",
        "StatefulSet": "apps/v1",
        "DaemonSet": "apps/v1",
        "Job": "batch/v1",
        "Node": "v1",
    }.get(kind, "v1")


def _container_status(
    state: ContainerState | None, name: str, health_of: HealthOf
) -> pod_pb2.ContainerStatus:
    status = pod_pb2.ContainerStatus(name=name)
    if state is None:
        return status
    by_resource: dict[str, list[pod_pb2.ResourceHealth]] = {}
    for grant in state.devices:
        by_resource.setdefault(grant.resource, []).append(
            pod_pb2.ResourceHealth(
                resourceID=grant.device_id, health=health_of(grant.resource, grant.device_id)
            )
        )
    for resource, entries in by_resource.items():
        status.allocatedResourcesStatus.add(name=resource).resources.extend(entries)
    return status


def pod_message(
    pod: PodState, node_name: str, health_of: HealthOf, created_s: int = 0
) -> pod_pb2.Pod:
    """The ``v1.Pod`` of one simulated pod."""
    owner = owner_of(pod, node_name)
    msg = pod_pb2.Pod()
    meta = msg.metadata
    meta.name, meta.namespace, meta.uid = pod.name, pod.namespace, pod.uid
    if created_s:
        meta.creationTimestamp.seconds = created_s
    meta.labels.update(pod_labels(pod, owner))
    if owner is not None:
        kind, name = owner
        meta.ownerReferences.add(
            kind=kind,
            name=name,
            uid=_owner_uid(pod.namespace, kind, name),
            apiVersion=_api_version(kind),
            controller=True,
        )
    spec, status = msg.spec, msg.status
    spec.nodeName = node_name
    states = {c.name: c for c in pod.containers}
    for c in pod.spec.containers:
        into = spec.containers if c.kind == "app" else spec.initContainers
        container = into.add(name=c.name)
        _resources(container.resources, c.cpu_m, c.memory, c.devices)
        statuses = status.containerStatuses if c.kind == "app" else status.initContainerStatuses
        statuses.append(_container_status(states.get(c.name), c.name, health_of))
    status.phase = pod.phase
    status.qosClass = pod.qos
    for claim in {g.name: g for c in pod.containers for g in c.claims}:
        status.resourceClaimStatuses.add(name=claim, resourceClaimName=claim)
    return msg


def _resources(
    into: pod_pb2.ResourceRequirements, cpu_m: int, memory: int, devices: Mapping[str, int]
) -> None:
    """Requests equal to limits, as the scenario means them."""
    quantities = {}
    if cpu_m:
        quantities["cpu"] = f"{cpu_m // 1000}" if cpu_m % 1000 == 0 else f"{cpu_m}m"
    if memory:
        quantities["memory"] = str(memory)
    quantities.update({r: str(n) for r, n in devices.items() if n})
    for key, value in quantities.items():
        into.requests[key].string = value
        into.limits[key].string = value


def pod_bytes(pod: PodState, node_name: str, health_of: HealthOf, created_s: int = 0) -> bytes:
    """The bytes of :func:`pod_message`, as the kubelet marshals a pod."""
    return pod_message(pod, node_name, health_of, created_s).SerializeToString()


def deleted_pod_bytes(namespace: str, name: str, uid: str) -> bytes:
    """What a DELETED event carries: a pod with only its name, namespace and UID."""
    msg = pod_pb2.Pod()
    msg.metadata.name, msg.metadata.namespace, msg.metadata.uid = name, namespace, uid
    return msg.SerializeToString()
