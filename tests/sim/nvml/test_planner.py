"""The NVML planner (nvml_for_devices: kubelet device ids, determinism, animation)
and the fake's with_gpus builder."""

from __future__ import annotations

import pynvml
import pytest

from podres_exporter.core.telemetry import GpuInventory
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim.nvml import FakeNvml, nvml_for_devices

WHOLE = ["GPU-f38b2ffc-80a4-4f5a-91c9-bc701e7ea419", "GPU-e5121482-3929-4d22-a255-accb1a466884"]
MIGS = [f"MIG-6513270e-269e-4d37-b2a7-4de452e6b4{i:02d}" for i in range(9)]
SHARED = "GPU-7dabe929-c4a3-44bf-86cd-75e9bb049a79"

RESOURCES = {
    "nvidia.com/gpu": [(WHOLE[0], (0,)), (WHOLE[1], (1,))],
    "nvidia.com/mig-1g.10gb": [(m, (1,)) for m in MIGS],
    "nvidia.com/gpu.shared": [(f"{SHARED}::{i}", (0,)) for i in range(4)],
    "intel.com/sriov_netdevice": [("0000:af:02.0", (1,))],
}


class Clock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_nvml_for_devices_maps_ids_to_gpus_and_mig_devices() -> None:
    """GPU ids become GPUs, shared ids their GPU once, MIG ids MIG devices on parents."""
    inv = NvmlBackend(nvml_for_devices(RESOURCES, seed=1)).read()
    assert inv.available
    gpus = {g.uuid: g for g in inv.gpus}
    whole = {g.uuid for g in inv.gpus if g.parent_uuid is None and not g.mig_enabled}
    assert whole == {*WHOLE, SHARED}
    migs = [g for g in inv.gpus if g.parent_uuid is not None]
    assert sorted(g.uuid for g in migs) == sorted(MIGS)
    parents = {g.parent_uuid for g in migs}
    assert len(parents) == 2  # nine 1g instances need two 7-slice GPUs
    for parent in parents:
        assert parent is not None
        assert gpus[parent].mig_enabled is True
        assert gpus[parent].numa_node == 1
    assert all(g.memory_total_bytes and g.memory_total_bytes < 11 * 10**9 for g in migs)
    assert all(g.name.endswith("MIG 1g.10gb") for g in migs)
    assert len({(g.parent_uuid, g.gpu_instance_id) for g in migs}) == len(MIGS)
    assert gpus[WHOLE[0]].numa_node == 0
    assert gpus[WHOLE[1]].numa_node == 1
    assert len(gpus[SHARED].processes) == 4  # one process per share


def test_nvml_for_devices_orders_gpus_by_numa_on_distinct_pci_buses() -> None:
    """NVML indexes follow PCI order, NUMA node 0 first, every GPU on its own bus."""
    inv = NvmlBackend(nvml_for_devices(RESOURCES)).read()
    boards = [g for g in inv.gpus if g.parent_uuid is None]
    assert [g.index for g in boards] == list(range(len(boards)))
    assert [g.numa_node for g in boards] == sorted(g.numa_node or 0 for g in boards)
    buses = [g.pci_bus_id or "" for g in boards]
    assert buses == sorted(buses)
    assert len(set(buses)) == len(buses)


def test_nvml_for_devices_reads_older_and_gke_ids() -> None:
    """MIG-GPU-<uuid>/<gi>/<ci>, nvidia<N>, nvidia<N>/vgpu<k> and nvidia<N>/gi<k> ids."""
    parent = "GPU-11111111-2222-4333-8444-555555555555"
    fake = nvml_for_devices(
        {
            "nvidia.com/mig-3g.40gb": [(f"MIG-{parent}/2/0", 0), (f"MIG-{parent}/1/0", 0)],
            "nvidia.com/gpu": [("nvidia0", None), ("nvidia1/vgpu0", None), ("nvidia1/vgpu1", None)],
            "nvidia.com/mig-1g.5gb": [("nvidia2/gi3", None)],
        }
    )
    inv = NvmlBackend(fake).read()
    migs = {g.uuid: g for g in inv.gpus if g.parent_uuid is not None}
    assert migs[f"MIG-{parent}/2/0"].parent_uuid == parent
    assert migs[f"MIG-{parent}/2/0"].gpu_instance_id == 2
    assert migs[f"MIG-{parent}/1/0"].gpu_instance_id == 1
    assert [g.gpu_instance_id for g in migs.values() if g.parent_uuid != parent] == [3]
    boards = [g for g in inv.gpus if g.parent_uuid is None]
    assert len(boards) == 4  # the legacy parent, nvidia0, nvidia1 (shared, once), nvidia2


def test_nvml_for_devices_reads_ids_as_the_exporter_does() -> None:
    """Ids resolve by ids.resolve: one GPU per canonical UUID, shares of it included;
    an id of no known shape is a GPU of its own, with a UUID derived from it."""
    fake = nvml_for_devices(
        {
            "nvidia.com/gpu": [(WHOLE[0].upper(), 0)],
            "nvidia.com/gpu.shared": [(f"{WHOLE[0]}::{i}", 0) for i in range(2)],
            "nvidia.com/other": [("GPU-not-a-uuid", 1), ("GPU-not-a-uuid::1", 1)],
        }
    )
    inv = NvmlBackend(fake).read()
    assert [g.uuid for g in inv.gpus if g.numa_node == 0] == [WHOLE[0]]
    (odd,) = [g for g in inv.gpus if g.numa_node == 1]
    assert odd.uuid.startswith("GPU-") and odd.uuid != "GPU-not-a-uuid"
    assert len(odd.processes) == 1  # one share seen


