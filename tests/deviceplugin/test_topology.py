"""NvmlBackend.topology against FakeNvml: PCIe levels, NVLink, lost GPUs, no driver."""

from __future__ import annotations

import pynvml

from podres_exporter.sources.gpu import NvmlBackend
from podres_sim.nvml import FakeNvml

GPU = [f"GPU-0c5a1f2e-8a7f-4c1e-9b3d-{i:012d}" for i in range(4)]


def four_gpus() -> FakeNvml:
    fake = FakeNvml()
    for i, uuid in enumerate(GPU):
        fake.add_gpu(uuid, numa_node=0 if i < 2 else 1)
    return fake


def test_pcie_levels_come_from_the_common_ancestor_in_both_orders() -> None:
    """Each pair gets NVML's common-ancestor level, keyed both ways."""
    fake = four_gpus()
    fake.set_topology(GPU[0], GPU[1], pynvml.NVML_TOPOLOGY_SINGLE)
    topo = NvmlBackend(fake).topology()
    assert topo[(GPU[0], GPU[1])] == topo[(GPU[1], GPU[0])] == pynvml.NVML_TOPOLOGY_SINGLE
    assert topo[(GPU[2], GPU[3])] == pynvml.NVML_TOPOLOGY_NODE  # same NUMA node
    assert topo[(GPU[0], GPU[3])] == pynvml.NVML_TOPOLOGY_SYSTEM
    assert len(topo) == 12


def test_nvlinked_pairs_are_closer_than_any_pcie_path() -> None:
    """A pair with N active NVLinks has distance -N; more links, closer."""
    fake = four_gpus()
    fake.connect_nvlink(GPU[0], GPU[3], links=2)
    fake.connect_nvlink(GPU[1], GPU[2], links=12)
    fake.gpu(GPU[0]).nvlinks.append(None)  # an inactive link is not counted
    topo = NvmlBackend(fake).topology()
    assert topo[(GPU[0], GPU[3])] == topo[(GPU[3], GPU[0])] == -2
    assert topo[(GPU[1], GPU[2])] == -12
    assert topo[(GPU[0], GPU[1])] == pynvml.NVML_TOPOLOGY_NODE


def test_a_lost_gpu_is_left_out_and_nothing_raises() -> None:
    """A GPU that does not answer has no pairs; the others keep theirs."""
    fake = four_gpus()
    fake.break_gpu(GPU[3], handle=True)
    topo = NvmlBackend(fake).topology()
    assert all(GPU[3] not in pair for pair in topo)
    assert (GPU[0], GPU[1]) in topo


def test_no_driver_means_no_topology() -> None:
    """Without NVML the topology is empty (and a closed backend's too)."""
    assert dict(NvmlBackend(FakeNvml(driver_missing=True)).topology()) == {}
    backend = NvmlBackend(four_gpus())
    backend.close()
    assert dict(backend.topology()) == {}


def test_boards_without_nvlink_ask_once_per_gpu() -> None:
    """NOT_SUPPORTED on the first link stops the NVLink scan of that GPU."""
    fake = four_gpus()
    NvmlBackend(fake).topology()
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 4
