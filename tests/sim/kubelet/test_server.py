"""The simulated kubelet over real gRPC on a real unix socket, with the generated stubs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from podres_exporter._generated.podresources.v1 import api_pb2, api_pb2_grpc
from podres_exporter._generated.podresources.v1alpha1 import api_pb2 as alpha_pb2
from podres_exporter._generated.podresources.v1alpha1 import api_pb2_grpc as alpha_grpc
from podres_sim import (
    V1_GET_ALLOCATABLE_METHOD,
    V1_GET_METHOD,
    V1_LIST_METHOD,
    V1ALPHA1_LIST_METHOD,
    ContainerSpec,
    DeviceSpec,
    KubeletBehaviour,
    NodeSpec,
    PodSpec,
    Scenario,
    SimKubelet,
    TokenBucket,
    load_builtin,
    synthetic_scenario,
)

MiB = 2**20
V1Stub: Any = api_pb2_grpc.PodResourcesListerStub
AlphaStub: Any = alpha_grpc.PodResourcesListerStub
NIC = "example.com/nic"
GPU = "example.com/gpu"


def channel(sim: SimKubelet, max_receive: int = 16 * MiB) -> grpc.Channel:
    """A client channel of its own (no subchannel shared with earlier channels)."""
    return grpc.insecure_channel(
        sim.target,
        options=[
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.max_receive_message_length", max_receive),
        ],
    )


class Client:
    """The generated v1 and v1alpha1 stubs on one channel."""

    def __init__(self, sim: SimKubelet, max_receive: int = 16 * MiB) -> None:
        self.channel = channel(sim, max_receive)
        self.v1 = V1Stub(self.channel)
        self.alpha = AlphaStub(self.channel)

    def list(self) -> Any:
        return self.v1.List(api_pb2.ListPodResourcesRequest(), timeout=10)

    def allocatable(self) -> Any:
        return self.v1.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=10)

    def get(self, namespace: str, name: str) -> Any:
        req = api_pb2.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        return self.v1.Get(req, timeout=10)

    def list_alpha(self) -> Any:
        return self.alpha.List(alpha_pb2.ListPodResourcesRequest(), timeout=10)


def rpc_error(call: Any, *args: Any) -> grpc.RpcError:
    """The RpcError a call raises."""
    with pytest.raises(grpc.RpcError) as info:
        call(*args)
    return info.value


def small_scenario(**kubelet: Any) -> Scenario:
    """One NUMA-0 NIC, one NIC spanning both nodes, one floating NIC, one unhealthy GPU."""
    node = NodeSpec.uniform(
        2,
        4,
        name="n1",
        reserved_cpus=(0, 4),
        memory_policy="static",
        memory={"memory": "4Gi", "hugepages-2Mi": "512Mi"},
        devices=[
            DeviceSpec(NIC, "nic-0", (0,)),
            DeviceSpec(NIC, "nic-wide", (0, 1)),
            DeviceSpec(NIC, "nic-float", None),
            DeviceSpec(GPU, "gpu-bad", (1,), healthy=False),
        ],
    )
    pods = (
        PodSpec.of(
            "default",
            "pinned",
            ContainerSpec.of("side", cpu="100m", memory="64Mi", kind="sidecar"),
            ContainerSpec.of("main", cpu=2, memory="1Gi", devices={NIC: 3}),
        ),
        PodSpec.of("default", "shared", ContainerSpec.of("main", cpu="250m")),
        PodSpec.of("default", "rejected", ContainerSpec.of("main", devices={GPU: 1})),
    )
    return Scenario(node=node, pods=pods, kubelet=KubeletBehaviour(**kubelet), seed=3)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimKubelet]:
    with SimKubelet(small_scenario(), tmp_path / "k.sock") as kubelet:
        yield kubelet


@pytest.fixture
def client(sim: SimKubelet) -> Iterator[Client]:
    c = Client(sim)
    yield c
    c.channel.close()


def by_name(response: Any) -> dict[str, Any]:
    return {p.name: p for p in response.pod_resources}


# ------------------------------------------------------------------------------ List


def test_list_reports_exclusive_cpus_devices_memory_and_container_order(client: Client) -> None:
    """List carries exclusive cpu_ids, per-device entries, pinned memory; sidecars first."""
    pods = by_name(client.list())
    assert set(pods) == {"pinned", "shared", "rejected"}
    pinned = pods["pinned"]
    assert pinned.namespace == "default"
    assert [c.name for c in pinned.containers] == ["side", "main"]
    side, main = pinned.containers
    assert list(side.cpu_ids) == []
    assert list(main.cpu_ids) == [1, 2]
    assert {(m.memory_type, m.size) for m in main.memory} == {("memory", 2**30)}
    assert [n.ID for n in main.memory[0].topology.nodes] == [0]
    assert list(pods["shared"].containers[0].cpu_ids) == []


def test_rejected_pod_is_listed_empty_unless_hidden(sim: SimKubelet, client: Client) -> None:
    """A pod rejected at admission appears with empty resources; list_rejected=False hides it."""
    (c,) = by_name(client.list())["rejected"].containers
    assert c.name == "main"
    assert not c.devices and not c.cpu_ids and not c.memory and not c.dynamic_resources
    sim.set_behaviour(list_rejected=False)
    assert "rejected" not in by_name(client.list())


def test_numa_zero_is_a_present_topology_and_no_topology_is_absent(client: Client) -> None:
    """NUMA node 0 is sent as a TopologyInfo with ID 0; a device without topology has none."""
    main = by_name(client.list())["pinned"].containers[1]
    entries = [
        (d.device_ids[0], d.HasField("topology"), [n.ID for n in d.topology.nodes])
        for d in main.devices
    ]
    assert ("nic-0", True, [0]) in entries
    assert ("nic-float", False, []) in entries
    assert main.memory[0].HasField("topology")


def test_per_device_grouping_repeats_a_device_per_numa_node(client: Client) -> None:
    """Per-device grouping: one id per entry; a device on two NUMA nodes appears twice."""
    main = by_name(client.list())["pinned"].containers[1]
    assert all(len(d.device_ids) == 1 for d in main.devices)
    wide = [[n.ID for n in d.topology.nodes] for d in main.devices if d.device_ids[0] == "nic-wide"]
    assert sorted(wide) == [[0], [1]]
    assert len(main.devices) == 4


def test_per_resource_grouping_puts_ids_together(sim: SimKubelet, client: Client) -> None:
    """Per-resource grouping (kubelet ~1.20): one entry per resource with every id."""
    sim.set_behaviour(device_grouping="per_resource")
    main = by_name(client.list())["pinned"].containers[1]
    (entry,) = main.devices
    assert entry.resource_name == NIC
    assert sorted(entry.device_ids) == ["nic-0", "nic-float", "nic-wide"]
    assert [n.ID for n in entry.topology.nodes] == [0, 1]


def test_pod_order_changes_between_calls(sim: SimKubelet, client: Client) -> None:
    """List's pod order is shuffled on every call, the set of pods is not."""
    for i in range(12):
        sim.admit(PodSpec.of("extra", f"p{i}", ContainerSpec.of("c")))
    orders = {tuple(p.name for p in client.list().pod_resources) for _ in range(8)}
    assert len(orders) > 1
    assert len({frozenset(o) for o in orders}) == 1


