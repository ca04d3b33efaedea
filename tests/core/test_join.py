"""The pure join: telemetry matched to holders, shared devices once, ids counted."""

from __future__ import annotations

from types import MappingProxyType

from podres_exporter.core.accounting import account
from podres_exporter.core.identity import DeviceIdentity
from podres_exporter.core.ids import Kind
from podres_exporter.core.join import join
from podres_exporter.core.model import (
    Allocatable,
    ApiVersion,
    ContainerAlloc,
    DeviceRef,
    Holder,
    KubeletReading,
    MemoryBlock,
    NodeTopology,
    PodAlloc,
    Support,
)
from podres_exporter.core.telemetry import (
    CgroupRef,
    ContainerIndex,
    CpuTimes,
    GpuInventory,
    GpuProcess,
    GpuReading,
    NetReading,
    PciReading,
    SysfsDevices,
    Telemetry,
)

U1 = "GPU-11111111-1111-1111-1111-111111111111"
U2 = "GPU-22222222-2222-2222-2222-222222222222"
M1 = "MIG-33333333-3333-3333-3333-333333333333"
VF = "0000:af:02.1"
TOPO = NodeTopology(frozenset(range(4)), MappingProxyType({0: 0, 1: 0, 2: 1, 3: 1}))


def pod(name: str, *containers: ContainerAlloc) -> PodAlloc:
    return PodAlloc("ns", name, containers)


def dev(resource: str, device_id: str, numa: int | None = 0) -> DeviceRef:
    return DeviceRef(resource, device_id, None if numa is None else (numa,))


def reading(*pods: PodAlloc, allocatable: tuple[DeviceRef, ...] = ()) -> KubeletReading:
    return KubeletReading(
        ApiVersion.V1, pods, Allocatable(frozenset(range(4)), allocatable), Support.SERVED, 0.0
    )


def gpus(*readings: GpuReading) -> GpuInventory:
    return GpuInventory(available=True, driver_version="550.54", gpus=readings)


def run(r: KubeletReading, t: Telemetry, **kw: object):
    return join(account(r, TOPO), r, TOPO, t, now=100.0, **kw)  # type: ignore[arg-type]


def test_whole_gpu_has_its_single_holder() -> None:
    """A GPU held by one container carries that container; a free GPU carries none."""
    r = reading(pod("a", ContainerAlloc("c", devices=(dev("nvidia.com/gpu", U1),))))
    j = run(r, Telemetry(gpus=gpus(GpuReading(U1, 0), GpuReading(U2, 1))))
    held = {g.gpu.uuid: g.held.single for g in j.gpus}
    assert held == {U1: Holder("ns", "a", "c"), U2: None}


def test_time_sliced_gpu_is_one_shared_row() -> None:
    """Replicas ::0 and ::1 of one GPU in two pods: one row, shared, no single holder."""
    r = reading(
        pod("a", ContainerAlloc("c", devices=(dev("nvidia.com/gpu.shared", f"{U1}::0"),))),
        pod("b", ContainerAlloc("c", devices=(dev("nvidia.com/gpu.shared", f"{U1}::1"),))),
    )
    j = run(r, Telemetry(gpus=gpus(GpuReading(U1, 0))))
    assert len(j.gpus) == 1
    row = j.gpus[0]
    assert row.held.shared and row.held.single is None
    assert [h.pod for h in row.held.holders] == ["a", "b"]
    assert all(x.matched and x.physical_id == U1 for x in j.resolutions)


def test_mig_by_uuid_legacy_id_and_gke_index() -> None:
    """MIG UUIDs, MIG-GPU-<uuid>/gi/ci and nvidia<N> all find their NVML device."""
    mig = GpuReading(M1, 0, parent_uuid=U1, gpu_instance_id=1, compute_instance_id=0)
    r = reading(
        pod("a", ContainerAlloc("c", devices=(dev("nvidia.com/mig-1g.10gb", M1),))),
        pod("b", ContainerAlloc("c", devices=(dev("nvidia.com/mig-1g.10gb", f"MIG-{U1}/1/0"),))),
        pod("g", ContainerAlloc("c", devices=(dev("nvidia.com/gpu", "nvidia1"),))),
    )
    j = run(r, Telemetry(gpus=gpus(GpuReading(U1, 0, mig_enabled=True), mig, GpuReading(U2, 1))))
    by = {g.gpu.uuid: [h.pod for h in g.held.holders] for g in j.gpus}
    assert by == {U1: [], M1: ["a", "b"], U2: ["g"]}


