"""Generated kubelet answers: node strategies, their wire answers, a gRPC kubelet serving them."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import grpc
from hypothesis import strategies as st

from podres_exporter._generated.podresources.v1 import api_pb2 as v1
from podres_exporter.core.model import NodeTopology

LIST = "/v1.PodResourcesLister/List"


ALLOCATABLE = "/v1.PodResourcesLister/GetAllocatableResources"


@dataclass
class Answer:
    """What the server answers now: serialised messages; allocatable None: UNIMPLEMENTED."""

    pods: bytes = b""
    allocatable: bytes | None = b""


class Kubelet(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """A pod-resources server answering whatever ``answer`` holds, as it is."""

    def __init__(self) -> None:
        self.answer = Answer()
        self._lock = threading.Lock()

    def set(self, answer: Answer) -> None:
        with self._lock:
            self.answer = answer

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method = handler_call_details.method

        def reply(_request: bytes, context: grpc.ServicerContext) -> bytes:
            with self._lock:
                answer = self.answer
            if method == LIST:
                return answer.pods
            if answer.allocatable is None:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method")
            return answer.allocatable

        if method in (LIST, ALLOCATABLE):
            return grpc.unary_unary_rpc_method_handler(reply)
        return None


@contextlib.contextmanager
def serving(prefix: str) -> Iterator[tuple[Kubelet, str]]:
    """A :class:`Kubelet` served on a short socket path (``/tmp/PREFIX...``), any size of
    answer; the server stopped and its directory removed at the end."""
    directory = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    socket = f"{directory}/kubelet.sock"
    kubelet = Kubelet()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        handlers=[kubelet],
        options=[("grpc.max_send_message_length", -1)],
    )
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    try:
        yield kubelet, socket
    finally:
        server.stop(None).wait()
        shutil.rmtree(directory, ignore_errors=True)


@dataclass(frozen=True)
class Mem:
    memory_type: str
    size: int
    numa: tuple[int, ...] | None


@dataclass(frozen=True)
class Devices:
    resource: str
    ids: tuple[str, ...]
    numa: tuple[int, ...] | None


@dataclass(frozen=True)
class Container:
    name: str
    cpus: tuple[int, ...] = ()
    devices: tuple[Devices, ...] = ()
    memory: tuple[Mem, ...] = ()
    claims: tuple[tuple[str, str, str], ...] = ()  # (claim namespace, claim name, driver)


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    containers: tuple[Container, ...]
    cpus: tuple[int, ...] = ()
    memory: tuple[Mem, ...] = ()


@dataclass(frozen=True)
class Node:
    """A generated node: its topology and the kubelet's answers."""

    online: dict[int, int]  # online CPU -> NUMA node
    pods: tuple[Pod, ...]
    allocatable_cpus: tuple[int, ...] | None  # None: GetAllocatableResources unimplemented
    allocatable_devices: tuple[Devices, ...] = ()
    allocatable_memory: tuple[Mem, ...] = ()

    def topology(self) -> NodeTopology:
        return NodeTopology(frozenset(self.online), MappingProxyType(dict(self.online)))


INT64 = st.integers(-(2**63), 2**63 - 1)


ODD = ["", "a", "default", 'we"ird', "back\\slash", "new\nline", "ünï✓", "tab\there", "{}=,"]


NAMES = st.one_of(
    st.sampled_from(ODD),
    st.text(st.characters(codec="utf-8"), max_size=8),  # protobuf strings are UTF-8
)


RESOURCES = st.one_of(
    st.sampled_from(["example.com/widget", "nvidia.com/gpu", "intel.com/sriov", ""]), NAMES
)


DEVICE_IDS = st.one_of(
    st.sampled_from(["d0", "d1", "d2", "GPU-1::0", "0000:af:02.0", "MIG-1", ""]), NAMES
)


NUMA_IDS = st.one_of(st.integers(0, 3), INT64)


PLACEMENT = st.none() | st.lists(NUMA_IDS, max_size=3).map(tuple)


CPU_IDS = st.one_of(st.integers(0, 40), INT64)


MEMORY_TYPES = st.one_of(st.sampled_from(["memory", "hugepages-1Gi", "hugepages-2Mi"]), NAMES)


MEMORY = st.builds(Mem, MEMORY_TYPES, st.integers(0, 2**64 - 1), PLACEMENT)


DEVICES = st.builds(Devices, RESOURCES, st.lists(DEVICE_IDS, max_size=3).map(tuple), PLACEMENT)


CONTAINERS = st.builds(
    Container,
    NAMES,
    st.lists(CPU_IDS, max_size=6).map(tuple),
    st.lists(DEVICES, max_size=3).map(tuple),
    st.lists(MEMORY, max_size=2).map(tuple),
    st.lists(st.tuples(NAMES, NAMES, NAMES), max_size=1).map(tuple),
)


PODS = st.builds(
    Pod,
    NAMES,
    NAMES,
    st.lists(CONTAINERS, max_size=4).map(tuple),
    st.lists(CPU_IDS, max_size=2).map(tuple),
    st.lists(MEMORY, max_size=1).map(tuple),
)


ONLINE = st.dictionaries(st.integers(0, 40), st.integers(0, 3), max_size=24)


