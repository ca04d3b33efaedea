"""The DevicePlugin service over real gRPC on a unix socket, fed by a real health loop."""

from __future__ import annotations

import io
import json
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from podres_exporter.daemon import process
from podres_exporter.deviceplugin.config import parse_config
from podres_exporter.deviceplugin.metrics import PluginMetrics
from podres_exporter.deviceplugin.monitor import Discoverer, Monitor
from podres_exporter.deviceplugin.servicer import DevicePluginServicer

RESOURCE = "example.com/render"
NODES = ("renderD128", "renderD129", "renderD130")


@dataclass
class Served:
    stub: Any
    monitor: Monitor
    metrics: PluginMetrics
    dev: Path


@pytest.fixture
def served(sockdir: Path, tmp_path: Path) -> Iterator[Served]:
    """A dev-kind resource (pre_start on) served on a socket, its health loop running."""
    dev = tmp_path / "dev"
    (dev / "dri").mkdir(parents=True)
    for name in NODES:
        (dev / "dri" / name).touch()
    config = parse_config(
        {
            "resource": [
                {
                    "name": RESOURCE,
                    "pre_start": True,
                    "discover": {"kind": "dev", "glob": "dri/renderD*"},
                }
            ]
        }
    )
    metrics = PluginMetrics("test", [RESOURCE])
    discoverer = Discoverer(config, sysfs_root="/x", dev_root=str(dev), gpu_backend=None)
    monitor = Monitor(config, discoverer, metrics)
    monitor.check()
    monitor.start()
    servicer = DevicePluginServicer(
        config.resources[0], monitor.boards[RESOURCE], metrics, health_check=monitor.check
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=16))
    pb_grpc.add_DevicePluginServicer_to_server(servicer, server)
    path = sockdir / "plugin.sock"
    server.add_insecure_port(f"unix://{path}")
    server.start()
    channel = grpc.insecure_channel(f"unix://{path}")
    yield Served(pb_grpc.DevicePluginStub(channel), monitor, metrics, dev)
    channel.close()
    monitor.stop()
    server.stop(None).wait()


def stream_into(stub: Any) -> tuple[Any, queue.Queue[list[tuple[str, str]]]]:
    call = stub.ListAndWatch(pb.Empty())
    out: queue.Queue[list[tuple[str, str]]] = queue.Queue()

    def pump() -> None:
        try:
            for msg in call:
                out.put([(d.ID, d.health) for d in msg.devices])
        except grpc.RpcError:
            pass

    threading.Thread(target=pump, daemon=True).start()
    return call, out


def test_options_ask_for_pre_start_and_offer_preferred_allocation(served: Served) -> None:
    """GetDevicePluginOptions reflects pre_start and always offers GetPreferredAllocation."""
    options = served.stub.GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert options.pre_start_required is True
    assert options.get_preferred_allocation_available is True


def test_list_and_watch_sends_the_complete_list_then_each_health_change_within_1s(
    served: Served,
) -> None:
    """The first message is the whole list; a node that vanishes (and comes back) is
    re-sent complete, within a second, at the default 500 ms health interval."""
    call, out = stream_into(served.stub)
    first = out.get(timeout=5)
    assert first == [(n, "Healthy") for n in NODES]
    removed_at = time.monotonic()
    (served.dev / "dri" / "renderD129").unlink()
    second = out.get(timeout=2)
    assert time.monotonic() - removed_at < 1.0
    assert second == [
        ("renderD128", "Healthy"),
        ("renderD129", "Unhealthy"),
        ("renderD130", "Healthy"),
    ]
    back_at = time.monotonic()
    (served.dev / "dri" / "renderD129").touch()
    assert out.get(timeout=2) == first
    assert time.monotonic() - back_at < 1.0
    assert out.empty()  # nothing sent while nothing changed
    streams = served.metrics.registry.get_sample_value(
        "podres_plugin_list_and_watch_streams", {"resource": RESOURCE}
    )
    assert streams == 1
    call.cancel()


def test_allocate_unknown_ids_is_invalid_argument_naming_them(served: Served) -> None:
    """Allocate of ids the plugin does not advertise fails INVALID_ARGUMENT with the ids."""
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=["renderD128", "card9"])]
    )
    with pytest.raises(grpc.RpcError) as info:
        served.stub.Allocate(request, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "card9" in (info.value.details() or "")
    failures = served.metrics.registry.get_sample_value(
        "podres_plugin_allocations_total", {"resource": RESOURCE, "result": "unknown"}
    )
    assert failures == 1


def test_allocate_gives_the_device_nodes(served: Served) -> None:
    """A good Allocate answers one container response with the nodes, rw; no mounts and
    no annotations, ever."""
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devices_ids=["renderD130"])]
    )
    resp = served.stub.Allocate(request, timeout=5)
    (container,) = resp.container_responses
    assert [(d.container_path, d.host_path, d.permissions) for d in container.devices] == [
        ("/dev/dri/renderD130", "/dev/dri/renderD130", "rw")
    ]
    assert (list(container.mounts), dict(container.annotations)) == ([], {})