def test_sriov_vf_matches_pci_and_its_interface() -> None:
    """A VF's PCI address gives the PCI row and its network interface the same holder."""
    r = reading(pod("nf", ContainerAlloc("dp", devices=(dev("intel.com/sriov", VF, 1),))))
    devices = SysfsDevices(
        pci=(PciReading(VF, numa_node=1, net_interfaces=("ens2f0v1",)), PciReading("0000:00:1f.0")),
        net=(
            NetReading("ens2f0v1", pci_address=VF, rx_bytes=10),
            NetReading("eth0", pci_address="0000:00:03.0"),
        ),
    )
    j = run(r, Telemetry(devices=devices))
    assert [(p.pci.address, p.held.single) for p in j.pci] == [(VF, Holder("ns", "nf", "dp"))]
    assert [(n.net.interface, n.held.single) for n in j.net] == [
        ("ens2f0v1", Holder("ns", "nf", "dp"))
    ]


def test_unknown_ids_are_kept_and_unmatched() -> None:
    """An id of no known shape, or with no telemetry, resolves unmatched: never dropped."""
    r = reading(
        pod("vm", ContainerAlloc("c", devices=(dev("devices.kubevirt.io/kvm", "kvm-3", None),))),
        allocatable=(dev("nvidia.com/gpu", U2),),
    )
    j = run(r, Telemetry(gpus=gpus()))
    res = {x.device_id: (x.kind, x.matched) for x in j.resolutions}
    assert res == {"kvm-3": (Kind.UNKNOWN, False), U2: (Kind.GPU, False)}


def test_gpu_processes_per_holder_and_unattributed() -> None:
    """Per-process samples sum per holder; a PID of no holder of that GPU is unattributed."""
    cid_a, cid_x = "a" * 64, "f" * 64
    r = reading(
        pod("a", ContainerAlloc("c", devices=(dev("nvidia.com/gpu.shared", f"{U1}::0"),))),
        pod("b", ContainerAlloc("c", devices=(dev("nvidia.com/gpu.shared", f"{U1}::1"),))),
    )
    g = GpuReading(
        U1,
        0,
        processes=(
            GpuProcess(10, used_memory_bytes=100, sm_ratio=0.25),
            GpuProcess(11, used_memory_bytes=50, sm_ratio=0.5),
            GpuProcess(12, used_memory_bytes=7, sm_ratio=0.125),
            GpuProcess(13, used_memory_bytes=1),
        ),
    )
    t = Telemetry(
        gpus=gpus(g),
        pid_cgroups=MappingProxyType(
            {10: CgroupRef("u", cid_a), 11: CgroupRef("u", cid_a), 12: CgroupRef("v", cid_x)}
        ),
        containers=ContainerIndex(
            MappingProxyType({cid_a: Holder("ns", "a", "c"), cid_x: Holder("other", "x", "c")})
        ),
    )
    usage = {(u.holder.pod if u.holder else None): u for u in run(r, t).gpu_usage}
    assert set(usage) == {"a", None}
    assert (usage["a"].processes, usage["a"].used_memory_bytes, usage["a"].sm_ratio) == (
        2,
        150,
        0.75,
    )
    assert (usage[None].processes, usage[None].used_memory_bytes, usage[None].sm_ratio) == (
        2,
        8,
        0.125,
    )


def test_numa_alignment() -> None:
    """Same nodes for CPUs, devices and memory is aligned; a device on another node is not."""
    r = reading(
        pod(
            "ok",
            ContainerAlloc(
                "c",
                cpu_ids=frozenset({0}),
                devices=(dev("x/y", "d0", 0),),
                memory=(MemoryBlock("memory", 1, (0,)),),
            ),
        ),
        pod("bad", ContainerAlloc("c", cpu_ids=frozenset({1}), devices=(dev("x/y", "d1", 1),))),
        pod("none", ContainerAlloc("c")),
    )
    assert run(r, Telemetry()).numa_aligned == (
        (Holder("ns", "bad", "c"), False),
        (Holder("ns", "ok", "c"), True),
    )


