"""Serve, self-dial, register, re-register: the plugin in-process against a small kubelet."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_exporter.deviceplugin.main import DevicePlugin, PluginSettings, build_plugin
from podres_exporter.options import parse_listen_address
from podres_exporter.sim.fakenvml import FakeNvml
from podres_exporter.sources.gpu import NvmlBackend
from tests.conftest import http_get
from tests.deviceplugin.support import VF_ADDRESSES, MiniKubelet, write_sysfs

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
HEALTHY_VFS = [(a, "Healthy", (0,)) for a in VF_ADDRESSES]


@pytest.fixture
def make_plugin(sockdir: Path, tmp_path: Path) -> Iterator[Callable[..., DevicePlugin]]:
    """Start the plugin on ``sockdir/plugins`` with a devtree sysfs; stopped at teardown."""
    started: list[DevicePlugin] = []

    def factory(
        config: str = CONFIG, *, sysfs: bool = True, gpu_backend: Any = None
    ) -> DevicePlugin:
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
        )
        plugin = build_plugin(settings, gpu_backend=gpu_backend)
        plugin.start()
        started.append(plugin)
        return plugin

    yield factory
    for p in started:
        p.stop("test teardown")


def sockets(kubelet: MiniKubelet) -> list[str]:
    return sorted(p.name for p in kubelet.directory.iterdir())


def test_register_follows_the_kubelet_order(make_kubelet: Any, make_plugin: Any) -> None:
    """Socket served first; Register carries v1beta1, the file name and the same options
    GetDevicePluginOptions returns; then a complete ListAndWatch list."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE) == HEALTHY_VFS)
    (reg,) = kubelet.ok_registrations()
    assert reg.version == "v1beta1"
    assert re.fullmatch(r"podres-intel\.com-sriov_vf-[0-9a-f]{8}\.sock", reg.endpoint)
    assert reg.request_options == reg.dialed_options == (False, True)
    assert kubelet.events[:3] == [
        f"register:{RESOURCE}",
        f"options:{RESOURCE}",
        f"registered:{RESOURCE}",
    ]
    kubelet.wait_for(lambda: plugin.manager.plugins[RESOURCE].registered)
    assert sockets(kubelet) == sorted(["kubelet.sock", reg.endpoint])


def test_a_refused_registration_is_retried_without_a_crash(
    make_kubelet: Any, make_plugin: Any
) -> None:
    """The kubelet refuses twice; the plugin backs off, retries and gets registered."""
    kubelet = make_kubelet(refuse=2)
    plugin = make_plugin()
    kubelet.wait_for(lambda: plugin.manager.plugins[RESOURCE].registered, timeout=10)
    assert [r.error for r in kubelet.registrations] == ["refused", "refused", None]
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
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE) == HEALTHY_VFS, timeout=5)
    assert time.monotonic() - started < 2.0
    kubelet.wait_for(plugin.metrics.all_registered)
    assert http_get(plugin.url + "/readyz")[0] == 200


def test_the_kubelet_vanishing_mid_stream_then_returning(
    make_kubelet: Any, make_plugin: Any
) -> None:
    """The stream ends with the kubelet, the plugin keeps serving; a returning kubelet
    (new socket) gets a registration within 2 s."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE))
    first = kubelet.ok_registrations()[-1].endpoint
    kubelet.stop()  # the socket stays, stale; the stream ends
    kubelet.wait_for(lambda: all(s.ended for s in kubelet.streams))
    time.sleep(0.3)
    assert (kubelet.directory / first).exists()
    options = kubelet.plugin_stub(RESOURCE).GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert options.get_preferred_allocation_available  # still serving
    assert plugin.monitor.alive()
    kubelet.start()
    back = time.monotonic()
    kubelet.wait_for(lambda: len(kubelet.ok_registrations()) == 2 and kubelet.devices(RESOURCE))
    assert time.monotonic() - back < 2.0
    assert kubelet.devices(RESOURCE) == HEALTHY_VFS


def test_a_kubelet_restart_gets_a_fresh_socket_registered_within_2s(
    make_kubelet: Any, make_plugin: Any
) -> None:
    """kubelet.sock re-created and our socket deleted: a new socket, registered < 2 s."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE))
    first = kubelet.ok_registrations()[-1].endpoint
    kubelet.restart()
    restarted = time.monotonic()
    kubelet.wait_for(lambda: len(kubelet.ok_registrations()) == 2 and kubelet.devices(RESOURCE))
    assert time.monotonic() - restarted < 2.0
    second = kubelet.ok_registrations()[-1].endpoint
    assert second != first
    assert sockets(kubelet) == sorted(["kubelet.sock", second])
    assert kubelet.devices(RESOURCE) == HEALTHY_VFS
    restarts = plugin.metrics.registry.get_sample_value("podres_plugin_kubelet_restarts_total")
    assert restarts == 1


