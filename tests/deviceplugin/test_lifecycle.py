"""Serve, self-dial, register, re-register: the plugin in-process against the simulated
kubelet's device manager."""

from __future__ import annotations

import os
import queue
import re
import shutil
import stat
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_exporter.buildinfo import BuildInfo
from podres_exporter.daemon.values import parse_listen_address
from podres_exporter.deviceplugin.board import Board
from podres_exporter.deviceplugin.config import parse_config
from podres_exporter.deviceplugin.inventory import ResourceInventory
from podres_exporter.deviceplugin.lifecycle import PluginManager
from podres_exporter.deviceplugin.main import (
    DevicePlugin,
    PluginSettings,
    build_plugin,
    load_plugin_config,
)
from podres_exporter.deviceplugin.metrics import PluginMetrics
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim.kubelet.devicemanager import (
    HEALTHY,
    UNHEALTHY,
    PluginDevice,
    PluginOptions,
    SimDeviceManager,
)
from podres_sim.nvml import FakeNvml
from tests.deviceplugin.support import (
    VF_ADDRESSES,
    accepted,
    advertised,
    files,
    plugin_stub,
    write_sysfs,
)
from tests.support import http_get, started_daemons, wait_until

RESOURCE = "intel.com/sriov_vf"
CONFIG = f"""
[plugin]
health_interval = "100ms"

[[resource]]
name = "{RESOURCE}"
[resource.discover]
kind = "pci"
vendor = "0x8086"
device = "0x1889"
"""
HEALTHY_VFS = [PluginDevice(a, HEALTHY, (0,)) for a in VF_ADDRESSES]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def make_plugin(sockdir: Path, tmp_path: Path) -> Iterator[Callable[..., DevicePlugin]]:
    """Start the plugin on ``sockdir/plugins`` with a devtree sysfs; stopped at teardown."""

    def build(config: str = CONFIG, *, sysfs: bool = True, gpu_backend: Any = None) -> DevicePlugin:
        (sockdir / "plugins").mkdir(exist_ok=True)
        root = tmp_path / "sys"
        root.mkdir(exist_ok=True)
        if sysfs:
            write_sysfs(root)
        path = tmp_path / "plugin.toml"
        path.write_text(config)
        settings = PluginSettings(
            config_path=str(path),
            device_plugin_dir=str(sockdir / "plugins"),
            listen_address=parse_listen_address("127.0.0.1:0"),
            path_sysfs=str(root),
            path_dev=str(tmp_path / "dev"),
            node_name="node-a",
            build=BuildInfo("1.2.3", "0123abc", "3.11.7"),
        )
        return build_plugin(settings, load_plugin_config(settings), gpu_backend=gpu_backend)

    yield from started_daemons(build)


Running = tuple[SimDeviceManager, DevicePlugin]


@pytest.fixture
def running(
    make_kubelet: Callable[..., SimDeviceManager], make_plugin: Callable[..., DevicePlugin]
) -> Running:
    """A kubelet and the plugin, once the kubelet has the plugin's devices."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    assert kubelet.wait_for(lambda: advertised(kubelet, RESOURCE))
    return kubelet, plugin


def registration_errors(plugin: DevicePlugin) -> float:
    value = plugin.metrics.registry.get_sample_value(
        "podres_plugin_registrations_total", {"resource": RESOURCE, "result": "error"}
    )
    return value or 0.0


def kubelet_restarts(plugin: DevicePlugin) -> float | None:
    return plugin.metrics.registry.get_sample_value("podres_plugin_kubelet_restarts_total")


def test_register_follows_the_kubelet_order(make_kubelet: Any, make_plugin: Any) -> None:
    """Socket served first; Register carries v1beta1, the file name and the same options
    GetDevicePluginOptions returns; then a complete ListAndWatch list."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    assert kubelet.wait_for(lambda: advertised(kubelet, RESOURCE) == HEALTHY_VFS)
    (reg,) = accepted(kubelet)
    assert reg.version == "v1beta1"
    assert re.fullmatch(r"podres-intel\.com-sriov_vf-[0-9a-f]{8}\.sock", reg.endpoint)
    assert reg.request_options == reg.options == PluginOptions(False, True)
    # Accepted at the first call: the device manager accepts only once the plugin's own
    # socket has answered GetDevicePluginOptions, before Register returns.
    assert kubelet.registrations[0] == reg
    assert kubelet.wait_for(lambda: plugin.manager.plugins[RESOURCE].registered)
    assert files(kubelet) == sorted(["kubelet.sock", reg.endpoint])


