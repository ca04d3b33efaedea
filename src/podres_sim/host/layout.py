"""The device tree a scenario's host has: NICs for its VF resources, GPUs for its
``nvidia.com``/``amd.com``/``gpu.intel.com`` resources, and ``lo``, derived from the
scenario's devices (their ids and NUMA nodes) with seeded, plausible counters.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from podres_sim.host.devtree import format_pci_address, interface_name, pci_address
from podres_sim.host.hardware import (
    DeviceTreeSpec,
    NetStats,
    NicPf,
    NicVf,
    NvidiaGpu,
    VirtualNic,
)
from podres_sim.scenario import DeviceSpec, NodeSpec, Scenario

__all__ = ["devices_for_scenario"]


def _stats(key: str, *, active: bool = True) -> NetStats:
    rng = random.Random(key)
    scale = 1 if active else 1000
    rx_packets = rng.randint(10**5, 10**8) // scale
    tx_packets = rng.randint(10**5, 10**8) // scale
    return NetStats(
        rx_bytes=rx_packets * rng.randint(80, 1500),
        tx_bytes=tx_packets * rng.randint(80, 1500),
        rx_packets=rx_packets,
        tx_packets=tx_packets,
        rx_errors=rng.choice((0, 0, 0, 1, 3)),
        tx_errors=0,
        rx_dropped=rng.randint(0, 200),
        tx_dropped=rng.choice((0, 0, 2)),
    )


def _numa(spec: DeviceSpec) -> int | None:
    return spec.numa[0] if spec.numa else None


def _nics(devices: Sequence[DeviceSpec], used: set[tuple[int, int]]) -> list[DeviceTreeSpec]:
    """A PF per PCI bus carrying VF device ids, at ``<bus>:00.0`` (or the next free function)."""
    groups: dict[tuple[int, int], dict[str, DeviceSpec]] = {}
    for dev in devices:
        parts = pci_address(dev.id)
        if parts is None:
            continue
        domain, bus, _, _ = parts
        groups.setdefault((domain, bus), {}).setdefault(format_pci_address(*parts), dev)
    out: list[DeviceTreeSpec] = []
    for (domain, bus), vfs in groups.items():
        used.update({(domain, bus), (domain, bus - 1)})
        free = (
            format_pci_address(domain, bus, slot, fn)
            for slot in range(32)
            for fn in range(8)
            if format_pci_address(domain, bus, slot, fn) not in vfs
        )
        pf_address = next(free, None)
        if pf_address is None:
            raise ValueError(f"no PCI function left for the PF on bus {bus:02x}")
        first = next(iter(vfs.values()))
        vendor = first.resource.split("/", 1)[0]
        mellanox = vendor not in ("intel.com",)
        no_netdev = any(word in first.resource for word in ("dpdk", "vfio"))
        out.append(
            NicPf(
                address=pf_address,
                interface=interface_name(pf_address),
                numa=_numa(first),
                driver="mlx5_core" if mellanox else "ice",
                vendor_id="0x15b3" if mellanox else "0x8086",
                device_id="0x101d" if mellanox else "0x159b",
                stats=_stats(pf_address),
                vfs=tuple(
                    NicVf(
                        address=address,
                        interface=None if no_netdev else interface_name(address),
                        driver="vfio-pci" if no_netdev else "mlx5_core" if mellanox else "iavf",
                        vendor_id="0x15b3" if mellanox else "0x8086",
                        device_id="0x101e" if mellanox else "0x1889",
                        stats=_stats(address, active=dev.healthy),
                        operstate="up" if dev.healthy else "down",
                        carrier=dev.healthy,
                        speed_mbps=25000 if dev.healthy else None,
                    )
                    for address, dev in sorted(vfs.items())
                ),
            )
        )
    return out


def _gpus(
    devices: Sequence[DeviceSpec], used: set[tuple[int, int]], numa_nodes: int
) -> list[DeviceTreeSpec]:
    """An NVIDIA function per GPU UUID, on a bus in its NUMA node's share of 0x10..0xef."""
    gpus: dict[str, DeviceSpec] = {}
    for dev in devices:
        if dev.resource.startswith("nvidia.com/") and dev.id.startswith("GPU-"):
            gpus.setdefault(dev.id.split("::", 1)[0], dev)  # time-slicing: "<uuid>::<n>"
    span = 0xE0 // max(numa_nodes, 1)
    out: list[DeviceTreeSpec] = []
    for dev in gpus.values():
        numa = _numa(dev)
        lo = 0x10 + span * min(numa or 0, max(numa_nodes - 1, 0))
        strided = range(lo + 8, lo + span, 0x12)
        candidates = [*strided, *range(lo, lo + span), *range(2, 0x100)]
        bus = next((b for b in candidates if (0, b) not in used and (0, b - 1) not in used), None)
        if bus is None:
            raise ValueError("no free PCI bus left for another GPU")
        used.update({(0, bus), (0, bus - 1)})
        out.append(NvidiaGpu(address=format_pci_address(0, bus, 0, 0), numa=numa))
    return out


def devices_for_scenario(scenario: Scenario | NodeSpec) -> list[DeviceTreeSpec]:
    """A plausible device tree for a scenario's devices, the same on every call.

    Device ids that are PCI addresses (``0000:af:02.1``) become SR-IOV VFs with
    netdevs named as systemd names them (``enp175s2f1``), under one PF per bus at
    ``<bus>:00.0`` (or the first function the VFs leave free); a VF of an unhealthy
    device has its link down. ``nvidia.com/*`` GPU UUIDs (time-sliced replicas
    ``<uuid>::<n>`` count once) become NVIDIA 3D controllers on the device's NUMA
    node. ``lo`` is there too; every other device is skipped.
    """
    node = scenario.node if isinstance(scenario, Scenario) else scenario
    used: set[tuple[int, int]] = set()
    nics = _nics(node.devices, used)
    gpus = _gpus(node.devices, used, node.numa_nodes)
    return [VirtualNic("lo", stats=_stats("lo")), *nics, *gpus]
