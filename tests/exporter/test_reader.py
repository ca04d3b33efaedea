"""Telemetry sources run side by side; a slow or failing one never holds up the others."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from prometheus_client.metrics_core import Metric
from structlog.testing import capture_logs

from podres_exporter.core.errors import SourceError
from podres_exporter.core.model import (
    NOTHING_CONTESTED,
    ApiVersion,
    ContainerAlloc,
    DeviceRef,
    KubeletReading,
    NodeTopology,
    PodAlloc,
    PodLiveness,
    RequestStats,
    Support,
)
from podres_exporter.core.telemetry import CpuTimes, SysfsDevices
from podres_exporter.core.view import NodeView
from podres_exporter.exporter.reader import NodeReader, SourceRunner
from podres_exporter.exporter.textformat import WriteCache, write
from podres_exporter.sources.cputopology import read_topology
from podres_exporter.sources.sysfs import read_devices
from podres_sim import SimKubelet
from tests.support import exporter_settings


def test_slow_source_is_stale_and_not_relaunched() -> None:
    """A source past the timeout keeps its last value, marked stale; it is not started twice."""
    gate = threading.Event()
    calls = {"slow": 0}
    first = {"devices": SysfsDevices()}

    def slow() -> Mapping[str, Any]:
        calls["slow"] += 1
        if calls["slow"] > 1:
            gate.wait(5)
        return first

    runner = SourceRunner({"slow": slow, "fast": lambda: {"cpu_times": CpuTimes()}}, timeout_s=0.2)
    runner.start()
    t = runner.collect()
    assert t.sources["slow"].ok and t.devices is not None
    runner.start()
    t = runner.collect()
    assert t.sources["slow"].stale and not t.sources["slow"].ok
    assert "--source-timeout" in (t.sources["slow"].error or "")
    assert t.sources["fast"].ok and t.cpu_times is not None
    assert t.devices is first["devices"], "the last value is still served"
    runner.start()
    runner.collect()
    assert calls["slow"] == 2, "a running source is not launched again"
    gate.set()
    runner.close()


def test_failing_source_keeps_last_value_with_its_error() -> None:
    """A source that raises keeps its last value, stale, with the error; it recovers later."""
    answers: list[Any] = [
        {"cpu_times": CpuTimes()},
        SourceError("cannot read /proc/stat"),
        {"cpu_times": CpuTimes()},
    ]

    def flaky() -> Mapping[str, Any]:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    runner = SourceRunner({"cpu": flaky}, timeout_s=1)
    runner.start()
    assert runner.collect().sources["cpu"].ok
    runner.start()
    t = runner.collect()
    assert not t.sources["cpu"].ok and t.sources["cpu"].stale
    assert "cannot read /proc/stat" in (t.sources["cpu"].error or "")
    assert t.cpu_times is not None
    runner.start()
    assert runner.collect().sources["cpu"].ok
    runner.close()


def test_a_failing_source_is_logged_once_per_cause() -> None:
    """source_failed when the source starts failing and when the cause (the error's class,
    or the timeout) changes; not at every poll while the cause stays; source_ok after."""
    gate = threading.Event()
    answers: list[Any] = [
        SourceError("cannot read /proc/stat"),
        SourceError("cannot read /proc/stat again"),
        OSError("I/O error"),
        OSError("I/O error"),
        "hang",
        {"cpu_times": CpuTimes()},
    ]

    def flaky() -> Mapping[str, Any]:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        if a == "hang":
            gate.wait(5)
            return {"cpu_times": CpuTimes()}
        return dict(a)

    runner = SourceRunner({"cpu": flaky}, timeout_s=0.2)
    with capture_logs() as logs:
        for _ in range(5):
            runner.start()
            runner.collect()
        gate.set()
        runner.start()
        runner.collect()  # the hung call's late answer
        runner.start()
        runner.collect()
    runner.close()
    events = [(e["event"], e.get("cause")) for e in logs]
    assert events == [
        ("source_failed", "SourceError"),
        ("source_failed", "OSError"),
        ("source_failed", "timeout"),
        ("source_ok", None),
    ]


def test_a_hung_source_never_holds_up_the_process_exit() -> None:
    """Each source runs on a daemon thread: one hung in a driver call does not keep the
    interpreter alive after SIGTERM (a ThreadPoolExecutor's workers are joined at exit)."""
    gate = threading.Event()

    def hung() -> Mapping[str, Any]:
        gate.wait(10)
        return {}

    runner = SourceRunner({"hung": hung}, timeout_s=0.05)
    runner.start()
    assert not runner.collect().sources["hung"].ok
    (thread,) = [t for t in threading.enumerate() if t.name == "podres-source-hung"]
    assert thread.daemon and thread.is_alive()
    runner.close()
    runner.start()  # closed: nothing more is launched
    gate.set()
    thread.join(5)
    assert not [t for t in threading.enumerate() if t.name == "podres-source-hung"]


def test_a_reader_shares_what_did_not_change_between_polls(
    make_sim: Callable[..., SimKubelet],
) -> None:
    """The exporter's reader keeps the unchanged pods, allocatable and topology of one
    poll for the next, and its cached device readings follow the counters."""
    sim = make_sim("demo")
    host: Any = sim.host  # type: ignore[attr-defined]
    reader = NodeReader.from_settings(exporter_settings(sim), gpu_backend=host.gpu_backend())
    try:
        first = reader.observe()
        host.refresh(seconds=5)
        second = reader.observe()
    finally:
        reader.close()
    assert first.reading is not None and second.reading is not None
    earlier = {(p.namespace, p.name): p for p in first.reading.pods}
    assert all(earlier[p.namespace, p.name] is p for p in second.reading.pods)
    assert second.reading.allocatable is first.reading.allocatable
    assert second.topology is first.topology
    assert second.topology == read_topology(host.sysfs)
    assert second.telemetry is not None and first.telemetry is not None
    assert second.telemetry.devices == read_devices(host.sysfs)
    assert second.telemetry.devices != first.telemetry.devices  # the counters moved


def test_what_did_not_change_is_neither_accounted_nor_rendered_again(
    make_sim: Callable[..., SimKubelet],
) -> None:
    """Two polls of a node whose pods did not change (only counters moved) share the
    accounting, the NUMA alignment and the families of the collectors that read only
    those; the exposition written with reused families is byte for byte a fresh one's.
    A pod gone makes all of it anew."""
    # The Pods API off: its initial sync landing between two polls would change the
    # pods' phases the accounting settles by (tests/exporter/test_reader_identity.py).
    sim = make_sim("demo", pods_api=False)
    host: Any = sim.host  # type: ignore[attr-defined]
    settings = exporter_settings(sim)
    reader = NodeReader.from_settings(settings, gpu_backend=host.gpu_backend())
    cache = WriteCache()

    def poll(previous: NodeView | None, generation: int) -> tuple[NodeView, list[Metric]]:
        view = reader.view(reader.observe(), generation=generation, previous=previous)
        return view, reader.families(view, "0")

    def fresh(view: NodeView) -> bytes:
        """The same view through a reader with nothing cached."""
        other = NodeReader.from_settings(settings, gpu_backend=host.gpu_backend())
        try:
            return without_durations(write(other.families(view, "0"), False))
        finally:
            other.close()

    try:
        first, families1 = poll(None, 1)
        write(families1, False, cache=cache)
        host.refresh(seconds=5)
        second, families2 = poll(first, 2)
        assert second.accounting is first.accounting
        assert second.joined is not None and first.joined is not None
        assert second.joined.numa_aligned is first.joined.numa_aligned
        assert second.joined.resolutions is first.joined.resolutions
        before = {id(f) for f in families1}
        resolution = [f for f in families2 if f.name == "podres_device_resolution"]
        assert resolution and id(resolution[0]) in before, "the resolution info is reused"
        cpu = [f for f in families2 if f.name == "podres_container_exclusive_cpus"]
        assert cpu and id(cpu[0]) in before, "the cpu collector's families are reused"
        net = [f for f in families2 if f.name.startswith("podres_net_")]
        assert net and not any(id(f) in before for f in net), "moved counters: built anew"
        reused = cache.reused
        body = write(families2, False, cache=cache)
        assert cache.reused > reused
        assert without_durations(body) == fresh(second)

        victim = next(p for p in sim.node.pods if p.containers)
        sim.node.remove(victim.namespace, victim.name)
        host.refresh(seconds=0)  # the kubelet removes a deleted pod's log directory
        third, families3 = poll(second, 3)
        assert third.accounting is not second.accounting
        assert third.joined is not None
        assert third.joined.resolutions is not second.joined.resolutions
        assert not {id(f) for f in families3 if f.name == "podres_container_exclusive_cpus"} & {
            id(f) for f in families2
        }
        body = write(families3, False, cache=cache)
        assert f'pod="{victim.name}"'.encode() not in body
        assert without_durations(body) == fresh(third)
    finally:
        reader.close()


def test_a_source_that_read_the_same_hands_on_its_last_objects(
    make_sim: Callable[..., SimKubelet],
) -> None:
    """A source whose new reading equals its last gives the last objects again, so the
    join and the telemetry collectors reuse what they derived; one that moved does not."""
    sim = make_sim("demo")
    host: Any = sim.host  # type: ignore[attr-defined]
    reader = NodeReader.from_settings(exporter_settings(sim), gpu_backend=host.gpu_backend())
    try:
        first = reader.view(reader.observe(), generation=1)
        families1 = reader.families(first, "0")
        second = reader.view(reader.observe(), generation=2, previous=first)
        families2 = reader.families(second, "0")
        host.refresh(seconds=5)
        third = reader.view(reader.observe(), generation=3, previous=second)
    finally:
        reader.close()
    t1, t2, t3 = (v.snapshot.telemetry for v in (first, second, third))
    assert t1 is not None and t2 is not None and t3 is not None
    assert t2.devices is t1.devices, "nothing moved: the same readings"
    assert second.joined is not None and first.joined is not None
    assert second.joined.net is first.joined.net
    net = {id(f) for f in families1 if f.name.startswith("podres_net_")}
    assert net and net <= {id(f) for f in families2}, "the net families are reused"
    assert t3.devices is not t2.devices and t3.devices != t2.devices
    assert t3.devices == read_devices(host.sysfs)


def without_durations(body: bytes) -> bytes:
    """The exposition less the collectors' own timings, which differ per rendering."""
    return b"\n".join(
        line
        for line in body.split(b"\n")
        if not line.startswith(b"podres_collector_duration_seconds{")
    )


def test_each_source_is_read_at_its_own_cadence() -> None:
    """A source with an interval is launched again only once it has passed (polls due on
    its boundary may come a little early); meanwhile its last value is served as ok. A
    source without one is read at every poll; one that failed is retried at once."""
    now = [0.0]
    calls = {"gpu": 0, "cpu": 0, "sysfs": 0}
    fail = [False]

    def source(name: str, value: Mapping[str, Any]) -> Callable[[], Mapping[str, Any]]:
        def read() -> Mapping[str, Any]:
            calls[name] += 1
            if name == "sysfs" and fail[0]:
                raise SourceError("unreadable")
            return value

        return read

    runner = SourceRunner(
        {
            "gpu": source("gpu", {"cpu_times": None}),
            "cpu": source("cpu", {"cpu_times": CpuTimes()}),
            "sysfs": source("sysfs", {"devices": SysfsDevices()}),
        },
        intervals={"gpu": 30.0, "cpu": 0.0, "sysfs": 10.0},
        clock=lambda: now[0],
    )

    def poll(at: float) -> None:
        now[0] = at
        runner.start()
        t = runner.collect()
        assert t.sources["gpu"].ok and not t.sources["gpu"].stale

    try:
        poll(0.0)
        poll(10.0)
        poll(20.0)
        assert calls == {"gpu": 1, "cpu": 3, "sysfs": 3}
        poll(29.5)  # a poll due at 30 s, half a second early
        assert calls["gpu"] == 2
        poll(35.0)
        assert calls == {"gpu": 2, "cpu": 5, "sysfs": 4}  # sysfs last read at 29.5
        fail[0] = True
        poll(40.0)
        poll(41.0)  # failed at 40: retried without waiting for its interval
        assert calls["sysfs"] == 6
    finally:
        runner.close()


def test_liveness_is_read_only_when_several_pods_list_one_device() -> None:
    """A reading where no device or CPU is listed by several pods needs no liveness: the
    node's log and cgroup trees are not walked (the view gets NOTHING_CONTESTED); one
    with a stale listing (a finished pod's device handed to another) reads them."""
    gpu = DeviceRef("nvidia.com/gpu", "GPU-0", (0,))
    holder = PodAlloc("ns", "new", (ContainerAlloc("c", devices=(gpu,)),))
    stale = PodAlloc("ns", "old", (ContainerAlloc("c", devices=(gpu,)),))
    readings = [
        KubeletReading(ApiVersion.V1, (holder,), None, Support.DISABLED, 0.0),
        KubeletReading(ApiVersion.V1, (holder, stale), None, Support.DISABLED, 0.0),
    ]
    facts = PodLiveness(MappingProxyType({}), None)
    reads = [0]

    def read_liveness() -> PodLiveness:
        reads[0] += 1
        return facts

    class Scripted:
        socket_path = "/scripted.sock"

        def read(self) -> KubeletReading:
            return readings.pop(0)

        def get_pod(self, namespace: str, name: str) -> PodAlloc | None:
            return None

        def stats(self) -> RequestStats:
            return RequestStats()

        def release(self) -> None:
            pass

    topo = NodeTopology(frozenset({0, 1}))
    reader = NodeReader(Scripted(), lambda: topo, liveness=read_liveness)
    first = reader.observe()
    assert first.liveness is NOTHING_CONTESTED and reads[0] == 0
    second = reader.observe()
    assert second.liveness is facts and reads[0] == 1