def test_a_refused_registration_is_retried_without_a_crash(
    make_kubelet: Any, make_plugin: Any
) -> None:
    """The kubelet refuses twice; the plugin backs off, retries and gets registered."""
    kubelet = make_kubelet()
    kubelet.refuse_registrations(2, "refused")
    plugin = make_plugin()
    assert kubelet.wait_for(lambda: plugin.manager.plugins[RESOURCE].registered, timeout=10)
    assert [r.result for r in kubelet.registrations] == ["refused", "refused", "ok"]
    samples = {
        result: plugin.metrics.registry.get_sample_value(
            "podres_plugin_registrations_total", {"resource": RESOURCE, "result": result}
        )
        for result in ("success", "error")
    }
    assert samples == {"success": 1, "error": 2}


def test_a_kubelet_that_appears_later_is_registered_with(
    make_kubelet: Any, make_plugin: Any
) -> None:
    """No kubelet at start: the plugin serves and waits; it registers once one appears."""
    kubelet = make_kubelet(start=False)
    plugin = make_plugin()
    time.sleep(0.5)
    assert not plugin.manager.plugins[RESOURCE].registered
    status, _, body = http_get(plugin.url + "/readyz")
    assert (status, body) == (503, f"not registered: {RESOURCE}\n".encode())
    kubelet.start()
    started = time.monotonic()
    assert kubelet.wait_for(lambda: advertised(kubelet, RESOURCE) == HEALTHY_VFS, timeout=5)
    assert time.monotonic() - started < 2.0
    assert kubelet.wait_for(plugin.metrics.all_registered)
    assert http_get(plugin.url + "/readyz")[0] == 200


def test_the_kubelet_vanishing_mid_stream_then_returning(running: Running) -> None:
    """The stream ends with the kubelet, the plugin keeps serving; a returning kubelet
    (new socket) gets a registration within 2 s."""
    kubelet, plugin = running
    first = accepted(kubelet)[-1].endpoint
    kubelet.stop()  # the socket stays, stale; the stream ends
    assert kubelet.wait_for(lambda: not kubelet.connected(RESOURCE))
    time.sleep(0.3)
    assert (kubelet.directory / first).exists()
    options = plugin_stub(kubelet, RESOURCE).GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert options.get_preferred_allocation_available  # still serving
    assert plugin.monitor.alive()
    # Come back right after a failed retry (the next is backed off by 0.16 s at least): a
    # Register leaving just as the kubelet starts would name a socket the start deletes,
    # and wait out the kubelet's 10 s dial back.
    failed = registration_errors(plugin)
    wait_until(lambda: registration_errors(plugin) > failed, interval=0.01)
    kubelet.start()
    back = time.monotonic()
    assert kubelet.wait_for(lambda: len(accepted(kubelet)) == 2 and advertised(kubelet, RESOURCE))
    assert time.monotonic() - back < 2.0
    assert advertised(kubelet, RESOURCE) == HEALTHY_VFS


def test_a_kubelet_restart_gets_a_fresh_socket_registered_within_2s(running: Running) -> None:
    """kubelet.sock re-created and our socket deleted: a new socket, registered < 2 s."""
    kubelet, plugin = running
    first = accepted(kubelet)[-1].endpoint
    kubelet.restart()
    restarted = time.monotonic()
    assert kubelet.wait_for(lambda: len(accepted(kubelet)) == 2 and advertised(kubelet, RESOURCE))
    assert time.monotonic() - restarted < 2.0
    second = accepted(kubelet)[-1].endpoint
    assert second != first
    assert files(kubelet) == sorted(["kubelet.sock", second])
    assert advertised(kubelet, RESOURCE) == HEALTHY_VFS
    # The kubelet watch counts the restart on its own 100 ms poll, which may come just after
    # the plugin saw its socket deleted and registered again.
    wait_until(lambda: (kubelet_restarts(plugin) or 0.0) >= 1, timeout=2)
    assert kubelet_restarts(plugin) == 1


def test_kubelet_restarts_get_one_registration_each_and_a_live_stream(running: Running) -> None:
    """Five kubelet restarts: each gets exactly one registration, and the kubelet ends up
    with a live stream each time (a second registration right after the first would make
    a real kubelet disconnect the newer endpoint when the older stream ends)."""
    kubelet, _ = running
    for n in range(2, 7):
        kubelet.restart()

        def registered_again(n: int = n) -> bool:
            return len(accepted(kubelet)) >= n and bool(advertised(kubelet, RESOURCE))

        assert kubelet.wait_for(registered_again)
        time.sleep(0.5)  # a second, spurious registration would come within this
        assert len(accepted(kubelet)) == n
        assert advertised(kubelet, RESOURCE) == HEALTHY_VFS


