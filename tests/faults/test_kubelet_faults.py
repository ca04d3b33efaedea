"""A misbehaving kubelet under the exporter, run as a process: one that hangs, answers
garbage, rate-limits in a storm, answers more than the exporter accepts, or serves only
v1alpha1. The exporter keeps serving its last good reading, marked stale, logs one event
per change of cause (not one per retry), and recovers."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from podres_exporter._generated.podresources.v1 import api_pb2 as v1
from podres_sim import RATE_LIMITED, SimKubelet
from tests.faults.support import (
    DaemonProcess,
    Starter,
    failed_calls,
    start_exporter,
    total,
)
from tests.support import sample, wait_until

pytestmark = pytest.mark.slow

MakeKubelet = Callable[..., SimKubelet]
FAILED = "kubelet_read_failed"


def served(exporter: DaemonProcess) -> tuple[float | None, float | None]:
    """(kubelet_up, pods) as the exporter serves them."""
    s = exporter.scrape()
    return sample(s, "podres_kubelet_up"), sample(s, "podres_pods")


def recovered(exporter: DaemonProcess, pods: float | None) -> bool:
    return served(exporter) == (1, pods)


def clean_exit(exporter: DaemonProcess) -> None:
    """No traceback in the log; SIGTERM ends it with status 0."""
    assert not exporter.problems(), exporter.problems()[:3]
    code, _ = exporter.terminate()
    assert code == 0, exporter.tail()


def test_hung_kubelet_then_refusing_one(kubelet: MakeKubelet, daemons: Starter) -> None:
    """A kubelet that accepts calls and never answers: every poll times out, the last
    reading stays served with kubelet_up 0, and 20 timeouts log one event naming
    DEADLINE_EXCEEDED; when the kubelet then refuses (UNAVAILABLE) one new event names
    that, whatever the number of refusals; it comes back: one recovery."""
    sim = kubelet("minimal")
    exporter = start_exporter(daemons, sim, kubelet_timeout="100ms", kubelet_backoff_max="100ms")
    _, pods = served(exporter)
    assert pods == len(sim.node.pods)
    sim.hang_calls()
    wait_until(lambda: failed_calls(exporter, "DEADLINE_EXCEEDED") >= 20, timeout=30)
    assert served(exporter) == (0, pods), "the last good reading, marked stale"
    events = exporter.events(FAILED)
    assert 1 <= len(events) <= 2, events
    assert events[-1]["code"] == "DEADLINE_EXCEEDED"

    sim.stop()  # a stale socket file: connections are refused
    sim.clear_faults()
    refused = wait_until(lambda: exporter.events(FAILED, code="UNAVAILABLE"), timeout=10)
    assert "UNAVAILABLE" in refused[0]["error"]
    more = failed_calls(exporter, "UNAVAILABLE") + 10
    wait_until(lambda: failed_calls(exporter, "UNAVAILABLE") >= more, timeout=20)
    unavailable = exporter.events(FAILED, code="UNAVAILABLE")
    # One event for the refusals, however many; before it, one more where a call was in
    # flight when the kubelet stopped (gRPC ends it "Cancelling all calls": another cause).
    assert len([e for e in unavailable if "Connection refused" in e["error"]]) == 1, unavailable
    assert len(unavailable) <= 2, unavailable
    assert len(exporter.events(FAILED)) <= 4

    sim.start()
    wait_until(lambda: recovered(exporter, pods), timeout=10)
    assert len(exporter.events("kubelet_recovered")) == 1
    clean_exit(exporter)


def test_garbage_answers(kubelet: MakeKubelet, daemons: Starter) -> None:
    """Answers that are no protobuf message: INTERNAL, the last reading kept, one event;
    answers again: recovered."""
    sim = kubelet("minimal")
    exporter = start_exporter(daemons, sim)
    _, pods = served(exporter)
    sim.answer_garbage()
    wait_until(lambda: failed_calls(exporter, "INTERNAL") >= 10, timeout=20)
    assert served(exporter) == (0, pods)
    (event,) = exporter.events(FAILED)
    assert event["code"] == "INTERNAL" and "deserializ" in event["error"]
    sim.answer_garbage(False)
    wait_until(lambda: recovered(exporter, pods), timeout=10)
    clean_exit(exporter)


class BadHttp2Server:
    """A unix-socket server that answers every connection with bytes that are no HTTP/2
    (an HTTP/1.1 reply, then a bogus frame) and hangs up."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connections = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen()
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                self.connections += 1
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n\x00\x00\x05\xff\xff\xff\xff")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()
        self.path.unlink(missing_ok=True)


