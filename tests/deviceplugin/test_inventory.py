"""Advertised devices and their health: every rule, and every recovery."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pynvml
import pytest

from podres_exporter.core.ids import replica_id, split_replica
from podres_exporter.core.telemetry import GpuInventory, GpuReading, NetReading, SysfsDevices
from podres_exporter.deviceplugin import inventory as inv
from podres_exporter.deviceplugin.config import PluginConfig, ResourceConfig, parse_config
from podres_exporter.deviceplugin.metrics import PluginMetrics
from podres_exporter.deviceplugin.monitor import Discoverer, Monitor
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim.nvml import FakeNvml
from tests.deviceplugin.support import VF_ADDRESSES, remove_function, write_sysfs

GPU_A = "GPU-0c5a1f2e-8a7f-4c1e-9b3d-111111111111"
GPU_B = "GPU-0c5a1f2e-8a7f-4c1e-9b3d-222222222222"
GPU_M = "GPU-0c5a1f2e-8a7f-4c1e-9b3d-333333333333"
MIG_1 = "MIG-7e1d0c2b-1111-4a2b-8c3d-aaaaaaaaaaaa"
MIG_2 = "MIG-7e1d0c2b-2222-4a2b-8c3d-bbbbbbbbbbbb"
GIB = 1 << 30


def resource(name: str = "example.com/r", **fields: Any) -> ResourceConfig:
    discover = fields.pop("discover")
    data = {"name": name, "discover": discover, **fields}
    return parse_config({"resource": [data]}).resources[0]


class Checker:
    """Runs inventory.update repeatedly for one resource at a settable time."""

    def __init__(self, res: ResourceConfig, xid_for: float = 300.0) -> None:
        self.res = res
        self.state = inv.initial_state(res)
        self.now = 100.0
        self.xid_for = xid_for
        self.changes: tuple[inv.HealthChange, ...] = ()

    def __call__(self, discovery: inv.Discovery) -> dict[str, str]:
        self.state, self.changes = inv.update(
            self.res, discovery, self.state, now=self.now, xid_unhealthy_for_s=self.xid_for
        )
        return {d.id: d.health for d in self.state.inventory.devices}


def gpus(*readings: GpuReading, available: bool = True) -> inv.Discovery:
    return inv.Discovery(gpus=GpuInventory(available=available, gpus=readings))


def gpu(uuid: str = GPU_A, **kw: Any) -> GpuReading:
    return GpuReading(uuid=uuid, index=0, numa_node=kw.pop("numa_node", 0), **kw)


def xids(**counts: int) -> Any:
    return MappingProxyType({int(k[1:]): v for k, v in counts.items()})


# --------------------------------------------------------------------------- nvml


def test_whole_gpus_are_advertised_by_uuid_with_their_numa_node() -> None:
    """Each whole GPU is one device, id = its UUID, topology = its NUMA node."""
    check = Checker(resource(discover={"kind": "nvml"}))
    assert check(gpus(gpu(GPU_A), gpu(GPU_B, numa_node=1))) == {GPU_A: "Healthy", GPU_B: "Healthy"}
    devices = check.state.inventory.devices
    assert [(d.id, d.numa_nodes) for d in devices] == [(GPU_A, (0,)), (GPU_B, (1,))]
    assert all(c.new for c in check.changes)


def test_a_gpu_that_stops_answering_is_unhealthy_until_it_answers_again() -> None:
    """GpuReading.healthy False -> Unhealthy (reason kept); healthy again on recovery."""
    check = Checker(resource(discover={"kind": "nvml"}))
    check(gpus(gpu()))
    assert check(gpus(gpu(healthy=False, error="GPU is lost"))) == {GPU_A: "Unhealthy"}
    assert check.state.inventory.hardware[GPU_A].reason == "GPU is lost"
    assert [(c.hardware, c.healthy) for c in check.changes] == [(GPU_A, False)]
    assert check(gpus(gpu())) == {GPU_A: "Healthy"}
    assert [(c.hardware, c.healthy) for c in check.changes] == [(GPU_A, True)]


def test_a_critical_xid_makes_the_gpu_unhealthy_for_the_window_then_it_recovers() -> None:
    """A rising critical XID count -> Unhealthy until the window passes without a new one."""
    check = Checker(resource(discover={"kind": "nvml"}), xid_for=60.0)
    check(gpus(gpu()))
    check.now += 1
    assert check(gpus(gpu(xid_errors_total=xids(x79=1)))) == {GPU_A: "Unhealthy"}
    assert check.state.inventory.hardware[GPU_A].reason == "critical XID 79"
    check.now += 40
    assert check(gpus(gpu(xid_errors_total=xids(x79=1)))) == {GPU_A: "Unhealthy"}
    check.now += 10
    assert check(gpus(gpu(xid_errors_total=xids(x79=2)))) == {GPU_A: "Unhealthy"}  # a new one
    check.now += 59
    assert check(gpus(gpu(xid_errors_total=xids(x79=2)))) == {GPU_A: "Unhealthy"}
    check.now += 2
    assert check(gpus(gpu(xid_errors_total=xids(x79=2)))) == {GPU_A: "Healthy"}


@pytest.mark.parametrize("xid", sorted(inv.APPLICATION_XIDS))
def test_application_xids_do_not_make_a_gpu_unhealthy(xid: int) -> None:
    """XIDs 13, 31, 43, 45, 68, 109 are the application's fault, not the GPU's."""
    check = Checker(resource(discover={"kind": "nvml"}))
    check(gpus(gpu()))
    assert check(gpus(gpu(xid_errors_total=MappingProxyType({xid: 5})))) == {GPU_A: "Healthy"}


def test_xids_seen_before_the_first_check_count() -> None:
    """The backend counts XIDs from its start: a count at the first check is new."""
    check = Checker(resource(discover={"kind": "nvml"}))
    assert check(gpus(gpu(xid_errors_total=xids(x48=1)))) == {GPU_A: "Unhealthy"}


def test_nvml_unavailable_makes_known_gpus_unhealthy_and_recovers() -> None:
    """The driver going away keeps the GPUs advertised, Unhealthy; back when it returns."""
    check = Checker(resource(discover={"kind": "nvml"}))
    check(gpus(gpu()))
    gone = inv.Discovery(gpus=GpuInventory(available=False, error="driver unloaded"))
    assert check(gone) == {GPU_A: "Unhealthy"}
    assert "driver unloaded" in (check.state.inventory.hardware[GPU_A].reason or "")
    assert check(gpus(gpu())) == {GPU_A: "Healthy"}


def test_replicas_are_advertised_as_numbered_ids_sharing_health() -> None:
    """replicas = 3 advertises <uuid>::0..2, all unhealthy with their GPU."""
    check = Checker(resource(discover={"kind": "nvml"}, replicas=3))
    assert list(check(gpus(gpu()))) == [f"{GPU_A}::0", f"{GPU_A}::1", f"{GPU_A}::2"]
    assert set(check(gpus(gpu(healthy=False))).values()) == {"Unhealthy"}


def mig_board() -> FakeNvml:
    fake = FakeNvml()
    fake.add_gpu(GPU_A, numa_node=0)
    fake.add_mig_gpu(GPU_M, [(MIG_1, 7, 0, 10 * GIB), (MIG_2, 3, 0, 20 * GIB)], numa_node=1)
    return fake


def test_mig_devices_by_profile_through_the_real_backend() -> None:
    """mig = true advertises MIG UUIDs (of one profile when asked); whole-GPU rules skip
    the MIG-enabled board."""
    backend = NvmlBackend(mig_board())
    reading = inv.Discovery(gpus=backend.read())
    whole = Checker(resource(discover={"kind": "nvml"}))
    every_mig = Checker(resource(discover={"kind": "nvml", "mig": True}))
    small = Checker(resource(discover={"kind": "nvml", "mig": True, "profile": "1g.10gb"}))
    assert list(whole(reading)) == [GPU_A]
    assert set(every_mig(reading)) == {MIG_1, MIG_2}
    assert list(small(reading)) == [MIG_1]
    hw = small.state.inventory.hardware[MIG_1]
    assert (hw.gpu_uuid, hw.topology_key, hw.numa_nodes) == (MIG_1, GPU_M, (1,))


def test_a_critical_xid_on_the_board_makes_its_mig_devices_unhealthy() -> None:
    """MIG devices share their board's XIDs (NVML counts them on the parent)."""
    fake = mig_board()
    backend = NvmlBackend(fake)
    check = Checker(resource(discover={"kind": "nvml", "mig": True}), xid_for=10.0)
    check(inv.Discovery(gpus=backend.read()))
    fake.emit_xid(MIG_1, 94)
    assert check(inv.Discovery(gpus=backend.read())) == {MIG_1: "Unhealthy", MIG_2: "Unhealthy"}
    check.now += 11
    assert check(inv.Discovery(gpus=backend.read())) == {MIG_1: "Healthy", MIG_2: "Healthy"}


