"""The simulated device manager: real v1beta1 gRPC with a fake device plugin on unix sockets."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from podres_exporter._generated.podresources.v1 import api_pb2, api_pb2_grpc
from podres_exporter.core.errors import AdmissionError, PreStartError, ScenarioError
from podres_exporter.core.kube import extended_resource_problem
from podres_sim import (
    ContainerSpec,
    DevicePluginsSpec,
    DeviceSpec,
    NodeSpec,
    PodSpec,
    Scenario,
    SimKubelet,
)
from podres_sim.kubelet.devicemanager import CHECKPOINT, PluginOptions, SimDeviceManager
from podres_sim.scenario import parse_scenario
from tests.sim.kubelet.plugin_fixture import Dev, FakePlugin, devs
from tests.support import wait_until

VF = "example.com/vf"
GPU = "example.com/gpu"


@pytest.fixture
def dp_dir(tmp_path: Path) -> Path:
    return tmp_path / "dp"


@pytest.fixture
def make_dm(dp_dir: Path) -> Iterator[Callable[..., SimDeviceManager]]:
    """Start SimDeviceManagers on dp_dir; stopped at teardown."""
    made: list[SimDeviceManager] = []

    def factory(**kwargs: Any) -> SimDeviceManager:
        dm = SimDeviceManager(dp_dir, **{"resource_grace_s": 300.0, **kwargs})
        made.append(dm)
        return dm.start()

    yield factory
    for dm in made:
        dm.stop(remove_socket=True)


@pytest.fixture
def make_plugin(dp_dir: Path) -> Iterator[Callable[..., FakePlugin]]:
    """Fake plugins on dp_dir (not started); stopped at teardown."""
    made: list[FakePlugin] = []

    def factory(*devices: Dev, resource: str = VF, **kwargs: Any) -> FakePlugin:
        plugin = FakePlugin(dp_dir, resource, devices, **kwargs)
        made.append(plugin)
        return plugin

    yield factory
    for p in made:
        p.stop()


def registered(dm: SimDeviceManager, resource: str = VF, allocatable: int | None = None) -> None:
    """Wait until the resource's plugin is connected (with that many healthy devices)."""
    assert dm.wait_for(
        lambda: (
            dm.connected(resource)
            and (allocatable is None or dm.allocatable(resource) == allocatable)
        ),
        5.0,
    ), (dm.devices(resource), dm.registrations)


def refused(plugin: FakePlugin) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        plugin.register()
    return info.value


# --------------------------------------------------------------------------- registration


def test_options_are_fetched_while_register_is_in_flight(make_dm, make_plugin):
    """GetDevicePluginOptions reaches the plugin before its Register call returns."""
    dm = make_dm()
    plugin = make_plugin(*devs("vf0"), pre_start_required=True).serve_and_register()
    registered(dm, allocatable=1)
    methods = plugin.methods()
    assert methods[:2] == ["Register:sent", "GetDevicePluginOptions"]
    assert plugin.calls_of("GetDevicePluginOptions")[0].register_in_flight
    assert methods.count("GetDevicePluginOptions") == 1
    assert methods.index("ListAndWatch") > methods.index("GetDevicePluginOptions")
    record = dm.registrations[-1]
    assert (record.resource, record.endpoint, record.result) == (VF, plugin.endpoint, "ok")
    opts = dm.options(VF)
    assert opts is not None and opts.pre_start_required
    assert not opts.get_preferred_allocation_available
    assert dm.endpoint(VF) == plugin.endpoint


def test_options_come_from_get_device_plugin_options(make_dm, make_plugin):
    """The options the plugin serves count, not those sent in RegisterRequest."""
    from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as dp

    dm = make_dm()
    plugin = make_plugin(*devs("vf0"), preferred_available=True)
    plugin.register_options = dp.DevicePluginOptions(pre_start_required=True)
    plugin.serve_and_register()
    registered(dm)
    opts = dm.options(VF)
    assert opts is not None
    assert opts.get_preferred_allocation_available and not opts.pre_start_required
    record = dm.registrations[-1]
    assert record.options == opts
    assert record.request_options == PluginOptions(pre_start_required=True)


def test_bad_version_is_refused(make_dm, make_plugin):
    """A version other than v1beta1 is refused before the plugin is dialled."""
    dm = make_dm()
    plugin = make_plugin(*devs("vf0"), version="v1beta2").start()
    err = refused(plugin)
    assert err.code() == grpc.StatusCode.UNKNOWN
    details = err.details() or ""
    assert "version" in details and "not supported" in details
    assert "GetDevicePluginOptions" not in plugin.methods()
    assert not dm.registrations[-1].ok
    assert dm.resources() == ()