def test_admit_and_remove_show_in_list(sim: SimKubelet, client: Client) -> None:
    """Pods admitted or removed at run time show up in the next List."""
    sim.admit(PodSpec.of("default", "late", ContainerSpec.of("c", cpu=1, memory="1Gi")))
    assert list(by_name(client.list())["late"].containers[0].cpu_ids)
    assert sim.remove("default", "late")
    assert "late" not in by_name(client.list())
    assert not sim.remove("default", "late")


# ------------------------------------------------------------------ GetAllocatableResources


def test_allocatable_is_all_cpus_minus_reserved_and_does_not_shrink(client: Client) -> None:
    """Static policy: allocatable cpu_ids = all CPUs but the reserved, exclusive ones included."""
    resp = client.allocatable()
    assert list(resp.cpu_ids) == [1, 2, 3, 5, 6, 7]


def test_allocatable_devices_are_the_healthy_ones(sim: SimKubelet, client: Client) -> None:
    """Allocatable devices list only healthy devices, and follow health changes."""
    ids = {d.device_ids[0] for d in client.allocatable().devices}
    assert ids == {"nic-0", "nic-wide", "nic-float"}
    sim.set_device_health(NIC, "nic-0", False)
    sim.set_device_health(GPU, "gpu-bad", True)
    ids = {d.device_ids[0] for d in client.allocatable().devices}
    assert ids == {"nic-wide", "nic-float", "gpu-bad"}
    assert "nic-0" in {
        d.device_ids[0] for d in by_name(client.list())["pinned"].containers[1].devices
    }