def test_a_broken_gpu_through_the_real_backend_recovers() -> None:
    """A GPU NVML reports lost is Unhealthy; healed, it is Healthy again."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A)
    backend = NvmlBackend(fake)
    check = Checker(resource(discover={"kind": "nvml"}))
    check(inv.Discovery(gpus=backend.read()))
    fake.break_gpu(GPU_A, pynvml.NVML_ERROR_GPU_IS_LOST)
    assert check(inv.Discovery(gpus=backend.read())) == {GPU_A: "Unhealthy"}
    fake.heal_gpu(GPU_A)
    assert check(inv.Discovery(gpus=backend.read())) == {GPU_A: "Healthy"}


def test_gpus_absent_at_start_advertise_nothing_then_appear() -> None:
    """No driver at start: an empty list; GPUs that show up later are advertised."""
    check = Checker(resource(discover={"kind": "nvml"}))
    assert check(inv.Discovery(gpus=GpuInventory(available=False))) == {}
    assert check.state.inventory.devices == ()
    assert check(gpus(gpu())) == {GPU_A: "Healthy"}


# ---------------------------------------------------------------------------- pci


def vf_rule() -> ResourceConfig:
    return resource(
        "intel.com/vf", discover={"kind": "pci", "vendor": "0x8086", "device": "0x1889"}
    )


def sysfs_look(root: Path, vfio: bool = False) -> inv.Discovery:
    config = PluginConfig(resources=(vf_rule(),))
    return Discoverer(
        config, sysfs_root=str(root), dev_root="/nonexistent", gpu_backend=None
    ).discover()


def test_pci_functions_matching_the_rule_are_advertised_by_address(tmp_path: Path) -> None:
    """The VFs (not the PF) are advertised by PCI address, on the NIC's NUMA node."""
    write_sysfs(tmp_path, vfio=True)
    check = Checker(vf_rule())
    assert check(sysfs_look(tmp_path)) == dict.fromkeys(VF_ADDRESSES, "Healthy")
    hw = check.state.inventory.hardware["0000:af:02.1"]
    assert (hw.driver, hw.iommu_group, hw.numa_nodes) == ("vfio-pci", "41", (0,))


