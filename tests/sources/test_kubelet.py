"""The kubelet client against the simulated kubelet, over real gRPC on a unix socket."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from podres_exporter.core.errors import (
    KubeletRateLimited,
    KubeletResponseTooLarge,
    KubeletUnavailable,
)
from podres_exporter.core.model import ApiVersion, Support
from podres_exporter.sources.kubelet import KubeletClient
from podres_sim import SimKubelet, synthetic_scenario
from tests.support import wait_until

MakeSim = Callable[..., SimKubelet]


def test_reads_pods_and_allocatable_from_v1(make_sim: MakeSim) -> None:
    """List and GetAllocatableResources become model objects with CPUs, devices and topology."""
    sim = make_sim("demo")
    client = KubeletClient(str(sim.socket_path))
    r = client.read()
    assert r.api_version is ApiVersion.V1
    assert r.allocatable_support is Support.SERVED
    assert r.allocatable is not None
    assert len(r.pods) >= 30
    assert r.allocatable.cpu_ids == frozenset(sim.node.spec.allocatable_cpus)
    exclusive = [c for p in r.pods for c in p.containers if c.cpu_ids]
    assert exclusive, "the demo has Guaranteed containers with exclusive CPUs"
    gpu = [d for d in r.allocatable.devices if d.resource == "nvidia.com/gpu"]
    assert gpu and all(d.numa is not None for d in gpu)
    stats = client.stats()
    assert stats.counts[("List", "OK")] == 1
    assert stats.counts[("GetAllocatableResources", "OK")] == 1
    client.close()


def test_falls_back_to_v1alpha1(make_sim: MakeSim) -> None:
    """A kubelet without v1 (UNIMPLEMENTED) is read through v1alpha1, devices only."""
    sim = make_sim("v1alpha1")
    client = KubeletClient(str(sim.socket_path))
    with capture_logs() as logs:
        r = client.read()
        client.read()
    assert r.api_version is ApiVersion.V1ALPHA1
    assert r.allocatable is None
    assert r.allocatable_support is Support.UNIMPLEMENTED
    assert any(c.devices for p in r.pods for c in p.containers)
    assert [e["event"] for e in logs].count("kubelet_api_fallback") == 1
    assert client.stats().counts[("List", "UNIMPLEMENTED")] == 1
    assert client.stats().counts[("v1alpha1.List", "OK")] == 2


@pytest.mark.parametrize(
    ("mode", "support"), [("disabled", Support.DISABLED), ("unimplemented", Support.UNIMPLEMENTED)]
)
def test_goes_on_without_get_allocatable(make_sim: MakeSim, mode: str, support: Support) -> None:
    """GetAllocatableResources disabled or unimplemented: reading goes on, logged once."""
    sim = make_sim("minimal", get_allocatable=mode)
    client = KubeletClient(str(sim.socket_path))
    with capture_logs() as logs:
        for _ in range(3):
            r = client.read()
    assert r.allocatable is None
    assert r.allocatable_support is support
    assert r.pods
    events = [e for e in logs if e["event"] == "kubelet_rpc_not_served"]
    assert len(events) == 1 and events[0]["method"] == "GetAllocatableResources"


def test_get_where_served_and_list_fallback(make_sim: MakeSim) -> None:
    """Get answers one pod; when disabled, the client filters List; an unknown pod is None."""
    sim = make_sim("minimal")
    client = KubeletClient(str(sim.socket_path))
    first = client.read().pods[0]
    assert client.get_pod(first.namespace, first.name) == first
    assert client.get_support is Support.SERVED
    assert client.get_pod("nowhere", "nothing") is None
    sim.set_behaviour(get="disabled")
    assert client.get_pod(first.namespace, first.name) == first
    assert support_of(client) is Support.DISABLED


@pytest.mark.slow  # 20,000 pods
def test_response_over_4mib(make_sim: MakeSim) -> None:
    """A >4 MiB List is read with the default 16 MiB limit; a 4 MiB limit names the flag."""
    sim = make_sim(synthetic_scenario(pods=20000))
    r = KubeletClient(str(sim.socket_path)).read()
    assert len(r.pods) == 20000
    small = KubeletClient(str(sim.socket_path), max_message_bytes=4 * 2**20)
    with pytest.raises(KubeletResponseTooLarge, match="--kubelet-max-message-size"):
        small.read()


def test_rate_limit_is_a_distinct_error(make_sim: MakeSim) -> None:
    """Past the kubelet's burst, calls fail with KubeletRateLimited, not a crash."""
    sim = make_sim("minimal", rate_limit=True)
    client = KubeletClient(str(sim.socket_path))
    with pytest.raises(KubeletRateLimited, match="rate limit"):
        for _ in range(50):
            client.read()
    assert client.stats().counts[("List", "OK")] >= 4