def test_cpu_busy_and_shared_pool_ratio() -> None:
    """Exclusive CPUs get busy-seconds rows; the shared pool's ratio comes from two readings."""
    r = reading(pod("a", ContainerAlloc("c", cpu_ids=frozenset({0}))))
    before = Telemetry(
        cpu_times=CpuTimes({0: 5.0, 1: 10.0, 2: 0.0, 3: 0.0}, {0: 10.0, 1: 20.0, 2: 10.0, 3: 10.0})
    )
    now = Telemetry(
        cpu_times=CpuTimes({0: 9.0, 1: 11.0, 2: 4.0, 3: 4.0}, {0: 20.0, 1: 30.0, 2: 20.0, 3: 20.0})
    )
    j = run(r, now, previous=before)
    assert [(c.cpu, c.holder.pod, c.busy_seconds) for c in j.cpu_busy] == [(0, "a", 9.0)]
    assert [c.ratio for c in j.cpu_busy] == [0.4]  # (9 - 5) / (20 - 10)
    assert dict(j.shared_pool_busy_ratio) == {"0": 0.1, "1": 0.4}
    alone = run(r, now)
    assert not alone.shared_pool_busy_ratio, "one reading gives no ratio"
    assert [c.ratio for c in alone.cpu_busy] == [None]


def test_idle_held_gpu_keeps_its_start() -> None:
    """A held GPU at 0% is idle since first seen idle; busy again, it is no longer idle."""
    r = reading(pod("a", ContainerAlloc("c", devices=(dev("nvidia.com/gpu", U1),))))
    idle = Telemetry(gpus=gpus(GpuReading(U1, 0, utilization_gpu_ratio=0.0)))
    first = run(r, idle)
    assert [(i.device, i.idle_since) for i in first.idle] == [(U1, 100.0)]
    later = run(r, idle, idle_before=first.idle_since())
    assert later.idle[0].idle_since == 100.0
    busy = Telemetry(gpus=gpus(GpuReading(U1, 0, utilization_gpu_ratio=0.3)))
    assert not run(r, busy, idle_before=first.idle_since()).idle


def test_cpu_times_not_read_again_keep_the_last_busy_ratios() -> None:
    """With --source-interval.cpu longer than the poll, a poll whose telemetry carries the
    very same CPU times serves the shared pools' last busy ratios, not a 0/0 gap."""
    r = reading(pod("a", ContainerAlloc("c", cpu_ids=frozenset({0}))))
    before = Telemetry(
        cpu_times=CpuTimes({0: 5.0, 1: 10.0, 2: 0.0, 3: 0.0}, {0: 10.0, 1: 20.0, 2: 10.0, 3: 10.0})
    )
    now = Telemetry(
        cpu_times=CpuTimes({0: 9.0, 1: 11.0, 2: 4.0, 3: 4.0}, {0: 20.0, 1: 30.0, 2: 20.0, 3: 20.0})
    )
    first = run(r, now, previous=before)
    same = Telemetry(cpu_times=now.cpu_times)
    again = run(r, same, previous=now, before=first)
    assert dict(again.shared_pool_busy_ratio) == {"0": 0.1, "1": 0.4}
    assert [c.ratio for c in again.cpu_busy] == [0.4]
    assert [(c.cpu, c.busy_seconds) for c in again.cpu_busy] == [(0, 9.0)]


def test_an_unchanged_state_reuses_the_matching_and_a_new_device_redoes_it() -> None:
    """With the same kubelet state and the same devices read, the last join's matching
    (and its resolutions tuple) is reused; a device gone from the telemetry redoes it,
    and an id resolved before is not resolved again but matched anew."""
    r = reading(pod("a", ContainerAlloc("c", devices=(dev("nvidia.com/gpu", U1),))))
    both = Telemetry(gpus=gpus(GpuReading(U1, 0), GpuReading(U2, 1)))
    first = run(r, both)
    again = run(
        r, Telemetry(gpus=gpus(GpuReading(U1, 0), GpuReading(U2, 1))), before=first, unchanged=True
    )
    assert again.resolutions is first.resolutions
    assert again.matched is first.matched
    assert {g.gpu.uuid: g.held.single for g in again.gpus} == {U1: Holder("ns", "a", "c"), U2: None}
    gone = run(r, Telemetry(gpus=gpus(GpuReading(U2, 1))), before=again, unchanged=True)
    assert gone.resolutions is not first.resolutions
    assert [(x.device_id, x.matched) for x in gone.resolutions] == [(U1, False)]
    assert gone.matched is not None and first.matched is not None
    assert (
        gone.matched.resolved[("nvidia.com/gpu", U1)]
        is first.matched.resolved[("nvidia.com/gpu", U1)]
    )
    changed = run(r, both, before=first, unchanged=False)
    assert changed.resolutions is not first.resolutions and changed.resolutions == first.resolutions


