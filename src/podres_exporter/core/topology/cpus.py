"""The CPU manager's static policy: the CPU topology, which CPUs a container takes
(cpumanager/cpu_assignment.go ``takeByTopologyNUMAPacked``, policy_static.go
``allocateCPUs`` / ``getAlignedCPUs``, v1.28), and its hints (policy_static.go
``generateCPUTopologyHints``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass

from podres_exporter.core.topology import masks
from podres_exporter.core.topology.merge import Hint
from podres_exporter.core.topology.model import CpuInfo

__all__ = ["Topo", "allocate_cpus", "cpu_hints", "take_by_topology"]


@dataclass(frozen=True)
class Topo:
    """The node's CPU topology (cpumanager/topology ``CPUTopology`` / ``CPUDetails``)."""

    cpus: dict[int, CpuInfo]
    nodes: tuple[int, ...]

    @classmethod
    def of(cls, cpus: Iterable[CpuInfo], nodes: Iterable[int]) -> Topo:
        """The topology of these CPUs and NUMA nodes."""
        return cls({c.id: c for c in cpus}, tuple(sorted(nodes)))

    def _per(self, key: Callable[[CpuInfo], int]) -> int:
        groups = {key(c) for c in self.cpus.values()}
        return len(self.cpus) // len(groups) if groups else 0

    @property
    def cpus_per_core(self) -> int:
        """topology.go ``CPUsPerCore``: CPUs / cores."""
        return self._per(lambda c: c.core)

    @property
    def cpus_per_socket(self) -> int:
        """topology.go ``CPUsPerSocket``."""
        return self._per(lambda c: c.socket)

    @property
    def cpus_per_numa(self) -> int:
        """CPUs / NUMA nodes (``CPUsPerNUMA``)."""
        return self._per(lambda c: c.numa)

    def in_mask(self, mask: int) -> int:
        """How many CPUs, of any state, sit on the NUMA nodes of ``mask``."""
        return sum(1 for c in self.cpus.values() if mask >> c.numa & 1)

    def sockets_of(self, mask: int) -> set[int]:
        """``SocketsInNUMANodes``."""
        return {c.socket for c in self.cpus.values() if mask >> c.numa & 1}

    def numa_per_socket(self) -> int:
        """NUMA nodes per socket (``NumNUMANodes / NumSockets``), 0 when fewer."""
        sockets = {c.socket for c in self.cpus.values()}
        return len(self.nodes) // len(sockets) if sockets else 0


def cpu_hints(
    topo: Topo, available: Set[int], reusable: Set[int], request: int, *, align_by_socket: bool
) -> list[Hint]:
    """policy_static.go ``generateCPUTopologyHints``: a hint for every NUMA mask that holds
    every reusable CPU and enough reusable + available CPUs; preferred when as narrow as
    the smallest mask whose CPUs (all of them, free or not) could hold the request, or,
    with align-by-socket, when it spans the fewest sockets (``isHintSocketAligned``)."""
    min_size = len(topo.nodes)
    found: list[int] = []
    for mask in masks.iterate(topo.nodes):
        if topo.in_mask(mask) >= request and masks.count(mask) < min_size:
            min_size = masks.count(mask)
        if any(not mask >> topo.cpus[c].numa & 1 for c in reusable):
            continue
        matching = len(reusable) + sum(1 for c in available if mask >> topo.cpus[c].numa & 1)
        if matching >= request:
            found.append(mask)
    out = []
    for mask in found:
        preferred = masks.count(mask) == min_size
        if align_by_socket and _socket_aligned(topo, mask, min_size):
            preferred = True
        out.append(Hint(mask, preferred))
    return out


def _socket_aligned(topo: Topo, mask: int, min_size: int) -> bool:
    """policy_static.go ``isHintSocketAligned``."""
    per_socket = topo.numa_per_socket()
    if per_socket == 0:
        return False
    min_sockets = (min_size + per_socket - 1) // per_socket
    return len(topo.sockets_of(mask)) == min_sockets


