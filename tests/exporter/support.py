"""Helpers the exporter's tests share: a topology, a kubelet reading, a scripted source."""

from __future__ import annotations

from collections.abc import Iterator
from types import MappingProxyType

from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    ContainerAlloc,
    KubeletReading,
    NodeTopology,
    PodAlloc,
    RequestStats,
    Support,
)

TOPO = NodeTopology(frozenset({0, 1}), MappingProxyType({0: 0, 1: 0}))


def reading(pods: int) -> KubeletReading:
    ps = tuple(PodAlloc("ns", f"p{i}", (ContainerAlloc("c"),)) for i in range(pods))
    cpus = frozenset({0, 1}) if pods else frozenset()
    return KubeletReading(ApiVersion.V1, ps, Allocatable(cpu_ids=cpus), Support.SERVED, 0.0)


class Script:
    """A kubelet source that answers from a script: a reading or an exception per call."""

    socket_path = "/scripted.sock"

    def __init__(self, answers: list[KubeletReading | Exception]) -> None:
        self._answers: Iterator[KubeletReading | Exception] = iter(answers)
        self.released = 0  # times the poller let the connection go

    def read(self) -> KubeletReading:
        answer = next(self._answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def get_pod(self, namespace: str, name: str) -> PodAlloc | None:
        raise NotImplementedError

    def stats(self) -> RequestStats:
        return RequestStats()

    def release(self) -> None:
        self.released += 1
