"""The node's free resources, as the kubelet's CPU, memory and device managers keep
them: the allocatable CPUs per NUMA node (heaps, lowest first), the healthy devices per
resource and NUMA placement, and the pinnable memory per type and NUMA node.

``Pools`` takes and gives back; ``Node`` decides what to take (the NUMA node where a
container fits, the spill when none does) and holds the lock.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from podres_sim.kubelet.pods import DeviceGrant, MemoryGrant
from podres_sim.scenario import DeviceSpec, NodeSpec

__all__ = ["AdmissionFailure", "Hold", "NumaKey", "Pools"]

NumaKey = tuple[int, ...] | None


class AdmissionFailure(Exception):
    """A pod cannot be admitted: the message and ``reason`` are the kubelet's."""

    def __init__(self, message: str, reason: str = "UnexpectedAdmissionError") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(slots=True)
class Hold:
    """What a pod took, so that it can be given back exactly."""

    cpus: list[int] = field(default_factory=list)
    devices: list[tuple[str, str]] = field(default_factory=list)
    memory: list[tuple[str, int, int]] = field(default_factory=list)  # type, NUMA node, bytes
    plugin_pod: str | None = None  # the device manager's key of a pod holding plugin devices


class Pools:
    """The free CPUs, devices and memory of a node (callers hold the node's lock)."""

    def __init__(self, spec: NodeSpec) -> None:
        self._spec = spec
        self.cpu_numa = dict(spec.cpu_to_numa)
        self.free_cpus: list[list[int]] = [[] for _ in range(spec.numa_nodes)]
        if spec.cpu_policy == "static":
            for cpu in spec.allocatable_cpus:
                self.free_cpus[self.cpu_numa[cpu]].append(cpu)
            for heap in self.free_cpus:
                heapq.heapify(heap)
        self.devices: list[DeviceSpec] = list(spec.devices)
        self.dev_index: dict[tuple[str, str], int] = {
            (d.resource, d.id): i for i, d in enumerate(spec.devices)
        }
        self.free_dev: dict[str, dict[NumaKey, list[int]]] = {}
        self.parked: set[int] = set()  # free but unhealthy
        for i, d in enumerate(spec.devices):
            if d.healthy:
                self.free_dev.setdefault(d.resource, {}).setdefault(d.numa, []).append(i)
            else:
                self.free_dev.setdefault(d.resource, {})
                self.parked.add(i)
        self.free_mem: dict[str, list[int]] = {t: list(s) for t, s in spec.memory.items()}

    def check_totals(
        self, container: str, ncpu: int, devices: Mapping[str, int], memory: Mapping[str, int]
    ) -> None:
        free = sum(len(h) for h in self.free_cpus)
        if ncpu > free:
            raise AdmissionFailure(
                f"Allocate failed due to not enough cpus available to satisfy request: "
                f"requested={ncpu}, available={free} (container {container})"
            )
        for resource, count in devices.items():
            have = sum(len(h) for h in self.free_dev.get(resource, {}).values())
            if count > have:
                raise AdmissionFailure(
                    f"Allocate failed due to requested number of devices unavailable for "
                    f"{resource}. Requested: {count}, Available: {have}"
                )
        for mtype, size in memory.items():
            have = sum(self.free_mem.get(mtype, ()))
            if size > have:
                raise AdmissionFailure(
                    f"Allocate failed due to [memorymanager] failed to find NUMA nodes to "
                    f"extend the current topology hint: {mtype} requested={size}, free={have}"
                )

    def fits(
        self, n: int, ncpu: int, devices: Mapping[str, int], memory: Mapping[str, int]
    ) -> bool:
        if len(self.free_cpus[n]) < ncpu:
            return False
        for resource, count in devices.items():
            buckets = self.free_dev.get(resource, {})
            near = sum(len(h) for k, h in buckets.items() if k is None or n in k)
            if near < count:
                return False
        return all(self.free_mem[t][n] >= size for t, size in memory.items())

    def best_device_node(self, devices: Mapping[str, int]) -> int | None:
        if not devices:
            return None
        counts = [0] * self._spec.numa_nodes
        for resource in devices:
            for key, heap in self.free_dev.get(resource, {}).items():
                for n in key or ():
                    counts[n] += len(heap)
        return max(range(len(counts)), key=lambda n: (counts[n], -n))

    def take_cpus(self, count: int, order: Iterable[int]) -> list[int]:
        taken: list[int] = []
        for n in order:
            heap = self.free_cpus[n]
            while heap and len(taken) < count:
                taken.append(heapq.heappop(heap))
        return taken

    def take_devices(
        self, resource: str, count: int, prefer: int | None, hold: Hold
    ) -> list[DeviceGrant]:
        buckets = self.free_dev[resource]

        def rank(key: NumaKey) -> tuple[int, int]:
            if prefer is not None and key == (prefer,):
                return (0, 0)
            if prefer is not None and key is not None and prefer in key:
                return (1, len(key))
            if key is None:
                return (2, 0)
            return (3, key[0])

        taken: list[DeviceGrant] = []
        for key in sorted(buckets, key=rank):
            heap = buckets[key]
            while heap and len(taken) < count:
                dev = self.devices[heapq.heappop(heap)]
                hold.devices.append((dev.resource, dev.id))
                taken.append(DeviceGrant(dev.resource, dev.id, dev.numa))
        return taken

    def memory_group(self, memory: Mapping[str, int], start: int) -> tuple[int, ...]:
        order = [start] + [n for n in range(self._spec.numa_nodes) if n != start]
        group: list[int] = []
        for n in order:
            group.append(n)
            if all(sum(self.free_mem[t][g] for g in group) >= s for t, s in memory.items()):
                break
        return tuple(sorted(group))

    def take_memory(
        self, memory: Mapping[str, int], group: tuple[int, ...], hold: Hold
    ) -> tuple[MemoryGrant, ...]:
        grants: list[MemoryGrant] = []
        for mtype, size in memory.items():
            left = size
            for n in group:
                part = min(left, self.free_mem[mtype][n])
                if part:
                    self.free_mem[mtype][n] -= part
                    hold.memory.append((mtype, n, part))
                    left -= part
            grants.append(MemoryGrant(mtype, size, group))
        return tuple(grants)

    def free_cpu_ids(self) -> list[int]:
        """Every free allocatable CPU."""
        return [c for heap in self.free_cpus for c in heap]

    def free_device_ids(self) -> dict[str, list[str]]:
        """The free healthy devices per resource."""
        return {
            r: [self.devices[i].id for heap in buckets.values() for i in heap]
            for r, buckets in self.free_dev.items()
        }

    def take_exact(
        self,
        hold: Hold,
        cpus: Iterable[int],
        devices: Mapping[str, Iterable[str]],
        memory: Mapping[tuple[str, int], int],
    ) -> list[DeviceGrant]:
        """Take these CPUs, devices and bytes per (type, NUMA node), as the admission
        rules chose them."""
        for cpu in cpus:
            heap = self.free_cpus[self.cpu_numa[cpu]]
            heap.remove(cpu)
            heapq.heapify(heap)
            hold.cpus.append(cpu)
        grants: list[DeviceGrant] = []
        for resource, ids in devices.items():
            for device_id in ids:
                i = self.dev_index[(resource, device_id)]
                dev = self.devices[i]
                heap = self.free_dev[resource][dev.numa]
                heap.remove(i)
                heapq.heapify(heap)
                hold.devices.append((resource, device_id))
                grants.append(DeviceGrant(resource, device_id, dev.numa))
        for (mtype, n), size in memory.items():
            self.free_mem[mtype][n] -= size
            hold.memory.append((mtype, n, size))
        return grants

    def give_back(self, hold: Hold) -> None:
        """Return what ``hold`` took to the pools (an unhealthy device stays parked)."""
        for cpu in hold.cpus:
            heapq.heappush(self.free_cpus[self.cpu_numa[cpu]], cpu)
        for resource, device_id in hold.devices:
            i = self.dev_index[(resource, device_id)]
            dev = self.devices[i]
            if dev.healthy:
                heapq.heappush(self.free_dev[resource].setdefault(dev.numa, []), i)
            else:
                self.parked.add(i)
        for mtype, n, size in hold.memory:
            self.free_mem[mtype][n] += size
        hold.cpus.clear()
        hold.devices.clear()
        hold.memory.clear()