@st.composite
def any_node(draw: st.DrawFn) -> Node:
    """Anything the wire can carry, duplicates included."""
    pods = draw(st.lists(PODS, max_size=6))
    twice = draw(st.booleans())
    if pods and twice:
        pods.append(draw(st.sampled_from(pods)))  # the same pod twice
    unimplemented = draw(st.integers(0, 9)) == 0
    return Node(
        online=draw(ONLINE),
        pods=tuple(pods),
        allocatable_cpus=None if unimplemented else tuple(draw(st.lists(CPU_IDS, max_size=30))),
        allocatable_devices=tuple(draw(st.lists(DEVICES, max_size=5))),
        allocatable_memory=tuple(draw(st.lists(MEMORY, max_size=4))),
    )


GOOD_NAMES = NAMES.filter(bool)


@st.composite
def consistent_node(draw: st.DrawFn) -> Node:
    """Every held CPU and device allocatable and held once; each memory type within what
    its NUMA node has; devices and memory on one node each, as the allocatable list says."""
    online = draw(st.dictionaries(st.integers(0, 63), st.integers(0, 3), min_size=1, max_size=32))
    allocatable = sorted(draw(st.sets(st.sampled_from(sorted(online)))))
    free_cpus = list(draw(st.permutations(allocatable)))
    pool = draw(
        st.lists(
            st.tuples(RESOURCES.filter(bool), DEVICE_IDS.filter(bool), st.integers(0, 3)),
            max_size=8,
            unique_by=lambda d: (d[0], d[1]),
        )
    )
    free_devices = list(draw(st.permutations(pool)))
    budget = {
        (node, mtype): draw(st.integers(0, 2**40))
        for node in set(online.values())
        for mtype in draw(st.sets(st.sampled_from(["memory", "hugepages-1Gi"]), min_size=1))
    }
    left = dict(budget)

    def take_cpus() -> tuple[int, ...]:
        n = draw(st.integers(0, min(3, len(free_cpus))))
        return tuple(free_cpus.pop() for _ in range(n))

    def take_devices() -> tuple[Devices, ...]:
        n = draw(st.integers(0, min(2, len(free_devices))))
        taken = [free_devices.pop() for _ in range(n)]
        return tuple(Devices(r, (d,), (numa,)) for r, d, numa in taken)

    def take_memory() -> tuple[Mem, ...]:
        out = []
        for key in draw(st.lists(st.sampled_from(sorted(left)), max_size=2)):
            size = draw(st.integers(0, left[key]))
            left[key] -= size
            out.append(Mem(key[1], size, (key[0],)))
        return tuple(out)

    pods = []
    for p in range(draw(st.integers(0, 5))):
        containers = tuple(
            Container(f"c{i}-{draw(GOOD_NAMES)}", take_cpus(), take_devices(), take_memory())
            for i in range(draw(st.integers(1, 3)))
        )
        pods.append(Pod(draw(GOOD_NAMES), f"p{p}-{draw(GOOD_NAMES)}", containers))
    return Node(
        online=online,
        pods=tuple(pods),
        allocatable_cpus=tuple(allocatable),
        allocatable_devices=tuple(Devices(r, (d,), (numa,)) for r, d, numa in pool),
        allocatable_memory=tuple(Mem(t, size, (node,)) for (node, t), size in budget.items()),
    )


def _topology(numa: tuple[int, ...] | None) -> dict[str, Any]:
    if numa is None:
        return {}
    return {"topology": v1.TopologyInfo(nodes=[v1.NUMANode(ID=n) for n in numa])}


def _memory(blocks: tuple[Mem, ...]) -> list[v1.ContainerMemory]:
    return [
        v1.ContainerMemory(memory_type=m.memory_type, size=m.size, **_topology(m.numa))
        for m in blocks
    ]


def _devices(entries: tuple[Devices, ...]) -> list[v1.ContainerDevices]:
    return [
        v1.ContainerDevices(resource_name=d.resource, device_ids=d.ids, **_topology(d.numa))
        for d in entries
    ]


def answer_of(node: Node) -> Answer:
    pods = v1.ListPodResourcesResponse(
        pod_resources=[
            v1.PodResources(
                namespace=p.namespace,
                name=p.name,
                cpu_ids=p.cpus,
                memory=_memory(p.memory),
                containers=[
                    v1.ContainerResources(
                        name=c.name,
                        cpu_ids=c.cpus,
                        devices=_devices(c.devices),
                        memory=_memory(c.memory),
                        dynamic_resources=[
                            v1.DynamicResource(
                                claim_namespace=ns,
                                claim_name=name,
                                claim_resources=[v1.ClaimResource(driver_name=driver)],
                            )
                            for ns, name, driver in c.claims
                        ],
                    )
                    for c in p.containers
                ],
            )
            for p in node.pods
        ]
    )
    if node.allocatable_cpus is None:
        return Answer(pods.SerializeToString(), None)
    allocatable = v1.AllocatableResourcesResponse(
        cpu_ids=node.allocatable_cpus,
        devices=_devices(node.allocatable_devices),
        memory=_memory(node.allocatable_memory),
    )
    return Answer(pods.SerializeToString(), allocatable.SerializeToString())