def test_a_stream_ended_by_the_kubelet_is_registered_again(running: Running) -> None:
    """The kubelet ends ListAndWatch without restarting (it never dials again by itself):
    the plugin registers again and the devices flow."""
    kubelet, plugin = running
    assert kubelet.disconnect(RESOURCE)  # returns once the stream has ended
    assert kubelet.wait_for(lambda: len(accepted(kubelet)) == 2 and advertised(kubelet, RESOURCE))
    assert advertised(kubelet, RESOURCE) == HEALTHY_VFS
    registered = plugin.metrics.registry.get_sample_value(
        "podres_plugin_registered", {"resource": RESOURCE}
    )
    assert registered == 1


def test_a_deleted_plugin_socket_is_served_and_registered_again(running: Running) -> None:
    """Someone deletes our socket file: a new one is served and registered."""
    kubelet, _ = running
    first = accepted(kubelet)[-1].endpoint
    os.unlink(kubelet.directory / first)
    assert kubelet.wait_for(lambda: len(accepted(kubelet)) == 2, timeout=3)
    assert accepted(kubelet)[-1].endpoint != first
    assert kubelet.wait_for(lambda: advertised(kubelet, RESOURCE) == HEALTHY_VFS)


def test_the_device_plugin_directory_replaced_under_the_plugin(running: Running) -> None:
    """The whole directory goes away and comes back with a kubelet: the plugin waits,
    then serves in the new directory and registers."""
    kubelet, plugin = running
    kubelet.stop(remove_socket=True)
    # Gone at once (renamed away, then deleted), not file by file: a plugin seeing its
    # socket deleted serves a fresh one, which could land in the half-deleted directory.
    gone = kubelet.directory.with_name("gone")
    kubelet.directory.rename(gone)
    shutil.rmtree(gone)
    time.sleep(0.5)
    assert plugin.manager.plugins[RESOURCE].socket_path is None  # nowhere to serve
    kubelet.start()
    assert kubelet.wait_for(lambda: len(accepted(kubelet)) == 2 and advertised(kubelet, RESOURCE))
    assert advertised(kubelet, RESOURCE) == HEALTHY_VFS


def test_hardware_absent_at_start_is_registered_empty_then_advertised(
    make_kubelet: Any, make_plugin: Any, tmp_path: Path
) -> None:
    """A rule matching nothing registers with an empty list; the VFs appear once written."""
    kubelet = make_kubelet()
    make_plugin(sysfs=False)
    assert kubelet.wait_for(lambda: advertised(kubelet, RESOURCE) is not None)
    assert advertised(kubelet, RESOURCE) == []
    write_sysfs(tmp_path / "sys")
    assert kubelet.wait_for(lambda: advertised(kubelet, RESOURCE) == HEALTHY_VFS, timeout=5)