def test_kubelet_restarts_get_one_registration_each_and_a_live_stream(
    make_kubelet: Any, make_plugin: Any
) -> None:
    """Five kubelet restarts: each gets exactly one registration, and the kubelet ends up
    with a live stream each time (a second registration right after the first makes the
    kubelet disconnect the newer endpoint when the older stream ends)."""
    kubelet = make_kubelet()
    make_plugin()
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE))
    for n in range(2, 7):
        kubelet.restart()
        kubelet.wait_for(lambda n=n: len(kubelet.ok_registrations()) >= n and kubelet.devices(
            RESOURCE))  # fmt: skip
        time.sleep(0.5)  # a second, spurious registration would come within this
        assert len(kubelet.ok_registrations()) == n
        assert kubelet.devices(RESOURCE) == HEALTHY_VFS


def test_a_stream_ended_by_the_kubelet_is_registered_again(
    make_kubelet: Any, make_plugin: Any
) -> None:
    """The kubelet ends ListAndWatch without restarting (it never dials again by itself):
    the plugin registers again and the devices flow."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE))
    kubelet.drop_stream(RESOURCE)
    kubelet.wait_for(lambda: kubelet.streams[0].ended)
    kubelet.wait_for(lambda: len(kubelet.ok_registrations()) == 2 and kubelet.devices(RESOURCE))
    assert kubelet.devices(RESOURCE) == HEALTHY_VFS
    registered = plugin.metrics.registry.get_sample_value(
        "podres_plugin_registered", {"resource": RESOURCE}
    )
    assert registered == 1


def test_a_deleted_plugin_socket_is_served_and_registered_again(
    make_kubelet: Any, make_plugin: Any
) -> None:
    """Someone deletes our socket file: a new one is served and registered."""
    kubelet = make_kubelet()
    make_plugin()
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE))
    first = kubelet.ok_registrations()[-1].endpoint
    os.unlink(kubelet.directory / first)
    kubelet.wait_for(lambda: len(kubelet.ok_registrations()) == 2, timeout=3)
    assert kubelet.ok_registrations()[-1].endpoint != first
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE) == HEALTHY_VFS)


def test_the_device_plugin_directory_replaced_under_the_plugin(
    make_kubelet: Any, make_plugin: Any
) -> None:
    """The whole directory goes away and comes back with a kubelet: the plugin waits,
    then serves in the new directory and registers."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE))
    kubelet.stop(stale=False)
    shutil.rmtree(kubelet.directory)
    time.sleep(0.5)
    assert plugin.manager.plugins[RESOURCE].socket_path is None  # nowhere to serve
    kubelet.start()
    kubelet.wait_for(lambda: len(kubelet.ok_registrations()) == 2 and kubelet.devices(RESOURCE))
    assert kubelet.devices(RESOURCE) == HEALTHY_VFS


def test_hardware_absent_at_start_is_registered_empty_then_advertised(
    make_kubelet: Any, make_plugin: Any, tmp_path: Path
) -> None:
    """A rule matching nothing registers with an empty list; the VFs appear once written."""
    kubelet = make_kubelet()
    make_plugin(sysfs=False)
    kubelet.wait_for(lambda: kubelet.live_stream(RESOURCE))
    assert kubelet.devices(RESOURCE) == []
    write_sysfs(tmp_path / "sys")
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE) == HEALTHY_VFS, timeout=5)


def test_metrics_and_health_endpoints(make_kubelet: Any, make_plugin: Any) -> None:
    """/metrics carries the plugin's families; /healthz and /readyz answer 200; others 404."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE) and plugin.metrics.all_registered())
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
        "podres_plugin_build_info{version=",
        f'podres_plugin_allocations_total{{resource="{RESOURCE}",result="success"}} 0.0',
    ):
        assert line in text


def test_stop_ends_the_stream_and_removes_the_socket(make_kubelet: Any, make_plugin: Any) -> None:
    """Stopping ends the kubelet's stream and leaves only kubelet.sock behind."""
    kubelet = make_kubelet()
    plugin = make_plugin()
    kubelet.wait_for(lambda: kubelet.devices(RESOURCE))
    begun = time.monotonic()
    plugin.stop("test")
    assert time.monotonic() - begun < 3.0
    kubelet.wait_for(lambda: all(s.ended for s in kubelet.streams), timeout=3)
    assert sockets(kubelet) == ["kubelet.sock"]


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
    kubelet.wait_for(lambda: kubelet.devices("nvidia.com/gpu"))
    reg = kubelet.ok_registrations()[-1]
    assert reg.request_options == reg.dialed_options == (True, True)
    ids = [d[0] for d in kubelet.devices("nvidia.com/gpu") or []]
    assert ids == [f"{g}::{n}" for g in GPUS for n in (0, 1)]
    stub = kubelet.plugin_stub("nvidia.com/gpu")
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
    kubelet.wait_for(
        lambda: (
            {d[1] for d in kubelet.devices("nvidia.com/gpu") or [] if GPUS[1] in d[0]}
            == {"Unhealthy"}
        ),
        timeout=3,
    )
    assert time.monotonic() - emitted < 1.0
    with pytest.raises(grpc.RpcError) as info:
        stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=[f"{GPUS[1]}::1"]))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    kubelet.wait_for(
        lambda: {d[1] for d in kubelet.devices("nvidia.com/gpu") or []} == {"Healthy"}, timeout=4
    )