def test_a_function_that_left_sysfs_stays_advertised_unhealthy_until_it_returns(
    tmp_path: Path,
) -> None:
    """A vanished PCI function is Unhealthy (not dropped); Healthy again when back."""
    write_sysfs(tmp_path)
    check = Checker(vf_rule())
    check(sysfs_look(tmp_path))
    remove_function(tmp_path, "0000:af:02.2")
    health = check(sysfs_look(tmp_path))
    assert health["0000:af:02.2"] == "Unhealthy"
    assert sum(h == "Healthy" for h in health.values()) == 3
    write_sysfs(tmp_path)
    assert check(sysfs_look(tmp_path)) == dict.fromkeys(VF_ADDRESSES, "Healthy")


def test_pci_hardware_absent_at_start_is_an_empty_list(tmp_path: Path) -> None:
    """A rule that matches nothing advertises no devices (and is watched)."""
    write_sysfs(tmp_path)
    check = Checker(resource(discover={"kind": "pci", "vendor": "0x15b3"}))
    assert check(sysfs_look(tmp_path)) == {}


# ------------------------------------------------------------------------- netdev


def netdevs(*readings: NetReading) -> inv.Discovery:
    return inv.Discovery(devices=SysfsDevices(net=readings))


def test_an_interface_with_carrier_down_is_unhealthy_and_recovers() -> None:
    """Carrier up -> Healthy; down or unreadable -> Unhealthy; up again -> Healthy."""
    check = Checker(resource(discover={"kind": "netdev", "pattern": "ens*"}))
    up = NetReading("ens1", carrier=True, operstate="up")
    other = NetReading("eth0", carrier=True)
    assert check(netdevs(up, other)) == {"ens1": "Healthy"}
    assert check(netdevs(NetReading("ens1", carrier=False, operstate="down"))) == {
        "ens1": "Unhealthy"
    }
    assert check(netdevs(NetReading("ens1", carrier=None))) == {"ens1": "Unhealthy"}
    assert check(netdevs(up)) == {"ens1": "Healthy"}
    assert check(netdevs()) == {"ens1": "Unhealthy"}  # the interface vanished