def test_a_socket_that_speaks_no_http2(kubelet: MakeKubelet, daemons: Starter) -> None:
    """The kubelet's socket answered by something that is no gRPC server: the exporter
    keeps the last reading, logs one event, and recovers when the kubelet is back."""
    sim = kubelet("minimal")
    exporter = start_exporter(daemons, sim)
    _, pods = served(exporter)
    sim.stop(remove_socket=True)
    bad = BadHttp2Server(sim.socket_path)
    try:
        wait_until(lambda: bad.connections >= 5, timeout=20)
        wait_until(lambda: served(exporter) == (0, pods), timeout=10)
        events = exporter.events(FAILED)
        assert 1 <= len(events) <= 2, events
    finally:
        bad.close()
    sim.start()
    wait_until(lambda: recovered(exporter, pods), timeout=10)
    clean_exit(exporter)


def test_rate_limit_storm(kubelet: MakeKubelet, daemons: Starter) -> None:
    """RESOURCE_EXHAUSTED on every call for a while: one event naming it, the last
    reading kept; the storm passes: recovered."""
    sim = kubelet("minimal")
    exporter = start_exporter(daemons, sim)
    _, pods = served(exporter)
    sim.fail_calls(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMITED)
    wait_until(lambda: failed_calls(exporter, "RESOURCE_EXHAUSTED") >= 15, timeout=20)
    assert served(exporter) == (0, pods)
    (event,) = exporter.events(FAILED)
    assert event["code"] == "RESOURCE_EXHAUSTED" and RATE_LIMITED in event["error"]
    sim.fail_calls(None)
    wait_until(lambda: recovered(exporter, pods), timeout=10)
    assert len(exporter.events("kubelet_recovered")) == 1
    clean_exit(exporter)


def test_answer_over_the_size_limit(kubelet: MakeKubelet, daemons: Starter) -> None:
    """A 50 MiB answer, over the default 16 MiB limit: refused cleanly, the last reading
    kept and marked stale, one event that names --kubelet-max-message-size; a normal
    answer again: recovered."""
    sim = kubelet("minimal")
    exporter = start_exporter(daemons, sim)
    _, pods = served(exporter)
    big = [v1.PodResources(namespace="bulk", name=f"p{i}-" + "x" * (1 << 20)) for i in range(50)]
    sim.inject_raw_pods(*big)
    wait_until(lambda: failed_calls(exporter, "RESOURCE_EXHAUSTED") >= 3, timeout=30)
    s = exporter.scrape()
    assert (sample(s, "podres_kubelet_up"), sample(s, "podres_pods")) == (0, pods)
    assert total(s, "podres_kubelet_requests_total", code="RESOURCE_EXHAUSTED", method="List")
    age = sample(s, "podres_snapshot_age_seconds") or 0.0
    wait_until(lambda: (sample(exporter.scrape(), "podres_snapshot_age_seconds") or 0) > age + 0.3)
    (event,) = exporter.events(FAILED)
    assert event["code"] == "RESOURCE_EXHAUSTED"
    assert "--kubelet-max-message-size" in event["error"]
    sim.inject_raw_pods()
    wait_until(lambda: recovered(exporter, pods), timeout=10)
    clean_exit(exporter)


def test_v1alpha1_only_kubelet(kubelet: MakeKubelet, daemons: Starter) -> None:
    """A kubelet restarted as an old one serving only v1alpha1: the exporter falls back
    (api_info says so, devices still served, CPU pools absent, one fallback event), and
    goes back to v1 when a newer kubelet replaces it."""
    sim = kubelet("minimal")
    exporter = start_exporter(daemons, sim)

    def api() -> dict[str, float]:
        s = exporter.scrape()
        return {
            dict(labels)["api_version"]: v
            for (name, labels), v in s.items()
            if name == "podres_kubelet_api_info"
        }

    assert api() == {"v1": 1}
    sim.set_behaviour(api="v1alpha1")
    sim.restart(warmup=0)
    wait_until(lambda: api() == {"v1alpha1": 1}, timeout=10)
    s = exporter.scrape()
    assert sample(s, "podres_kubelet_up") == 1
    assert total(s, "podres_node_devices", state="allocated") == 1
    assert not total(s, "podres_node_cpus")
    assert len(exporter.events("kubelet_api_fallback")) == 1
    sim.set_behaviour(api="v1")
    sim.restart(warmup=0)
    wait_until(lambda: api() == {"v1": 1}, timeout=10)
    assert total(exporter.scrape(), "podres_node_cpus") > 0
    assert len(exporter.events("kubelet_api_fallback")) == 1
    clean_exit(exporter)