@pytest.mark.parametrize(
    "name",
    [
        "vf",
        "kubernetes.io/vf",
        "gpu.kubernetes.io/vf",
        "requests.example.com/vf",
        "Example.com/vf",
        "example.com/-vf",
        "example.com/a/b",
        "example.com/" + "x" * 64,
        "example..com/vf",
    ],
)
def test_bad_resource_names_are_refused(make_dm, make_plugin, name):
    """Names that are not extended resource names are refused."""
    dm = make_dm()
    plugin = make_plugin(*devs("vf0"), resource=name, endpoint="p.sock").start()
    err = refused(plugin)
    assert err.details() == f"the ResourceName {name!r} is invalid"
    assert dm.registrations[-1].result == err.details()
    assert extended_resource_problem(name) is not None


def test_extended_resource_names():
    """Real plugins' resource names are extended resource names."""
    for name in (
        "example.com/vf",
        "nvidia.com/gpu",
        "gpu.intel.com/i915",
        "amd.com/gpu",
        "intel.com/sriov_netdevice",
        "nvidia.com/mig-1g.10gb",
    ):
        assert extended_resource_problem(name) is None, name


def test_endpoint_must_be_a_file_name_and_served(make_dm, make_plugin, dp_dir):
    """An endpoint outside the directory is refused; one nobody serves fails to dial."""
    dm = make_dm(dial_timeout_s=0.3)
    outside = make_plugin(*devs("vf0"), endpoint="../p.sock").start()
    assert "invalid endpoint" in (refused(outside).details() or "")
    silent = make_plugin(*devs("vf0"), endpoint="nobody.sock")
    started = time.monotonic()
    err = refused(silent)
    assert err.details() == "failed to dial device plugin: context deadline exceeded"
    assert time.monotonic() - started < 3
    assert [r.ok for r in dm.registrations] == [False, False]
    assert dm.resources() == ()


def test_refused_registrations(make_dm, make_plugin):
    """refuse_registrations: the next valid Register calls fail with the reason given,
    before the plugin is dialled; the one after is accepted."""
    dm = make_dm()
    dm.refuse_registrations(2, "not now")
    plugin = make_plugin(*devs("vf0")).start()
    for _ in range(2):
        err = refused(plugin)
        assert (err.code(), err.details()) == (grpc.StatusCode.UNKNOWN, "not now")
    assert "GetDevicePluginOptions" not in plugin.methods()
    plugin.register()
    registered(dm, allocatable=1)
    assert [r.result for r in dm.registrations] == ["not now", "not now", "ok"]
    assert all(r.request_options == PluginOptions() for r in dm.registrations)


def test_second_registration_replaces_the_first(make_dm, make_plugin):
    """A new plugin for a resource replaces the old one, whose stream is dropped."""
    dm = make_dm()
    old = make_plugin(*devs("vf0", "vf1"), endpoint="old.sock").serve_and_register()
    registered(dm, allocatable=2)
    new = make_plugin(*devs("vf7"), endpoint="new.sock").serve_and_register()
    assert dm.wait_for(lambda: [d.id for d in dm.devices(VF)] == ["vf7"], 5)
    assert dm.endpoint(VF) == "new.sock"
    assert old.wait_streams(0), "the old stream is still consumed"
    old.stop()
    time.sleep(0.1)
    assert dm.allocatable(VF) == 1 and dm.connected(VF), "the old plugin's end counted"
    assert new.open_streams == 1


# --------------------------------------------------------------------------- ListAndWatch


def test_list_and_watch_health_and_complete_lists(make_dm, make_plugin):
    """Only "Healthy" is healthy; every message is complete; topology is kept."""
    dm = make_dm()
    plugin = make_plugin(
        Dev("vf0", "Healthy", (0,)), Dev("vf1", "Healthy", (0, 1)), Dev("vf2", "Healthy", None)
    ).serve_and_register()
    registered(dm, allocatable=3)
    assert {d.id: d.numa for d in dm.devices(VF)} == {"vf0": (0,), "vf1": (0, 1), "vf2": None}
    plugin.set_health("vf1", "Unhealthy")
    assert dm.wait_for(lambda: dm.allocatable(VF) == 2, 5)
    assert dm.capacity(VF) == 3
    assert dm.free_devices(VF) == {"vf0", "vf2"}
    plugin.set_health("vf0", "healthy")  # not exactly "Healthy"
    assert dm.wait_for(lambda: dm.allocatable(VF) == 1, 5)
    plugin.set_devices([Dev("vf0", "Healthy", (0,)), Dev("vf3", "Healthy", (1,))])
    assert dm.wait_for(lambda: {d.id for d in dm.devices(VF)} == {"vf0", "vf3"}, 5)
    assert (dm.allocatable(VF), dm.capacity(VF)) == (2, 2)
    plugin.set_devices([])
    assert dm.wait_for(lambda: dm.capacity(VF) == 0, 5)
    assert dm.resources() == (VF,)