def test_netdev_discovery_reads_the_numa_node_of_the_interface(tmp_path: Path) -> None:
    """A netdev rule reads only the matching interfaces, with their PCI NUMA node."""
    write_sysfs(tmp_path, down=("0000:af:02.3",))
    res = resource(discover={"kind": "netdev", "pattern": "enp175s2f*"})
    discoverer = Discoverer(
        PluginConfig(resources=(res,)), sysfs_root=str(tmp_path), dev_root="/x", gpu_backend=None
    )
    check = Checker(res)
    assert check(discoverer.discover()) == {
        "enp175s2f0": "Healthy",
        "enp175s2f1": "Healthy",
        "enp175s2f2": "Healthy",
        "enp175s2f3": "Unhealthy",
    }
    assert check.state.inventory.hardware["enp175s2f1"].numa_nodes == (0,)


# ---------------------------------------------------------------------------- dev


def test_a_device_node_that_vanished_is_unhealthy_until_it_is_back(tmp_path: Path) -> None:
    """dev rules advertise nodes by file name; a vanished node is Unhealthy, then back."""
    (tmp_path / "dri").mkdir()
    for name in ("renderD128", "renderD129", "card0"):
        (tmp_path / "dri" / name).touch()
    res = resource(discover={"kind": "dev", "glob": "dri/renderD*"})
    discoverer = Discoverer(
        PluginConfig(resources=(res,)), sysfs_root="/x", dev_root=str(tmp_path), gpu_backend=None
    )
    check = Checker(res)
    assert check(discoverer.discover()) == {"renderD128": "Healthy", "renderD129": "Healthy"}
    assert check.state.inventory.hardware["renderD128"].dev_path == "dri/renderD128"
    (tmp_path / "dri" / "renderD129").unlink()
    assert check(discoverer.discover())["renderD129"] == "Unhealthy"
    (tmp_path / "dri" / "renderD129").touch()
    assert check(discoverer.discover())["renderD129"] == "Healthy"


# ---------------------------------------------------------------------------- ids


@pytest.mark.parametrize(
    ("key", "replica"),
    [("x" * 63, None), ("x" * 64, None), ("y" * 200, 7), (GPU_A, 1023), ("a", None)],
)
def test_ids_never_exceed_63_characters_and_stay_distinct(key: str, replica: int | None) -> None:
    """Long ids are shortened with a hash; short ones are left alone."""
    made = inv.device_id(key, replica)
    assert len(made) <= inv.MAX_ID_LENGTH
    suffix = "" if replica is None else f"::{replica}"
    if len(key) + len(suffix) <= inv.MAX_ID_LENGTH:
        assert made == key + suffix
    else:
        assert made != inv.device_id(key[:-1] + "z", replica)
        assert made.endswith(suffix)


def test_a_shortened_id_no_longer_names_its_device() -> None:
    """A replica id is ``<key>::n`` (ids.replica_id); shortened, its base is not the key."""
    assert inv.device_id(GPU_A, 3) == replica_id(GPU_A, 3)
    long_key = "k" * 70
    base, replica = split_replica(inv.device_id(long_key, 3))
    assert replica == 3
    assert base != long_key
    assert len(base) == inv.MAX_ID_LENGTH - len("::3")


def test_the_monitor_publishes_only_changes_and_counts_devices(tmp_path: Path) -> None:
    """Monitor.check publishes a new inventory to the board only when it changed."""
    write_sysfs(tmp_path)
    config = PluginConfig(resources=(vf_rule(),))
    metrics = PluginMetrics("test", ["intel.com/vf"])
    discoverer = Discoverer(config, sysfs_root=str(tmp_path), dev_root="/x", gpu_backend=None)
    monitor = Monitor(config, discoverer, metrics)
    board = monitor.boards["intel.com/vf"]
    monitor.check()
    version, inventory = board.current()
    assert inventory.counts() == (4, 0)
    monitor.check()
    assert board.current()[0] == version
    remove_function(tmp_path, "0000:af:02.0")
    monitor.check()
    assert board.current()[0] == version + 1
    assert board.current()[1].counts() == (3, 1)
    value = metrics.registry.get_sample_value(
        "podres_plugin_devices", {"resource": "intel.com/vf", "health": "Unhealthy"}
    )
    assert value == 1