def test_a_repeated_allocate_answers_the_same_until_the_device_turns_unhealthy(
    served: Served,
) -> None:
    """The same ids answer the same response (and count each success) while the inventory
    stands; once the device is gone, the same request is refused, not answered from before."""
    request = pb.AllocateRequest(
        container_requests=[
            pb.ContainerAllocateRequest(devices_ids=["renderD129", "renderD128"]),
            pb.ContainerAllocateRequest(devices_ids=["renderD129", "renderD128"]),
        ]
    )
    first = served.stub.Allocate(request, timeout=5)
    second = served.stub.Allocate(request, timeout=5)
    assert first == second
    assert [d.host_path for d in first.container_responses[1].devices] == [
        "/dev/dri/renderD129",
        "/dev/dri/renderD128",
    ]
    ok = served.metrics.registry.get_sample_value(
        "podres_plugin_allocations_total", {"resource": RESOURCE, "result": "success"}
    )
    assert ok == 4
    (served.dev / "dri" / "renderD128").unlink()
    served.monitor.check()
    with pytest.raises(grpc.RpcError) as info:
        served.stub.Allocate(request, timeout=5)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "renderD128 (device node gone)" in (info.value.details() or "")


def test_many_concurrent_allocate_calls_all_answer(served: Served) -> None:
    """Sixty Allocate calls from twelve threads, with a stream open, all succeed."""
    call, out = stream_into(served.stub)
    out.get(timeout=5)

    def one(i: int) -> str:
        ids = [NODES[i % 3]]
        resp = served.stub.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)]),
            timeout=10,
        )
        return str(resp.container_responses[0].devices[0].host_path)

    with ThreadPoolExecutor(max_workers=12) as pool:
        paths = list(pool.map(one, range(60)))
    assert paths == [f"/dev/dri/{NODES[i % 3]}" for i in range(60)]
    ok = served.metrics.registry.get_sample_value(
        "podres_plugin_allocations_total", {"resource": RESOURCE, "result": "success"}
    )
    assert ok == 60
    call.cancel()


def test_pre_start_rechecks_health_at_once(served: Served) -> None:
    """PreStartContainer re-checks now: a node gone a moment ago is FAILED_PRECONDITION."""
    ok = pb.PreStartContainerRequest(devices_ids=["renderD128"])
    served.stub.PreStartContainer(ok, timeout=5)
    (served.dev / "dri" / "renderD128").unlink()
    with pytest.raises(grpc.RpcError) as info:
        served.stub.PreStartContainer(ok, timeout=5)  # before the next periodic check
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "renderD128 (device node gone)" in (info.value.details() or "")


def test_preferred_allocation_answers_each_container(served: Served) -> None:
    """GetPreferredAllocation answers one response per container request."""
    request = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=list(NODES), must_include_deviceIDs=[], allocation_size=2
            ),
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=list(NODES),
                must_include_deviceIDs=["renderD130"],
                allocation_size=1,
            ),
        ]
    )
    resp = served.stub.GetPreferredAllocation(request, timeout=5)
    assert [list(r.deviceIDs) for r in resp.container_responses] == [
        ["renderD128", "renderD129"],
        ["renderD130"],
    ]


# ------------------------------------------------------------------ bounded logs and errors


def logged(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_an_allocate_of_10000_containers_logs_one_short_line(served: Served) -> None:
    """One Allocate call, one log line: counts and the first few ids, not one per container."""
    out = io.StringIO()
    process.configure_logging("info", "json", stream=out)
    request = pb.AllocateRequest(
        container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[NODES[i % 3]]) for i in range(10_000)
        ]
    )
    resp = served.stub.Allocate(request, timeout=30)
    assert len(resp.container_responses) == 10_000
    assert len(out.getvalue()) < 2048
    (event,) = logged(out)
    assert event["event"] == "allocated"
    assert (event["containers"], event["devices"]) == (10_000, 10_000)
    assert event["device_ids"] == "renderD128, renderD129, renderD130, renderD128 and 9996 more"
    ok = served.metrics.registry.get_sample_value(
        "podres_plugin_allocations_total", {"resource": RESOURCE, "result": "success"}
    )
    assert ok == 10_000


def test_a_1mb_device_id_is_refused_with_a_short_error_and_a_short_log(served: Served) -> None:
    """An unknown id of 1 MB (and 10,000 more unknown ids): INVALID_ARGUMENT whose text
    names the first few, cut, and one log line of a few KB."""
    out = io.StringIO()
    process.configure_logging("info", "json", stream=out)
    huge = "card" + "9" * 1_000_000
    many = [f"card{i}" for i in range(10_000)]
    request = pb.AllocateRequest(
        container_requests=[
            pb.ContainerAllocateRequest(devices_ids=["renderD128"]),
            pb.ContainerAllocateRequest(devices_ids=[huge, "renderD129", *many]),
            pb.ContainerAllocateRequest(devices_ids=[huge]),  # 3 MB in all: under gRPC's 4 MB
        ]
    )
    with pytest.raises(grpc.RpcError) as info:
        served.stub.Allocate(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = info.value.details() or ""
    assert len(details) < 512
    assert details.startswith(f"unknown device ids for {RESOURCE}: card999")
    assert "chars)" in details and details.endswith("card0, card1, card2 and 9997 more")
    assert len(out.getvalue()) < 4096
    (event,) = logged(out)
    assert event["event"] == "allocate_refused"
    assert (event["container"], event["containers"], event["reason"]) == (1, 3, "unknown")


def test_a_1mb_id_in_pre_start_is_refused_short(served: Served) -> None:
    """PreStartContainer with a 1 MB unknown id: INVALID_ARGUMENT, a short text."""
    with pytest.raises(grpc.RpcError) as info:
        served.stub.PreStartContainer(
            pb.PreStartContainerRequest(devices_ids=["x" * 1_000_000]), timeout=10
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len(info.value.details() or "") < 512