class _Acc:
    """cpu_assignment.go ``cpuAccumulator`` (the packed variant)."""

    def __init__(self, topo: Topo, available: Set[int], need: int) -> None:
        self.topo = topo
        self.free = set(available)
        self.need = need
        self.result: list[int] = []

    def take(self, cpus: Iterable[int]) -> None:
        got = sorted(cpus)
        self.result.extend(got)
        self.free.difference_update(got)
        self.need -= len(got)

    def _groups(self, key: Callable[[CpuInfo], int]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = defaultdict(list)
        for c in self.free:
            out[key(self.topo.cpus[c])].append(c)
        return out

    def _take_whole(self, key: Callable[[CpuInfo], int], size: int) -> None:
        """``takeFullFirstLevel`` / ``takeFullSecondLevel``: whole free sockets or NUMA
        nodes, by id, while the request needs at least one's worth."""
        full = {k: v for k, v in self._groups(key).items() if len(v) == size}
        for k in sorted(full):
            if size and self.need >= size:
                self.take(full[k])

    def sorted_cores(self) -> list[int]:
        """``sortAvailableCores`` (sockets first): sockets by free CPUs then id, their
        NUMA nodes likewise, their cores by free CPUs then id."""
        sockets = self._groups(lambda c: c.socket)
        numas = self._groups(lambda c: c.numa)
        cores = self._groups(lambda c: c.core)
        out: list[int] = []
        for s in sorted(sockets, key=lambda s: (len(sockets[s]), s)):
            in_s = {self.topo.cpus[c].numa for c in sockets[s]}
            for n in sorted(in_s, key=lambda n: (len(numas[n]), n)):
                ids = {self.topo.cpus[c].core for c in numas[n] if self.topo.cpus[c].socket == s}
                out.extend(sorted(ids, key=lambda k: (len(cores[k]), k)))
        return list(dict.fromkeys(out))

    def take_cores(self) -> None:
        """``takeFullCores``: whole free cores while a core's worth is needed."""
        per = self.topo.cpus_per_core
        for core in self.sorted_cores():
            members = [c for c in self.free if self.topo.cpus[c].core == core]
            if len(members) == per and self.need >= per:
                self.take(members)

    def take_threads(self) -> None:
        """``takeRemainingCPUs``: single CPUs in ``sortAvailableCPUs`` order."""
        for core in self.sorted_cores():
            for c in sorted(c for c in self.free if self.topo.cpus[c].core == core):
                if self.need >= 1:
                    self.take([c])


def take_by_topology(topo: Topo, available: Set[int], count: int) -> list[int] | None:
    """cpu_assignment.go ``takeByTopologyNUMAPacked``: whole sockets, whole NUMA nodes,
    whole cores, then single threads. ``None`` when fewer than ``count`` are available
    ("not enough cpus available to satisfy request")."""
    acc = _Acc(topo, available, count)
    if acc.need < 1:
        return []
    if acc.need > len(acc.free):
        return None
    acc._take_whole(lambda c: c.socket, topo.cpus_per_socket)
    acc._take_whole(lambda c: c.numa, topo.cpus_per_numa)
    if acc.need > 0:
        acc.take_cores()
    if acc.need > 0:
        acc.take_threads()
    return acc.result


def allocate_cpus(
    topo: Topo,
    available: Set[int],
    count: int,
    mask: int | None,
    *,
    align_by_socket: bool,
) -> list[int] | None:
    """policy_static.go ``allocateCPUs``: the CPUs aligned with the hint first (with
    align-by-socket: those of the hint's sockets, ``getAlignedCPUs``), then the rest."""
    result: list[int] = []
    if mask is not None:
        if align_by_socket:
            sockets = topo.sockets_of(mask)
            aligned = {c for c in available if topo.cpus[c].socket in sockets}
        else:
            aligned = {c for c in available if mask >> topo.cpus[c].numa & 1}
        got = take_by_topology(topo, aligned, min(count, len(aligned)))
        result.extend(got or [])
    rest = take_by_topology(topo, set(available) - set(result), count - len(result))
    if rest is None:
        return None
    return result + rest
