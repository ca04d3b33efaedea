"""What each hint provider reads from a pod: guaranteed exclusive CPUs, device requests,
memory requests, per container and per pod (v1.28 sources cited per function)."""

from __future__ import annotations

from podres_exporter.core.topology.books import Books
from podres_exporter.core.topology.model import CPU, MEMORY, Container, Pod, QoS

__all__ = [
    "device_requests",
    "guaranteed_cpus",
    "memory_requests",
    "pod_device_requests",
    "pod_guaranteed_cpus",
    "pod_memory_requests",
]


def _is_memory(resource: str) -> bool:
    return resource == MEMORY or resource.startswith("hugepages-")


def guaranteed_cpus(klass: QoS, c: Container) -> int:
    """policy_static.go ``guaranteedCPUs``: a Guaranteed pod's whole-number CPU request,
    else 0 (shared pool)."""
    if klass is not QoS.GUARANTEED:
        return 0
    milli = c.request(CPU)
    return 0 if milli % 1000 else milli // 1000


def pod_guaranteed_cpus(klass: QoS, pod: Pod) -> int:
    """policy_static.go ``podGuaranteedCPUs``: max(largest init container, sum of app
    containers), counting only containers that request cpu."""
    init = max(
        (guaranteed_cpus(klass, c) for c in pod.init_containers if c.request(CPU)), default=0
    )
    app = sum(guaranteed_cpus(klass, c) for c in pod.containers if c.request(CPU))
    return max(init, app)


def _device_amount(c: Container, resource: str) -> int:
    return c.limits[resource] if resource in c.limits else c.requests.get(resource, 0)


def device_requests(books: Books, c: Container) -> dict[str, int]:
    """manager.go ``getContainerDeviceRequest``: the container's limits of registered
    device-plugin resources (``isDevicePluginResource``)."""
    names = set(c.limits) | set(c.requests)
    return {r: _device_amount(c, r) for r in sorted(names) if books.registered(r)}


def pod_device_requests(books: Books, pod: Pod) -> dict[str, int]:
    """topology_hints.go ``getPodDeviceRequest``: per resource max(largest init
    container, sum of app containers) (``resource.PodLimits``)."""
    out: dict[str, int] = {}
    for c in pod.containers:
        for r, q in device_requests(books, c).items():
            out[r] = out.get(r, 0) + q
    for c in pod.init_containers:
        for r, q in device_requests(books, c).items():
            out[r] = max(out.get(r, 0), q)
    return out


def memory_requests(klass: QoS, c: Container) -> dict[str, int]:
    """memorymanager policy_static.go ``getRequestedResources``: memory and hugepages
    requests of a container of a Guaranteed pod (none otherwise: no hints, no pinning)."""
    if klass is not QoS.GUARANTEED:
        return {}
    names = set(c.requests) | set(c.limits)
    return {r: c.request(r) for r in sorted(names) if _is_memory(r) and c.request(r) > 0}


def pod_memory_requests(klass: QoS, pod: Pod) -> dict[str, int]:
    """memorymanager policy_static.go ``getPodRequestedResources``: per type the sum of
    app containers, raised to the largest init container (types only init containers
    ask for are dropped, as upstream does)."""
    app: dict[str, int] = {}
    for c in pod.containers:
        for r, q in memory_requests(klass, c).items():
            app[r] = app.get(r, 0) + q
    init: dict[str, int] = {}
    for c in pod.init_containers:
        for r, q in memory_requests(klass, c).items():
            init[r] = max(init.get(r, 0), q)
    return {r: max(q, init.get(r, 0)) for r, q in app.items()}