def test_missing_socket_names_the_flag(tmp_path: object) -> None:
    """No socket at the path: KubeletUnavailable naming --kubelet-socket, no gRPC wait."""
    client = KubeletClient("/nonexistent/kubelet.sock")
    with pytest.raises(KubeletUnavailable, match="--kubelet-socket"):
        client.read()


def test_reconnects_after_kubelet_restart(make_sim: MakeSim) -> None:
    """A re-created socket (new inode) is noticed and the channel rebuilt."""
    sim = make_sim("minimal")
    client = KubeletClient(str(sim.socket_path))
    before = client.read()
    sim.stop()
    with pytest.raises(KubeletUnavailable):
        client.read()
    with capture_logs() as logs:
        sim.restart(warmup=0)
        after = client.read()
    assert {p.name for p in after.pods} == {p.name for p in before.pods}
    assert any(e["event"] == "kubelet_socket_recreated" for e in logs)


def connections_to(socket_path: str) -> int:
    """Open connections to the unix socket at ``socket_path``, as the kernel lists them
    (``/proc/net/unix``: the server's end of each one is connected, state 03, with the
    socket's path)."""
    count = 0
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == socket_path and fields[5] == "03":
            count += 1
    return count


def test_release_closes_the_connection_and_keeps_what_was_probed(make_sim: MakeSim) -> None:
    """Released (between polls far apart): the connection closes; the next read opens a
    new one and does not ask again for what the same kubelet did not serve."""
    sim = make_sim("minimal", get_allocatable="unimplemented")
    path = str(sim.socket_path)
    client = KubeletClient(path)
    with capture_logs() as logs:
        first = client.read()
        assert connections_to(path) == 1
        client.release()
        wait_until(lambda: connections_to(path) == 0)
        second = client.read()
        assert connections_to(path) == 1
        client.release()
        client.release()  # twice is once
        wait_until(lambda: connections_to(path) == 0)
        third = client.read()
    assert second.pods == first.pods == third.pods
    assert third.allocatable_support is Support.UNIMPLEMENTED
    counts = client.stats().counts
    assert counts[("List", "OK")] == 3
    assert counts[("GetAllocatableResources", "UNIMPLEMENTED")] == 1  # asked once
    events = [e["event"] for e in logs]
    assert events.count("kubelet_rpc_not_served") == 1
    assert "kubelet_socket_recreated" not in events
    client.close()


def test_a_kubelet_restarted_while_released_is_probed_again(make_sim: MakeSim) -> None:
    """The socket re-created while the channel was released: a new kubelet, perhaps
    another version; what the old one did not serve is asked again."""
    sim = make_sim("minimal", get_allocatable="unimplemented")
    client = KubeletClient(str(sim.socket_path))
    assert client.read().allocatable_support is Support.UNIMPLEMENTED
    client.release()
    sim.set_behaviour(get_allocatable="served")
    with capture_logs() as logs:
        sim.restart(warmup=0)
        after = client.read()
    assert after.allocatable_support is Support.SERVED
    assert after.allocatable is not None
    assert any(e["event"] == "kubelet_socket_recreated" for e in logs)
    client.close()


def support_of(client: KubeletClient) -> Support:
    """What the client knows of Get now (a call, so the type checker does not narrow it)."""
    return client.get_support