def test_allocatable_memory_is_one_block_per_numa_node_per_type(client: Client) -> None:
    """Static memory manager: one allocatable block per NUMA node and memory type."""
    blocks = {
        (m.memory_type, m.size, tuple(n.ID for n in m.topology.nodes))
        for m in client.allocatable().memory
    }
    assert blocks == {
        ("memory", 4 * 2**30, (0,)),
        ("memory", 4 * 2**30, (1,)),
        ("hugepages-2Mi", 512 * MiB, (0,)),
        ("hugepages-2Mi", 512 * MiB, (1,)),
    }


def test_policy_none_has_empty_allocatable_cpus(tmp_path: Path) -> None:
    """CPU policy none: allocatable cpu_ids is empty and no container has cpu_ids."""
    with SimKubelet("policy-none", tmp_path / "k.sock") as sim:
        c = Client(sim)
        assert list(c.allocatable().cpu_ids) == []
        assert all(not ctr.cpu_ids for p in c.list().pod_resources for ctr in p.containers)
        assert any(ctr.devices for p in c.list().pod_resources for ctr in p.containers)
        c.channel.close()


# ------------------------------------------------------------------------------ Get


def test_get_returns_one_pod(client: Client) -> None:
    """Get returns the pod asked for, like List does."""
    pod = client.get("default", "pinned").pod_resources
    assert pod.name == "pinned"
    assert [c.name for c in pod.containers] == ["side", "main"]