def test_stream_end_marks_unhealthy_then_drops_after_grace(make_dm, make_plugin):
    """Stream end: all devices unhealthy; the resource goes after the grace unless the
    plugin registers again (the manager never dials it again by itself)."""
    now = [1000.0]
    dm = make_dm(resource_grace_s=300.0, clock=lambda: now[0])
    plugin = make_plugin(*devs("vf0", "vf1", numa=0)).serve_and_register()
    registered(dm, allocatable=2)
    plugin.end_streams()
    assert dm.wait_for(lambda: not dm.connected(VF), 5)
    assert (dm.allocatable(VF), dm.capacity(VF)) == (0, 2)
    assert all(d.health == "Unhealthy" for d in dm.devices(VF))
    with pytest.raises(AdmissionError, match="requested number of devices unavailable"):
        dm.allocate("ns/p", "c", VF, 1)
    now[0] += 299.0
    plugin.register()  # within the grace: back
    registered(dm, allocatable=2)
    now[0] += 600.0
    assert dm.resources() == (VF,)
    assert plugin.methods().count("ListAndWatch") == 2
    plugin.stop()
    assert dm.wait_for(lambda: dm.allocatable(VF) == 0, 5)
    now[0] += 299.0
    assert dm.resources() == (VF,)
    now[0] += 1.0
    assert dm.resources() == () and dm.capacity(VF) == 0
    with pytest.raises(AdmissionError) as info:
        dm.allocate("ns/p", "c", VF, 1)
    assert info.value.reason == f"OutOf{VF}"


def test_lists_received_count_the_latest_registrations_lists(make_dm, make_plugin):
    """Every list counts, an empty one too; a new registration or a restart starts over."""
    dm = make_dm()
    assert dm.lists_received(VF) == 0
    plugin = make_plugin().serve_and_register()
    assert dm.wait_for(lambda: dm.lists_received(VF) == 1, 5)
    assert dm.devices(VF) == ()
    plugin.set_devices(devs("vf0"))
    assert dm.wait_for(lambda: dm.lists_received(VF) == 2, 5)
    plugin.end_streams()
    assert dm.wait_for(lambda: not dm.connected(VF), 5)
    assert dm.lists_received(VF) == 2
    plugin.register()
    assert dm.wait_for(lambda: dm.connected(VF) and dm.lists_received(VF) == 1, 5)
    dm.restart()
    assert dm.lists_received(VF) == 0


def test_disconnect_ends_the_stream_from_the_kubelets_side(make_dm, make_plugin):
    """disconnect: the stream ends (it has when the call returns), the devices turn
    unhealthy, the resource stays; the plugin must register again."""
    dm = make_dm()
    assert not dm.disconnect(VF)
    plugin = make_plugin(*devs("vf0", "vf1")).serve_and_register()
    registered(dm, allocatable=2)
    assert dm.disconnect(VF)
    assert not dm.connected(VF)
    assert (dm.allocatable(VF), dm.capacity(VF), dm.resources()) == (0, 2, (VF,))
    assert plugin.wait_streams(0)
    assert not dm.disconnect(VF)
    plugin.register()
    registered(dm, allocatable=2)
    assert plugin.methods().count("ListAndWatch") == 2


def test_short_grace_drops_the_resource(make_dm, make_plugin):
    """With a short grace the resource really goes away in time."""
    dm = make_dm(resource_grace_s=0.2)
    plugin = make_plugin(*devs("vf0")).serve_and_register()
    registered(dm, allocatable=1)
    plugin.stop()
    assert dm.wait_for(lambda: dm.resources() == (), 5)


# --------------------------------------------------------------------------- admission


def test_allocate_without_preferred_allocation(make_dm, make_plugin):
    """Not advertised: no GetPreferredAllocation; one Allocate with one container request."""
    dm = make_dm()
    plugin = make_plugin(*devs("vf2", "vf0", "vf1", numa=0)).serve_and_register()
    registered(dm, allocatable=3)
    got = dm.allocate("ns/pod", "main", VF, 2)
    assert "GetPreferredAllocation" not in plugin.methods()
    (call,) = plugin.calls_of("Allocate")
    assert [list(r.devices_ids) for r in call.request.container_requests] == [["vf0", "vf1"]]
    assert got.device_ids == ("vf0", "vf1") and got.preferred is None
    assert dict(got.topology) == {"vf0": (0,), "vf1": (0,)}
    assert dict(got.envs) == {"FAKE_DEVICES": "vf0,vf1"}
    assert [(m.container_path, m.read_only) for m in got.mounts] == [("/fake", True)]
    assert [d.host_path for d in got.devices] == ["/dev/fake-vf0", "/dev/fake-vf1"]
    assert got.annotations["fake.example.com/devices"] == "vf0,vf1"
    assert got.cdi_devices == ("example.com/vf=vf0", "example.com/vf=vf1")
    assert dm.free_devices(VF) == {"vf2"}
    assert dm.allocation("ns/pod", "main", VF) == got