def test_nvml_for_devices_ignores_other_vendors() -> None:
    """Only nvidia.com resources make GPUs."""
    inv = NvmlBackend(nvml_for_devices({"amd.com/gpu": [("0000:c1:00.0", 0)]})).read()
    assert inv == GpuInventory(available=False, driver_version="550.54.15")


def test_nvml_for_devices_is_deterministic_per_seed() -> None:
    """The same ids and seed give the same readings; another seed other values."""

    def readings(seed: int) -> GpuInventory:
        backend = NvmlBackend(nvml_for_devices(RESOURCES, seed=seed))
        backend.read()
        return backend.read()

    assert readings(7) == readings(7)
    assert readings(7) != readings(8)


def test_animated_values_drift_and_energy_only_grows() -> None:
    """With a clock the fake steps itself: values move, energy never falls."""
    clock = Clock()
    fake = nvml_for_devices(RESOURCES, seed=3, clock=clock)
    backend = NvmlBackend(fake)
    energy: dict[str, float] = {}
    seen_power: dict[str, set[float | None]] = {}
    for _ in range(20):
        clock.now += 5
        for g in backend.read().gpus:
            if g.parent_uuid is not None:
                continue
            assert g.healthy
            assert g.energy_joules_total is not None
            assert g.energy_joules_total >= energy.get(g.uuid, 0.0)
            energy[g.uuid] = g.energy_joules_total
            seen_power.setdefault(g.uuid, set()).add(g.power_watts)
            assert g.temperature_celsius is not None
            assert 20 <= g.temperature_celsius <= 90
            if g.utilization_gpu_ratio is not None:
                assert 0 <= g.utilization_gpu_ratio <= 1
    assert all(len(p) > 1 for p in seen_power.values())


def test_animated_gpus_report_process_samples() -> None:
    """Busy animated GPUs have per-process SM shares at every read."""
    clock = Clock()
    backend = NvmlBackend(nvml_for_devices(RESOURCES, seed=3, clock=clock))
    for _ in range(3):
        clock.now += 2
        shared = next(g for g in backend.read().gpus if g.uuid == SHARED)
        assert len(shared.processes) == 4
        assert all(p.sm_ratio is not None for p in shared.processes)


def test_idle_animated_gpu_has_no_samples() -> None:
    """An animated GPU set idle keeps its processes but reports no SM shares."""
    clock = Clock()
    fake = nvml_for_devices(RESOURCES, seed=3, clock=clock)
    idle = fake.gpu(WHOLE[0])
    idle.load = 0.0
    backend = NvmlBackend(fake)
    backend.read()
    clock.now += 3
    reading = next(g for g in backend.read().gpus if g.uuid == WHOLE[0])
    assert reading.utilization_gpu_ratio == 0.0
    assert reading.clock_event_reasons == ("gpu_idle",)
    assert reading.processes
    assert all(p.sm_ratio is None for p in reading.processes)


def test_without_a_clock_nothing_moves() -> None:
    """Without a clock the fake changes only when told (step, mutation)."""
    fake = nvml_for_devices(RESOURCES, seed=3)
    backend = NvmlBackend(fake)
    first = backend.read()
    assert backend.read().gpus[0].energy_joules_total == first.gpus[0].energy_joules_total
    fake.step(10)
    moved = backend.read().gpus[0]
    assert moved.energy_joules_total is not None
    assert first.gpus[0].energy_joules_total is not None
    assert moved.energy_joules_total > first.gpus[0].energy_joules_total


def test_with_gpus_builds_idle_gpus() -> None:
    """with_gpus(n) makes n GPUs on distinct buses, split over two NUMA nodes."""
    inv = NvmlBackend(FakeNvml.with_gpus(4, power_usage_mw=90_000)).read()
    assert [g.index for g in inv.gpus] == [0, 1, 2, 3]
    assert [g.numa_node for g in inv.gpus] == [0, 0, 1, 1]
    assert len({g.pci_bus_id for g in inv.gpus}) == 4
    assert {g.power_watts for g in inv.gpus} == {90.0}


def test_add_gpu_rejects_duplicates_and_bad_addresses() -> None:
    """Builder mistakes fail loudly."""
    fake = FakeNvml()
    fake.add_gpu(WHOLE[0])
    with pytest.raises(ValueError, match="duplicate"):
        fake.add_gpu(WHOLE[0])
    with pytest.raises(ValueError, match="PCI"):
        fake.add_gpu(WHOLE[1], pci_bus_id="nowhere")


def test_mig_slots_are_limited() -> None:
    """A GPU takes at most max_mig_devices MIG devices."""
    fake = FakeNvml()
    gpu = fake.add_gpu(WHOLE[0])
    for i in range(7):
        gpu.add_mig(MIGS[i], i + 1)
    assert gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE
    with pytest.raises(ValueError, match="no free MIG slot"):
        gpu.add_mig(MIGS[7], 8)


def test_hang_blocks_every_call_until_release() -> None:
    """hang(): NVML calls block (blocked counts them) until release()."""
    import threading

    fake = nvml_for_devices(RESOURCES, seed=1)
    fake.nvmlInit()
    fake.hang()
    assert fake.hanging
    counts: list[int] = []
    t = threading.Thread(target=lambda: counts.append(fake.nvmlDeviceGetCount()))
    t.start()
    while not fake.blocked:
        t.join(0.01)
    assert t.is_alive() and not counts
    fake.release()
    t.join(5)
    assert counts == [len(fake.gpus)] and fake.blocked == 0 and not fake.hanging
