"""The managers' books while a pod is admitted: a mutable copy of a ``NodeState`` (free
CPUs, free devices, free memory and the memory manager's groups) with the pod's
reusable init-container resources, and its way back to a ``NodeState``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from podres_exporter.core.topology.cpus import Topo
from podres_exporter.core.topology.model import DeviceInfo, NodeState, NumaMemory

__all__ = ["Books"]


@dataclass
class Books:
    """What the CPU, device and memory managers hold, mutable."""

    node: NodeState
    topo: Topo
    free_cpus: set[int]
    free_devices: dict[str, set[str]]
    devices: dict[str, dict[str, DeviceInfo]]
    memory_free: dict[str, dict[int, int]]
    cells: dict[int, tuple[int, ...]]
    assignments: dict[int, int]
    cpu_reuse: set[int] = field(default_factory=set)
    device_reuse: dict[str, set[str]] = field(default_factory=dict)
    memory_reuse: dict[tuple[int, str], int] = field(default_factory=dict)

    @classmethod
    def of(cls, node: NodeState) -> Books:
        """Books opened on ``node``."""
        nodes = node.nodes()
        return cls(
            node=node,
            topo=Topo.of(node.cpus, nodes),
            free_cpus=set(node.free_cpus) - set(node.reserved_cpus),
            free_devices={r: set(ids) for r, ids in node.free_devices.items()},
            devices={r: {d.id: d for d in ds} for r, ds in node.devices.items()},
            memory_free={t: {n: m.free for n, m in per.items()} for t, per in node.memory.items()},
            cells={n: tuple(c) for n, c in node.memory_cells.items()},
            assignments=dict(node.memory_assignments),
        )

    def registered(self, resource: str) -> bool:
        """devicemanager ``isDevicePluginResource``: a resource with registered devices."""
        return resource in self.devices or resource in self.free_devices

    def close(self) -> NodeState:
        """The node as the books now stand."""
        n = self.node
        memory = {
            t: {
                numa: NumaMemory(m.allocatable, self.memory_free.get(t, {}).get(numa, m.free))
                for numa, m in per.items()
            }
            for t, per in n.memory.items()
        }
        return replace(
            n,
            free_cpus=frozenset(self.free_cpus),
            free_devices={r: frozenset(ids) for r, ids in self.free_devices.items()},
            memory=memory,
            memory_cells=dict(self.cells),
            memory_assignments=dict(self.assignments),
        )