def test_allocate_asks_the_plugin_when_advertised(make_dm, make_plugin):
    """GetPreferredAllocation gets the free healthy candidates, nothing must-include and
    the size; its answer is used."""
    dm = make_dm()
    plugin = make_plugin(*devs("vf0", "vf1", "vf2", "vf3", "vf4"), preferred_available=True)
    plugin.serve_and_register()
    registered(dm, allocatable=5)
    plugin.set_health("vf4", "Unhealthy")
    assert dm.wait_for(lambda: dm.allocatable(VF) == 4, 5)
    dm.allocate("ns/a", "main", VF, 1)  # the plugin prefers the highest: vf3
    got = dm.allocate("ns/b", "main", VF, 2)
    request = plugin.calls_of("GetPreferredAllocation")[-1].request
    (creq,) = request.container_requests
    assert sorted(creq.available_deviceIDs) == ["vf0", "vf1", "vf2"]
    assert list(creq.must_include_deviceIDs) == []
    assert creq.allocation_size == 2
    assert got.device_ids == ("vf2", "vf1") and got.preferred == ("vf2", "vf1")
    allocate = plugin.calls_of("Allocate")[-1].request
    assert [list(r.devices_ids) for r in allocate.container_requests] == [["vf2", "vf1"]]


def test_numa_hint_and_preferred_allocation(make_dm, make_plugin):
    """With a NUMA hint the plugin chooses among aligned devices, or completes them (the
    aligned ones then must be included)."""
    dm = make_dm()
    plugin = make_plugin(
        *devs("a0", "a1", "a2", numa=0), *devs("b0", "b1", numa=1), preferred_available=True
    ).serve_and_register()
    registered(dm, allocatable=5)
    got = dm.allocate("ns/p", "one", VF, 1, numa_hint=1)
    (creq,) = plugin.calls_of("GetPreferredAllocation")[-1].request.container_requests
    assert sorted(creq.available_deviceIDs) == ["b0", "b1"]
    assert got.device_ids == ("b1",)
    got = dm.allocate("ns/p", "three", VF, 3, numa_hint=1)
    (creq,) = plugin.calls_of("GetPreferredAllocation")[-1].request.container_requests
    assert list(creq.must_include_deviceIDs) == ["b0"]
    assert sorted(creq.available_deviceIDs) == ["a0", "a1", "a2", "b0"]
    assert creq.allocation_size == 3
    assert set(got.device_ids) == {"b0", "a2", "a1"}


def test_invalid_preferred_answers_are_ignored(make_dm, make_plugin):
    """Ids the plugin prefers that are not candidates are skipped; the rest is filled in."""
    dm = make_dm()
    plugin = make_plugin(*devs("vf0", "vf1", "vf2"), preferred_available=True)
    plugin.serve_and_register()
    registered(dm, allocatable=3)
    dm.allocate("ns/a", "main", VF, 1)  # vf2
    plugin.preferred = lambda available, must, size: ["nope", "vf2", "vf1"]
    got = dm.allocate("ns/b", "main", VF, 2)
    assert got.device_ids == ("vf1", "vf0")


def test_admission_errors(make_dm, make_plugin):
    """Allocate or GetPreferredAllocation errors, too few devices, an unknown resource:
    AdmissionError with the kubelet's words, nothing left held."""
    dm = make_dm()
    plugin = make_plugin(*devs("vf0", "vf1"), preferred_available=True).serve_and_register()
    registered(dm, allocatable=2)
    plugin.allocate_error = (grpc.StatusCode.INTERNAL, "no VF left on the PF")
    with pytest.raises(AdmissionError) as info:
        dm.allocate("ns/p", "main", VF, 1)
    assert str(info.value) == "rpc error: code = Internal desc = no VF left on the PF"
    assert info.value.reason == "UnexpectedAdmissionError"
    assert info.value.pod_message.startswith("Allocate failed due to rpc error")
    assert dm.free_devices(VF) == {"vf0", "vf1"} and dm.allocations() == ()
    plugin.allocate_error = None
    plugin.preferred_error = (grpc.StatusCode.UNAVAILABLE, "busy")
    with pytest.raises(AdmissionError, match="GetPreferredAllocation rpc failed with err: rpc"):
        dm.allocate("ns/p", "main", VF, 1)
    assert plugin.methods().count("Allocate") == 1
    plugin.preferred_error = None
    with pytest.raises(AdmissionError, match=r"Requested: 3, Available: 2"):
        dm.allocate("ns/p", "main", VF, 3)
    with pytest.raises(AdmissionError, match=r"Node didn't have enough resource: example\.com/x"):
        dm.allocate("ns/p", "main", "example.com/x", 1)
    assert dm.allocate("ns/p", "main", VF, 2).device_ids == ("vf1", "vf0")