def test_sysfs_rows_are_handed_on_while_sysfs_was_not_read_again() -> None:
    """With --source-interval.sysfs longer than the poll, a poll whose telemetry carries the
    very same sysfs reading (and an unchanged kubelet state) hands on the last join's PCI
    and network rows; a new sysfs reading makes new rows."""
    r = reading(pod("nf", ContainerAlloc("dp", devices=(dev("intel.com/sriov", VF, 1),))))
    devices = SysfsDevices(
        pci=(PciReading(VF, numa_node=1, net_interfaces=("ens2f0v1",)),),
        net=(NetReading("ens2f0v1", pci_address=VF, rx_bytes=10),),
    )
    t1 = Telemetry(devices=devices)
    first = run(r, t1)
    t2 = Telemetry(devices=devices, cpu_times=CpuTimes({0: 1.0}, {0: 2.0}))  # CPU times read
    again = run(r, t2, previous=t1, before=first, unchanged=True)
    assert again.net is first.net and again.pci is first.pci
    moved = SysfsDevices(
        pci=devices.pci, net=(NetReading("ens2f0v1", pci_address=VF, rx_bytes=99),)
    )
    t3 = Telemetry(devices=moved)
    fresh = run(r, t3, previous=t2, before=again, unchanged=True)
    assert fresh.net is not again.net
    assert [(n.net.rx_bytes, n.held.single) for n in fresh.net] == [(99, Holder("ns", "nf", "dp"))]


def test_every_id_of_a_gpu_resolves_to_the_same_gpu_identity() -> None:
    """UUID, GKE index and legacy MIG ids carry the NVML uuid and index; without NVML the
    id's own UUID or index; a PCI id its address."""
    mig = GpuReading(M1, 3, parent_uuid=U2, gpu_instance_id=1, compute_instance_id=0)
    r = reading(
        pod("a", ContainerAlloc("c", devices=(dev("nvidia.com/gpu", f"{U1}::2"),))),
        pod("b", ContainerAlloc("c", devices=(dev("nvidia.com/gpu", "nvidia0"),))),
        pod("m", ContainerAlloc("c", devices=(dev("nvidia.com/mig-1g.10gb", f"MIG-{U2}/1/0"),))),
        pod("v", ContainerAlloc("c", devices=(dev("intel.com/sriov", VF),))),
    )
    t = Telemetry(gpus=gpus(GpuReading(U1, 0), GpuReading(U2, 3, mig_enabled=True), mig))
    got = {x.device_id: x.identity for x in run(r, t).resolutions}
    assert got[f"{U1}::2"] == got["nvidia0"] == DeviceIdentity(uuid=U1, gpu="0")
    assert got[f"MIG-{U2}/1/0"] == DeviceIdentity(M1, "3", "1", "0")
    assert got[VF] == DeviceIdentity(address=VF)
    alone = {x.device_id: x.identity for x in run(r, Telemetry()).resolutions}
    assert alone[f"{U1}::2"] == DeviceIdentity(uuid=U1)
    assert alone["nvidia0"] == DeviceIdentity(gpu="0")
    assert alone[f"MIG-{U2}/1/0"] == DeviceIdentity(gpu_instance="1", compute_instance="0")


def test_an_idle_device_names_its_holders_kubelet_id_and_identity() -> None:
    """The idle series of a GPU carries the holder's (first) kubelet id and the GPU's labels."""
    ids = (dev("nvidia.com/gpu.shared", f"{U1}::1"), dev("nvidia.com/gpu.shared", f"{U1}::0"))
    r = reading(pod("a", ContainerAlloc("c", devices=ids)))
    t = Telemetry(gpus=gpus(GpuReading(U1, 5, utilization_gpu_ratio=0.0)))
    (idle,) = run(r, t).idle
    assert (idle.resource, idle.device_id) == ("nvidia.com/gpu.shared", f"{U1}::0")
    assert idle.identity == DeviceIdentity(uuid=U1, gpu="5")