def test_metrics_and_health_endpoints(make_kubelet: Any, make_plugin: Any) -> None:
    """/metrics carries the plugin's families; /healthz and /readyz answer 200; others 404."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    assert kubelet.wait_for(
        lambda: advertised(kubelet, RESOURCE) and plugin.metrics.all_registered()
    )
    assert http_get(plugin.url + "/healthz")[0] == 200
    assert http_get(plugin.url + "/readyz")[0] == 200
    assert http_get(plugin.url + "/nope")[0] == 404
    status, _, body = http_get(plugin.url + "/metrics")
    assert status == 200
    text = body.decode()
    for line in (
        f'podres_plugin_devices{{health="Healthy",resource="{RESOURCE}"}} 4.0',
        f'podres_plugin_registrations_total{{resource="{RESOURCE}",result="success"}} 1.0',
        f'podres_plugin_list_and_watch_streams{{resource="{RESOURCE}"}} 1.0',
        f'podres_plugin_registered{{resource="{RESOURCE}"}} 1.0',
        "podres_plugin_kubelet_restarts_total 0.0",
        'podres_plugin_build_info{python_version="3.11.7",revision="0123abc",version="',
        'podres_plugin_node_info{node="node-a"} 1.0',
        f'podres_plugin_allocations_total{{resource="{RESOURCE}",result="success"}} 0.0',
    ):
        assert line in text
    assert "_created" not in text


def test_docs_list_every_series_the_plugin_serves(make_kubelet: Any, make_plugin: Any) -> None:
    """docs/plugin.md's Metrics table names every series the plugin serves (no *_created),
    and the plugin serves all it names."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    assert kubelet.wait_for(plugin.metrics.all_registered)
    text = http_get(plugin.url + "/metrics")[2].decode()
    served = {m[1] for m in re.finditer(r"^([a-z_:]+)[{ ]", text, re.M)}
    section = (ROOT / "docs/plugin.md").read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(podres_\w+)` \|", section, re.M)
    assert served == set(rows), (
        f"served, not documented: {sorted(served - set(rows))}; "
        f"documented, not served: {sorted(set(rows) - served)}"
    )


def test_stop_ends_the_stream_and_removes_the_socket(running: Running) -> None:
    """Stopping ends the kubelet's stream and leaves only kubelet.sock behind."""
    kubelet, plugin = running
    begun = time.monotonic()
    plugin.stop("test")
    assert time.monotonic() - begun < 3.0
    assert kubelet.wait_for(lambda: not kubelet.connected(RESOURCE), timeout=3)
    assert files(kubelet) == ["kubelet.sock"]


GPUS = [f"GPU-0c5a1f2e-8a7f-4c1e-9b3d-{i:012d}" for i in range(4)]
GPU_CONFIG = """
[plugin]
xid_unhealthy_for = "1s"

[[resource]]
name = "nvidia.com/gpu"
replicas = 2
pre_start = true
[resource.discover]
kind = "nvml"
"""


def test_an_injected_nvml_backend_gpu_health_and_topology_over_grpc(
    make_kubelet: Any, make_plugin: Any
) -> None:
    """GPUs from an injected NVML backend: replicas advertised, an XID reaches the kubelet
    as Unhealthy within 1 s and recovers, and preferred allocation follows NVLink."""
    fake = FakeNvml()
    for i, uuid in enumerate(GPUS):
        fake.add_gpu(uuid, numa_node=0 if i < 2 else 1)
    fake.connect_nvlink(GPUS[2], GPUS[3], links=4)
    kubelet = make_kubelet()
    make_plugin(GPU_CONFIG, sysfs=False, gpu_backend=NvmlBackend(fake))
    assert kubelet.wait_for(lambda: advertised(kubelet, "nvidia.com/gpu"))
    reg = accepted(kubelet)[-1]
    assert reg.request_options == reg.options == PluginOptions(True, True)
    ids = [d.id for d in advertised(kubelet, "nvidia.com/gpu") or []]
    assert ids == [f"{g}::{n}" for g in GPUS for n in (0, 1)]
    stub = plugin_stub(kubelet, "nvidia.com/gpu")
    preferred = stub.GetPreferredAllocation(
        pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=ids, must_include_deviceIDs=[], allocation_size=2
                )
            ]
        ),
        timeout=5,
    )
    assert list(preferred.container_responses[0].deviceIDs) == [f"{GPUS[2]}::0", f"{GPUS[3]}::0"]
    fake.emit_xid(GPUS[1], 79)
    emitted = time.monotonic()
    assert kubelet.wait_for(
        lambda: (
            {d.health for d in advertised(kubelet, "nvidia.com/gpu") or [] if GPUS[1] in d.id}
            == {UNHEALTHY}
        ),
        timeout=3,
    )
    assert time.monotonic() - emitted < 1.0
    with pytest.raises(grpc.RpcError) as info:
        stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=[f"{GPUS[1]}::1"]))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert kubelet.wait_for(
        lambda: {d.health for d in advertised(kubelet, "nvidia.com/gpu") or []} == {HEALTHY},
        timeout=4,
    )


# ------------------------------------------------------------------------ hardening


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """umask 000 for the test: files and sockets are created as open as asked."""
    old = os.umask(0)
    yield
    os.umask(old)


def test_plugin_sockets_are_0600_whatever_the_umask(
    permissive_umask: None, make_kubelet: Any, make_plugin: Any
) -> None:
    """With umask 000 the plugin's socket is still 0600: only root may call Allocate; a
    socket served again (ours deleted) too."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    assert kubelet.wait_for(lambda: advertised(kubelet, RESOURCE))
    first = kubelet.directory / accepted(kubelet)[-1].endpoint
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o600
    os.unlink(first)
    assert kubelet.wait_for(lambda: len(accepted(kubelet)) == 2, timeout=3)
    second = plugin.manager.plugins[RESOURCE].socket_path
    assert second is not None and second != str(first)
    assert stat.S_IMODE(os.stat(second).st_mode) == 0o600


def drain(call: Any, ended: queue.Queue[grpc.StatusCode]) -> None:
    """Read a ListAndWatch stream to its end, as the kubelet does; put how it ended."""
    try:
        for _ in call:
            pass
        ended.put(grpc.StatusCode.OK)
    except grpc.RpcError as err:
        ended.put(err.code())


def allocate_request() -> pb.AllocateRequest:
    return pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=[VF_ADDRESSES[0]])]
    )


def test_open_list_and_watch_streams_cannot_starve_allocate(running: Running) -> None:
    """32 ListAndWatch streams opened at once (stale kubelets, or anyone on the socket):
    Allocate, GetPreferredAllocation and GetDevicePluginOptions still answer within 2 s; a
    new stream ends the older ones, which the plugin does not take for a lost registration;
    when the last one ends it registers again."""
    kubelet, plugin = running
    stub = plugin_stub(kubelet, RESOURCE)
    calls = [stub.ListAndWatch(pb.Empty(), timeout=30) for _ in range(32)]
    ended: queue.Queue[grpc.StatusCode] = queue.Queue()
    for call in calls:
        threading.Thread(target=drain, args=(call, ended), daemon=True).start()
    options = stub.GetDevicePluginOptions(pb.Empty(), timeout=2)
    assert options.get_preferred_allocation_available
    answer = stub.Allocate(allocate_request(), timeout=2)
    assert len(answer.container_responses) == 1
    preferred = stub.GetPreferredAllocation(
        pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(VF_ADDRESSES), allocation_size=2
                )
            ]
        ),
        timeout=2,
    )
    assert len(preferred.container_responses[0].deviceIDs) == 2
    # The older streams end (or were refused while those ended): only the newest stays
    # open, and the kubelet's is gone.
    codes = [ended.get(timeout=5) for _ in range(31)]
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.CANCELLED,
                          grpc.StatusCode.RESOURCE_EXHAUSTED}, codes  # fmt: skip
    assert kubelet.wait_for(lambda: not kubelet.connected(RESOURCE), timeout=5)
    time.sleep(0.5)  # a re-registration loop, or the newest stream ending, would show here
    assert ended.empty()
    assert len(accepted(kubelet)) == 1
    for c in calls:
        c.cancel()  # the newest stream's end is a lost registration: register again
    assert kubelet.wait_for(lambda: len(accepted(kubelet)) == 2 and advertised(kubelet, RESOURCE))
    assert advertised(kubelet, RESOURCE) == HEALTHY_VFS
    time.sleep(0.5)
    assert len(accepted(kubelet)) == 2
    assert plugin.manager.plugins[RESOURCE].registered


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_alive_while_every_lifecycle_thread_runs(make_kubelet: Any, make_plugin: Any) -> None:
    """PluginManager.alive: False before start, True while each resource's thread runs,
    False once one has died, and after stop."""
    resource = parse_config(tomllib.loads(CONFIG)).resources[0]
    metrics = PluginMetrics("test", [RESOURCE])
    idle = PluginManager(
        [resource],
        {RESOURCE: Board(ResourceInventory(RESOURCE))},
        metrics,
        plugin_dir="/nonexistent",
    )
    assert not idle.alive()
    make_kubelet()
    plugin = make_plugin()
    manager = plugin.manager
    assert manager.alive()

    def die(*_: object) -> bool:
        raise SystemExit  # ends the thread quietly, as an unforeseen bug would end it

    manager.plugins[RESOURCE]._ensure_served = die
    wait_until(lambda: not manager.alive(), timeout=5)
    plugin.stop("test")
    assert not manager.alive()


def test_a_socket_that_cannot_be_made_0600_is_not_served(
    make_kubelet: Any, make_plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """chmod fails: the socket is removed, nothing is registered, the failure is logged;
    once chmod works again the plugin serves and registers."""
    real_chmod = os.chmod
    failing = threading.Event()
    failing.set()

    def chmod(path: Any, mode: int, **kwargs: Any) -> None:
        if failing.is_set() and os.path.basename(str(path)).startswith("podres-"):
            raise PermissionError(1, "Operation not permitted", str(path))
        real_chmod(path, mode, **kwargs)

    monkeypatch.setattr(os, "chmod", chmod)
    kubelet = make_kubelet()
    with structlog.testing.capture_logs() as logs:
        plugin = make_plugin()
        wait_until(lambda: any(e["event"] == "plugin_socket_chmod_failed" for e in logs))
        time.sleep(0.3)
        assert accepted(kubelet) == []
        assert files(kubelet) == ["kubelet.sock"]
        assert plugin.manager.plugins[RESOURCE].socket_path is None
    failing.clear()
    assert kubelet.wait_for(lambda: advertised(kubelet, RESOURCE) == HEALTHY_VFS, timeout=5)