def test_held_devices_are_not_allocated_again(make_dm, make_plugin):
    """A container that holds devices gets them again without Allocate; release frees."""
    dm = make_dm()
    plugin = make_plugin(*devs("vf0", "vf1", "vf2")).serve_and_register()
    registered(dm, allocatable=3)
    first = dm.allocate("ns/p", "main", VF, 2)
    assert dm.allocate("ns/p", "main", VF, 2) is first
    assert plugin.methods().count("Allocate") == 1
    with pytest.raises(AdmissionError, match="changed request"):
        dm.allocate("ns/p", "main", VF, 1)
    assert dm.release("ns/p") == 1
    assert dm.free_devices(VF) == {"vf0", "vf1", "vf2"}


def test_pre_start_only_when_advertised(make_dm, make_plugin):
    """PreStartContainer is called with the container's ids only when the plugin asks."""
    dm = make_dm()
    plain = make_plugin(*devs("g0"), resource=GPU, endpoint="gpu.sock").serve_and_register()
    needy = make_plugin(*devs("vf0", "vf1"), pre_start_required=True).serve_and_register()
    registered(dm, VF, 2)
    registered(dm, GPU, 1)
    dm.allocate("ns/p", "main", VF, 2)
    dm.allocate("ns/p", "main", GPU, 1)
    assert dm.pre_start("ns/p", "main") == (VF,)
    assert "PreStartContainer" not in plain.methods()
    (call,) = needy.calls_of("PreStartContainer")
    assert sorted(call.request.devices_ids) == ["vf0", "vf1"]
    needy.pre_start_error = (grpc.StatusCode.UNKNOWN, "reset failed")
    with pytest.raises(PreStartError, match="PreStartContainer rpc failed with err"):
        dm.pre_start("ns/p", "main")


