"""Readings, topologies and pods the accounting tests build from."""

from __future__ import annotations

from types import MappingProxyType

from hypothesis import strategies as st

from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    ContainerAlloc,
    KubeletReading,
    NodeTopology,
    PodAlloc,
    Support,
)

GPU = "nvidia.com/gpu"


GiB = 2**30


cpus16 = st.frozensets(st.integers(0, 15), max_size=16)


def topo(nodes: int = 2, per_node: int = 8, offline: frozenset[int] = frozenset()) -> NodeTopology:
    mapping = {c: c // per_node for c in range(nodes * per_node)}
    online = frozenset(mapping) - offline
    return NodeTopology(online_cpus=online, cpu_to_numa=MappingProxyType(mapping))


def reading(
    pods: tuple[PodAlloc, ...] = (),
    allocatable: Allocatable | None = None,
    api: ApiVersion = ApiVersion.V1,
) -> KubeletReading:
    support = Support.SERVED if allocatable is not None else Support.DISABLED
    return KubeletReading(api, pods, allocatable, support, taken_at=0.0)


def pod(name: str, *containers: ContainerAlloc, ns: str = "default") -> PodAlloc:
    return PodAlloc(namespace=ns, name=name, containers=containers)