@pytest.mark.parametrize(
    ("knob", "mode", "answer"),
    [
        (
            "get_allocatable",
            "disabled",
            (grpc.StatusCode.UNKNOWN, "Pod Resources API GetAllocatableResources disabled"),
        ),
        (
            "get_allocatable",
            "unimplemented",
            (
                grpc.StatusCode.UNIMPLEMENTED,
                "unknown method GetAllocatableResources for service v1.PodResourcesLister",
            ),
        ),
        ("get", "disabled", (grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")),
        (
            "get",
            "unimplemented",
            (grpc.StatusCode.UNIMPLEMENTED, "unknown method Get for service v1.PodResourcesLister"),
        ),
    ],
)
def test_optional_rpc_switched_off(
    sim: SimKubelet, client: Client, knob: str, mode: str, answer: tuple[grpc.StatusCode, str]
) -> None:
    """GetAllocatableResources or Get gated off answers UNKNOWN with the kubelet's message;
    missing, UNIMPLEMENTED."""
    sim.set_behaviour(**{knob: mode})
    if knob == "get":
        err = rpc_error(client.get, "default", "pinned")
    else:
        err = rpc_error(client.allocatable)
    assert (err.code(), err.details()) == answer


def test_get_of_unknown_pod(client: Client) -> None:
    """Get of a pod the kubelet does not know answers UNKNOWN 'pod X in namespace Y not found'."""
    err = rpc_error(client.get, "nowhere", "ghost")
    assert err.code() == grpc.StatusCode.UNKNOWN
    assert err.details() == "pod ghost in namespace nowhere not found"


# ------------------------------------------------------------------------------ v1alpha1


def test_v1_kubelet_also_serves_v1alpha1(client: Client) -> None:
    """A v1 kubelet still serves v1alpha1 List: devices without topology."""
    pods = {p.name: p for p in client.list_alpha().pod_resources}
    main = pods["pinned"].containers[1]
    assert {d.device_ids[0] for d in main.devices} == {"nic-0", "nic-wide", "nic-float"}


def test_old_kubelet_serves_only_v1alpha1(tmp_path: Path) -> None:
    """With api=v1alpha1 every v1 call is UNIMPLEMENTED and v1alpha1 List works."""
    with SimKubelet("v1alpha1", tmp_path / "k.sock") as sim:
        c = Client(sim)
        for call in (c.list, c.allocatable):
            err = rpc_error(call)
            assert err.code() == grpc.StatusCode.UNIMPLEMENTED
        pods = {p.name: p for p in c.list_alpha().pod_resources}
        (dev,) = pods["two-gpus"].containers[0].devices
        assert dev.resource_name == "nvidia.com/gpu" and len(dev.device_ids) == 2
        assert sim.request_count[V1_LIST_METHOD] == 0
        assert sim.request_count[V1ALPHA1_LIST_METHOD] == 1
        c.channel.close()


# ------------------------------------------------------------------------------ rate limit


def test_rate_limit_rejects_after_the_burst(sim: SimKubelet, client: Client) -> None:
    """With the rate limit on, back-to-back calls beyond the burst get RESOURCE_EXHAUSTED."""
    sim.set_behaviour(rate_limit=True)
    results: list[str] = []
    for i in range(500):
        call = (client.list, client.allocatable)[i % 2]  # one bucket for all methods
        try:
            call()
            results.append("ok")
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert err.details() == "rejected by rate limit"
            results.append("limited")
            break
    assert results[:10] == ["ok"] * 10
    assert results[-1] == "limited"
    assert sim.rate_limited_count == 1
    time.sleep(0.05)
    client.list()  # tokens come back at 100 per second


def test_token_bucket_refills_at_its_rate() -> None:
    """The bucket starts full with 10 tokens and gains 100 per second."""
    now = [0.0]
    bucket = TokenBucket(100, 10, clock=lambda: now[0])
    assert [bucket.allow() for _ in range(11)] == [True] * 10 + [False]
    now[0] += 0.025
    assert [bucket.allow() for _ in range(3)] == [True, True, False]


def test_request_count_per_method(sim: SimKubelet, client: Client) -> None:
    """request_count counts every call that reaches the kubelet, per method."""
    client.list()
    client.list()
    client.allocatable()
    client.list_alpha()
    sim.set_behaviour(get="unimplemented")
    rpc_error(client.get, "default", "pinned")
    assert sim.request_count == {
        V1_LIST_METHOD: 2,
        V1_GET_ALLOCATABLE_METHOD: 1,
        V1_GET_METHOD: 0,
        V1ALPHA1_LIST_METHOD: 1,
    }
    assert sim.total_requests == 4
    sim.reset_request_counts()
    assert sim.total_requests == 0


# ------------------------------------------------------------------------------ faults


def test_hung_calls_end_at_the_client_deadline_and_on_release(
    sim: SimKubelet, client: Client
) -> None:
    """hang_calls: a call is counted, never answered, and ends at its deadline; cleared,
    calls are answered again."""
    sim.hang_calls()
    before = sim.total_requests
    err = rpc_error(lambda: client.v1.List(api_pb2.ListPodResourcesRequest(), timeout=0.2))
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert sim.total_requests == before + 1
    sim.hang_calls(False)
    assert by_name(client.list())


def test_a_hung_call_ends_when_the_server_stops(sim: SimKubelet) -> None:
    """Stopping the server while a call hangs cancels it, and stop returns."""
    c = Client(sim)
    sim.hang_calls()
    errors: list[grpc.RpcError] = []

    def call() -> None:
        errors.append(rpc_error(c.list))

    t = threading.Thread(target=call)
    t.start()
    while not sim.total_requests:
        time.sleep(0.01)
    sim.stop()
    t.join(5)
    assert [e.code() for e in errors] == [grpc.StatusCode.UNAVAILABLE]
    c.channel.close()


def test_fail_calls_answers_the_code_on_every_method(sim: SimKubelet, client: Client) -> None:
    """fail_calls: every method answers the code and details until cleared."""
    sim.fail_calls(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
    for call in (client.list, client.allocatable, client.list_alpha):
        err = rpc_error(call)
        assert (err.code(), err.details()) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "rejected by rate limit",
        )
    sim.clear_faults()
    assert by_name(client.list())


def test_garbage_is_no_protobuf_message(sim: SimKubelet, client: Client) -> None:
    """answer_garbage: the answer cannot be decoded (INTERNAL at the client), and the
    bytes are no message a parser accepts."""
    from google.protobuf.message import DecodeError

    from podres_sim.kubelet.server import GARBAGE

    sim.answer_garbage()
    assert rpc_error(client.list).code() == grpc.StatusCode.INTERNAL
    assert rpc_error(client.allocatable).code() == grpc.StatusCode.INTERNAL
    with pytest.raises(DecodeError):
        api_pb2.ListPodResourcesResponse.FromString(GARBAGE)
    sim.answer_garbage(False)
    assert by_name(client.list())


# ------------------------------------------------------------------------------ lifecycle


def test_stop_leaves_a_stale_socket_and_clients_get_unavailable(sim: SimKubelet) -> None:
    """After stop the socket file stays on disk (same inode) and calls fail UNAVAILABLE."""
    inode = os.stat(sim.socket_path).st_ino
    sim.stop()
    assert sim.socket_path.exists()
    assert os.stat(sim.socket_path).st_ino == inode
    c = Client(sim)
    err = rpc_error(c.list)
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    c.channel.close()
    sim.stop()  # twice is fine


def test_restart_recreates_the_socket_and_has_a_warmup_window(sim: SimKubelet) -> None:
    """restart gives a new inode; during warm-up List is empty and allocatable cpu_ids too."""
    inode = os.stat(sim.socket_path).st_ino
    sim.restart(warmup=1.0)
    assert os.stat(sim.socket_path).st_ino != inode
    c = Client(sim)
    assert len(c.list().pod_resources) == 0
    warm = c.allocatable()
    assert list(warm.cpu_ids) == []
    assert len(warm.devices) > 0
    sim.restart(warmup=0.0)
    c.channel.close()
    c = Client(sim)
    assert len(c.list().pod_resources) == 3
    assert list(c.allocatable().cpu_ids) == [1, 2, 3, 5, 6, 7]
    c.channel.close()


def test_context_manager_removes_the_socket(tmp_path: Path) -> None:
    """Leaving the with block stops the server and removes its socket."""
    path = tmp_path / "k.sock"
    with SimKubelet("minimal", path) as sim:
        assert sim.running and path.exists()
    assert not sim.running
    assert not path.exists()
    assert not list(tmp_path.iterdir())


def test_start_twice_is_an_error(sim: SimKubelet) -> None:
    """A running simulator refuses to start again."""
    with pytest.raises(RuntimeError):
        sim.start()


def test_socket_path_too_long(tmp_path: Path) -> None:
    """A socket path longer than a unix socket allows is refused up front."""
    with pytest.raises(ValueError, match="too long"):
        SimKubelet("minimal", tmp_path / ("x" * 120) / "k.sock")


def test_response_larger_than_4_mib(tmp_path: Path) -> None:
    """A List response over 4 MiB is sent: a 16 MiB client gets it, a default client cannot."""
    scenario = synthetic_scenario(20000)
    with SimKubelet(scenario, tmp_path / "k.sock") as sim:
        big = Client(sim)
        resp = big.list()
        assert len(resp.pod_resources) == 20000
        assert resp.ByteSize() > 4 * MiB
        small = Client(sim, max_receive=4 * MiB)
        err = rpc_error(small.list)
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        big.channel.close()
        small.channel.close()


# ------------------------------------------------------------------------------ churn and threads


def test_churn_thread_changes_pods_and_stops_fast(tmp_path: Path) -> None:
    """start_churn replaces pods in the background; stop joins the thread at once."""
    with SimKubelet("demo", tmp_path / "k.sock") as sim:
        c = Client(sim)
        sim.set_behaviour(rate_limit=False)
        before = set(by_name(c.list()))
        sim.start_churn(0.01)
        deadline = time.monotonic() + 5
        while set(by_name(c.list())) == before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert set(by_name(c.list())) != before
        assert len(by_name(c.list())) == len(before)
        started = time.monotonic()
        sim.stop()
        assert time.monotonic() - started < 2
        assert not any(t.name == "sim-kubelet-churn" for t in threading.enumerate())
        c.channel.close()


def test_concurrent_lists_during_churn_are_consistent(tmp_path: Path) -> None:
    """Many clients listing while churn runs always see a consistent node: no CPU twice."""
    with SimKubelet("demo", tmp_path / "k.sock") as sim:
        sim.set_behaviour(rate_limit=False)
        sim.start_churn(0.002)
        errors: list[str] = []

        def worker() -> None:
            c = Client(sim)
            for _ in range(15):
                cpus = [
                    cpu
                    for p in c.list().pod_resources
                    for ctr in p.containers
                    for cpu in ctr.cpu_ids
                ]
                if len(cpus) != len(set(cpus)):
                    errors.append("a CPU appears twice")
            c.channel.close()

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


def test_churn_continues_after_restart(tmp_path: Path) -> None:
    """A restart keeps a running churn going."""
    with SimKubelet("demo", tmp_path / "k.sock") as sim:
        sim.start_churn(0.01)
        sim.restart(warmup=0.0)
        assert any(t.name == "sim-kubelet-churn" for t in threading.enumerate())


def test_demo_list_matches_the_node() -> None:
    """The demo served by the simulator has the scenario's pods, DRA claims included."""
    scenario = load_builtin("demo")
    assert scenario.pod_count >= 30


def test_demo_dra_claim_on_the_wire(tmp_path: Path) -> None:
    """DRA claims reach the client: claim names, drivers, pools, devices, CDI names, share id."""
    with SimKubelet("demo", tmp_path / "k.sock") as sim:
        c = Client(sim)
        pod = c.get("ml-inference", "dra-reranker").pod_resources
        (ctr,) = pod.containers
        gpus, nic = ctr.dynamic_resources
        assert gpus.claim_name == "dra-reranker-gpus-7xk2q"
        assert gpus.claim_namespace == "ml-inference"
        assert [r.device_name for r in gpus.claim_resources] == ["gpu-0", "gpu-1"]
        assert [d.name for d in gpus.claim_resources[0].cdi_devices] == [
            "k8s.gpu.example.com/gpu=common",
            "k8s.gpu.example.com/gpu=gpu-0",
        ]
        assert not gpus.claim_resources[0].HasField("share_id")
        assert nic.claim_resources[0].driver_name == "dra.net"
        assert nic.claim_resources[0].HasField("share_id")
        c.channel.close()


# ------------------------------------------------------------------------------ standalone


def test_module_runs_standalone_until_sigterm(tmp_path: Path) -> None:
    """python -m podres_sim serves, writes sysfs, and removes its socket on SIGTERM."""
    sock = tmp_path / "k.sock"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "podres_sim",
            "--scenario",
            "minimal",
            "--socket",
            str(sock),
            "--sysfs-out",
            str(tmp_path / "sys"),
            "--churn-interval",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert sock.exists(), proc.stderr.read() if proc.stderr else ""
        with grpc.insecure_channel(f"unix:{sock}") as ch:
            stub = V1Stub(ch)
            resp = stub.List(api_pb2.ListPodResourcesRequest(), timeout=10, wait_for_ready=True)
        assert {p.name for p in resp.pod_resources} == {"pinned", "shared"}
        assert (tmp_path / "sys/devices/system/cpu/online").read_text() == "0-3\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert not sock.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


def test_module_serves_a_synthetic_scenario(tmp_path: Path) -> None:
    """--scenario synthetic:PODS:N serves Scenario.synthetic with every Nth pod exclusive; a
    malformed one exits 2 naming it."""
    sock = tmp_path / "k.sock"
    argv = [sys.executable, "-m", "podres_sim", "--socket", str(sock)]
    bad = subprocess.run(
        [*argv, "--scenario", "synthetic:many"], check=False, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "synthetic:PODS[:N]" in bad.stderr
    proc = subprocess.Popen([*argv, "--scenario", "synthetic:30:10", "--churn-interval", "0"])
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        with grpc.insecure_channel(f"unix:{sock}") as ch:
            resp = V1Stub(ch).List(
                api_pb2.ListPodResourcesRequest(), timeout=10, wait_for_ready=True
            )
        assert len(resp.pod_resources) == 30
        exclusive = [p for p in resp.pod_resources if any(c.cpu_ids for c in p.containers)]
        assert len(exclusive) == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