def test_many_concurrent_admissions(make_dm, make_plugin):
    """Concurrent admissions never hand a device out twice; each gets one Allocate."""
    dm = make_dm()
    ids = [f"vf{i:02d}" for i in range(24)]
    plugin = make_plugin(
        *devs(*ids[:12], numa=0), *devs(*ids[12:], numa=1), preferred_available=True
    )
    plugin.preferred = lambda available, must, size: sorted(available)[:size]  # all alike
    plugin.serve_and_register()
    registered(dm, allocatable=24)
    got: list[tuple[str, ...]] = []
    errors: list[AdmissionError] = []
    lock = threading.Lock()
    barrier = threading.Barrier(32)

    def admit(i: int) -> None:
        barrier.wait()
        try:
            r = dm.allocate(f"ns/p{i}", "main", VF, 1, numa_hint=i % 2 if i % 3 else None)
        except AdmissionError as exc:
            with lock:
                errors.append(exc)
        else:
            with lock:
                got.append(r.device_ids)

    threads = [threading.Thread(target=admit, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = [d for ids_ in got for d in ids_]
    assert len(held) == 24 and sorted(held) == ids
    assert len(errors) == 8
    assert dm.free_devices(VF) == frozenset()
    for call in plugin.calls_of("Allocate"):
        assert len(call.request.container_requests) == 1


# --------------------------------------------------------------------------- restarts


def test_restart_recreates_the_socket_and_keeps_allocations(make_dm, make_plugin, dp_dir):
    """Restart: every file but the checkpoint is deleted, kubelet.sock gets a new inode,
    plugins must register again, allocations survive and are not re-Allocated."""
    dm = make_dm()
    plugin = make_plugin(*devs("vf0", "vf1", "vf2", numa=0)).serve_and_register()
    registered(dm, allocatable=3)
    got = dm.allocate("ns/p", "main", VF, 2)
    (dp_dir / "stray.txt").write_text("x")
    inode = os.stat(dm.socket_path).st_ino
    plugin.watch_kubelet()
    dm.restart(gap_s=0.05)
    assert os.stat(dm.socket_path).st_ino != inode
    assert (dp_dir / CHECKPOINT).is_file()
    assert not (dp_dir / "stray.txt").exists()
    assert dm.allocation("ns/p", "main", VF) == got
    assert dm.wait_for(lambda: dm.connected(VF) and dm.allocatable(VF) == 3, 5)
    assert len([r for r in dm.registrations if r.ok]) == 2
    assert plugin.methods().count("Register:sent") == 2
    assert dm.free_devices(VF) == {"vf2"}
    assert dm.allocate("ns/p", "main", VF, 2) == got
    assert plugin.methods().count("Allocate") == 1


def test_after_restart_devices_wait_for_the_plugin(make_dm, make_plugin, dp_dir):
    """Until its plugin registers again a resource has no devices (new pods are
    rejected); the plugin's socket is gone. A new manager reads the checkpoint back."""
    dm = make_dm(resource_grace_s=30.0)
    plugin = make_plugin(*devs("vf0", "vf1")).serve_and_register()
    registered(dm, allocatable=2)
    dm.allocate("ns/p", "main", VF, 1)
    dm.restart()
    assert not plugin.socket_path.exists()
    assert dm.resources() == (VF,) and dm.devices(VF) == () and not dm.connected(VF)
    with pytest.raises(AdmissionError, match="Available: 0"):
        dm.allocate("ns/q", "main", VF, 1)
    dm.stop()
    fresh = SimDeviceManager(dp_dir)
    assert [a.device_ids for a in fresh.allocations()] == [("vf0",)]
    assert fresh.resources() == (VF,)


def test_stop_leaves_a_stale_socket_and_ends_streams(make_dm, make_plugin):
    """A stopped manager's socket stays on disk, stale; plugin streams end."""
    dm = make_dm()
    plugin = make_plugin(*devs("vf0")).serve_and_register()
    registered(dm, allocatable=1)
    dm.stop()
    assert dm.socket_path.exists() and not dm.running
    assert plugin.wait_streams(0)
    assert dm.allocatable(VF) == 0 and dm.capacity(VF) == 1
    with pytest.raises(grpc.RpcError) as info:
        plugin.register(timeout=0.5)
    assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


# --------------------------------------------------------------------------- SimKubelet


class PodResources:
    """A pod-resources v1 client."""

    def __init__(self, sim: SimKubelet) -> None:
        self.channel = grpc.insecure_channel(
            sim.target, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self.stub: Any = api_pb2_grpc.PodResourcesListerStub(self.channel)

    def devices(self, pod: str) -> set[tuple[str, str, int | None]]:
        """(resource, id, NUMA node) of every device a pod's containers hold."""
        resp = self.stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
        out: set[tuple[str, str, int | None]] = set()
        for p in resp.pod_resources:
            if p.name == pod:
                for c in p.containers:
                    for d in c.devices:
                        numa = d.topology.nodes[0].ID if d.HasField("topology") else None
                        out.update((d.resource_name, i, numa) for i in d.device_ids)
        return out

    def allocatable(self) -> set[tuple[str, str]]:
        resp = self.stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=5)
        return {(d.resource_name, i) for d in resp.devices for i in d.device_ids}


def vf_scenario(directory: Path, *, retry: bool = True, pods: int = 1) -> Scenario:
    """Two NUMA nodes, a static GPU, and VFs from a plugin; ``pods`` trainers ask 2 VFs."""
    node = NodeSpec.uniform(2, 4, reserved_cpus=(0,), devices=[DeviceSpec(GPU, "gpu0", (0,))])
    trainer = PodSpec.of(
        "ml",
        "trainer",
        ContainerSpec.of("main", cpu=2, memory="1Gi", devices={VF: 2}),
        replicas=pods,
        naming="statefulset",
    )
    return Scenario(
        node=node,
        pods=(trainer,),
        device_plugins=DevicePluginsSpec(
            resources=(VF,), directory=str(directory), retry_pending=retry
        ),
    )


@pytest.fixture
def make_kubelet(tmp_path: Path) -> Iterator[Callable[..., SimKubelet]]:
    sims: list[SimKubelet] = []

    def factory(scenario: Scenario) -> SimKubelet:
        sim = SimKubelet(scenario, tmp_path / "pr" / "kubelet.sock")
        sims.append(sim)
        return sim.start()

    yield factory
    for s in sims:
        s.stop(remove_socket=True)


def test_pods_get_plugin_devices_through_the_kubelet(make_kubelet, make_plugin, dp_dir):
    """A pod asking for a plugin resource is admitted via Allocate once the plugin
    registers; List shows the plugin's ids and topology; allocatable its healthy ones."""
    sim = make_kubelet(vf_scenario(dp_dir))
    assert sim.device_manager is not None and sim.device_manager.directory == dp_dir
    pod = sim.node.pod("ml", "trainer-0")
    assert pod is not None and not pod.admitted and pod.reason == f"OutOf{VF}"
    plugin = make_plugin(
        *devs("0000:af:06.1", "0000:af:06.2", numa=1), Dev("0000:3b:02.0", "Healthy", (0,))
    ).serve_and_register()
    wait_until(lambda: sim.node.pod("ml", "trainer-0").admitted, 5)
    client = PodResources(sim)
    # Only NUMA node 1 has two free VFs: CPUs and VFs are aligned there.
    assert client.devices("trainer-0") == {(VF, "0000:af:06.1", 1), (VF, "0000:af:06.2", 1)}
    assert set(sim.node.pod("ml", "trainer-0").containers[0].cpu_ids) <= {4, 5, 6, 7}
    assert client.allocatable() == {
        (GPU, "gpu0"),
        (VF, "0000:3b:02.0"),
        (VF, "0000:af:06.1"),
        (VF, "0000:af:06.2"),
    }
    plugin.set_health("0000:3b:02.0", "Unhealthy")
    wait_until(lambda: (VF, "0000:3b:02.0") not in client.allocatable(), 5)
    (call,) = plugin.calls_of("Allocate")
    assert len(call.request.container_requests) == 1
    plugin.stop()  # stream ends: allocatable loses every VF, List keeps the held ones
    wait_until(lambda: client.allocatable() == {(GPU, "gpu0")}, 5)
    assert len(client.devices("trainer-0")) == 2


def test_allocate_error_rejects_the_pod(make_kubelet, make_plugin, dp_dir):
    """When Allocate fails the pod is rejected, listed with empty resources."""
    sim = make_kubelet(vf_scenario(dp_dir, retry=False))
    plugin = make_plugin(*devs("vf0", "vf1", "vf2", numa=0)).serve_and_register()
    registered(sim.device_manager, allocatable=3)
    plugin.allocate_error = (grpc.StatusCode.UNKNOWN, "PF is down")
    spec = PodSpec.of("ml", "probe", ContainerSpec.of("main", devices={VF: 1}))
    state = sim.admit(spec)
    assert state.phase == "Failed" and state.reason == "UnexpectedAdmissionError"
    assert state.message == "Allocate failed due to rpc error: code = Unknown desc = PF is down"
    assert PodResources(sim).devices("probe") == set()
    assert sim.node.free_devices(VF) == {"vf0", "vf1", "vf2"}
    plugin.allocate_error = None
    assert sim.admit(PodSpec.of("ml", "probe2", ContainerSpec.of("main", devices={VF: 1}))).admitted
    assert not sim.node.pod("ml", "trainer-0").admitted  # no retry


def test_kubelet_restart_restarts_the_device_manager(make_kubelet, make_plugin, dp_dir):
    """SimKubelet.restart re-creates both sockets; pods keep their devices without a new
    Allocate; allocatable devices return when the plugin registers again."""
    sim = make_kubelet(vf_scenario(dp_dir, pods=2))
    plugin = make_plugin(*devs("vf0", "vf1", "vf2", "vf3", "vf4", numa=0)).serve_and_register()
    plugin.watch_kubelet()
    wait_until(lambda: all(p.admitted for p in sim.node.pods), 5)
    client = PodResources(sim)
    before = client.devices("trainer-0")
    dm = sim.device_manager
    inodes = (os.stat(sim.socket_path).st_ino, os.stat(dm.socket_path).st_ino)
    sim.restart(warmup=0.0)
    assert os.stat(sim.socket_path).st_ino != inodes[0]
    assert os.stat(dm.socket_path).st_ino != inodes[1]
    wait_until(lambda: dm.connected(VF) and dm.allocatable(VF) == 5, 5)
    wait_until(lambda: len({r for r, _ in client.allocatable() if r == VF}) == 1, 5)
    assert client.devices("trainer-0") == before
    assert plugin.methods().count("Allocate") == 2
    assert sim.node.free_devices(VF) == {"vf4"}


def test_no_lock_is_held_while_the_plugin_allocates(make_kubelet, make_plugin, dp_dir):
    """While an Allocate is in flight, List, GetAllocatableResources, the manager and
    other admissions all answer."""
    sim = make_kubelet(vf_scenario(dp_dir, retry=False))
    plugin = make_plugin(*devs("vf0", "vf1", "vf2", numa=0)).serve_and_register()
    dm = sim.device_manager
    registered(dm, allocatable=3)
    plugin.allocate_gate = gate = threading.Event()
    slow_spec = PodSpec.of("ml", "slow", ContainerSpec.of("m", devices={VF: 1}))
    slow = threading.Thread(target=sim.admit, args=(slow_spec,))
    slow.start()
    try:
        wait_until(lambda: plugin.calls_of("Allocate"), 5, interval=0.01)
        client = PodResources(sim)
        assert client.devices("slow") == set()
        assert (VF, "vf0") in client.allocatable()
        assert dm.resources() == (VF,)
        assert sim.admit(PodSpec.of("ml", "plain", ContainerSpec.of("m", cpu=1))).admitted
        assert sim.node.pod("ml", "slow") is None and slow.is_alive()
    finally:
        gate.set()
        slow.join()
    assert sim.node.pod("ml", "slow").admitted


def test_attached_manager_and_churn(tmp_path, make_plugin, dp_dir):
    """A manager attached to a running kubelet admits the waiting pods; churn gives a
    deleted pod's devices back and allocates its replacement's through the plugin."""
    worker = PodSpec.of(
        "ml", "worker", ContainerSpec.of("main", devices={VF: 1}), replicas=2, churn=True
    )
    sim = SimKubelet(
        Scenario(node=NodeSpec.uniform(1, 4), pods=(worker,)), tmp_path / "pr" / "kubelet.sock"
    )
    assert sim.device_manager is None
    assert not any(p.admitted for p in sim.node.pods)
    try:
        sim.start()
        dm = SimDeviceManager(dp_dir)
        sim.attach_device_manager(dm, resources=[VF], manage=True)
        assert dm.running and sim.node.plugin_resources == (VF,)
        plugin = make_plugin(*devs("vf0", "vf1", "vf2")).serve_and_register()
        wait_until(lambda: all(p.admitted for p in sim.node.pods), 5)
        event = sim.churn_once()
        assert event is not None and event.added.admitted
        keys = {f"ml/{p.name}" for p in sim.node.pods}
        assert {a.pod for a in dm.allocations()} == keys
        assert len(dm.free_devices(VF)) == 1
        assert plugin.methods().count("Allocate") == 3
    finally:
        sim.stop(remove_socket=True)
    assert not dm.running


# --------------------------------------------------------------------------- scenario


def test_scenario_device_plugins_table(tmp_path):
    """[device_plugins] is parsed and checked."""
    text = """
    [device_plugins]
    resources = ["example.com/vf"]
    directory = "dp"
    resource_grace_s = 1.5
    retry_pending = false

    [node]
    cpus_per_numa_node = 2

    [[pods]]
    namespace = "ml"
    name = "p"
    [[pods.containers]]
    name = "main"
    devices = { "example.com/vf" = 1 }
    """
    sc = parse_scenario(text)
    assert sc.device_plugins == DevicePluginsSpec(("example.com/vf",), "dp", 1.5, False)
    assert sc.plugin_resources == ("example.com/vf",)
    sim = SimKubelet(sc, tmp_path / "pr" / "kubelet.sock")
    assert sim.device_manager is not None
    assert sim.device_manager.directory == tmp_path / "pr" / "dp"
    assert parse_scenario("[node]\ncpus_per_numa_node = 2").device_plugins is None
    with pytest.raises(ValueError, match="must not hold the pod-resources socket"):
        SimKubelet(sc, tmp_path / "x" / "kubelet.sock", device_plugin_dir=tmp_path / "x")
    bad = {
        'resources = ["kubernetes.io/vf"]': "device_plugins.resources",
        'resources = "example.com/vf"': "device_plugins.resources",
        "resource_grace_s = -1": "device_plugins.resource_grace_s",
        "colour = 1": "device_plugins.colour",
        'resources = ["example.com/gpu"]': "device_plugins.resources: also in node.devices",
    }
    node = (
        '[node]\ncpus_per_numa_node = 2\n[[node.devices]]\nresource = "example.com/gpu"\nid = "g"'
    )
    for line, where in bad.items():
        with pytest.raises(ScenarioError, match=where):
            parse_scenario(f"[device_plugins]\n{line}\n{node}")


def test_topology_policy_aligns_and_refuses_plugin_devices(make_kubelet, make_plugin, dp_dir):
    """Under single-numa-node the plugin's devices go through the Topology Manager: the
    first 2-VF pod is admitted on NUMA node 1 (the only node with two VFs), CPUs and VFs
    aligned; the second finds one VF left and is refused with TopologyAffinityError."""
    sc = vf_scenario(dp_dir, pods=2)
    sc = replace(sc, node=replace(sc.node, topology_policy="single-numa-node"))
    sim = make_kubelet(sc)
    make_plugin(
        Dev("0000:3b:02.0", "Healthy", (0,)),
        *devs("0000:af:06.1", "0000:af:06.2", numa=1),
    ).serve_and_register()
    wait_until(lambda: sim.node.pod("ml", "trainer-0").admitted, 5)
    client = PodResources(sim)
    assert client.devices("trainer-0") == {(VF, "0000:af:06.1", 1), (VF, "0000:af:06.2", 1)}
    assert set(sim.node.pod("ml", "trainer-0").containers[0].cpu_ids) <= {4, 5, 6, 7}
    wait_until(lambda: sim.node.pod("ml", "trainer-1").reason == "TopologyAffinityError", 5)
    assert not sim.node.pod("ml", "trainer-1").admitted
