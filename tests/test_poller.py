"""The poller's staleness and empty-reading rules, with a scripted kubelet source."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator
from types import MappingProxyType

from podres_exporter import logconf
from podres_exporter.backoff import Backoff
from podres_exporter.errors import KubeletRateLimited, KubeletUnavailable
from podres_exporter.model import (
    Allocatable,
    ApiVersion,
    ContainerAlloc,
    KubeletReading,
    NodeTopology,
    PodAlloc,
    RequestStats,
    Support,
)
from podres_exporter.poller import Poller, Store
from podres_exporter.reader import NodeReader

TOPO = NodeTopology(frozenset({0, 1}), MappingProxyType({0: 0, 1: 0}))


def reading(pods: int) -> KubeletReading:
    ps = tuple(PodAlloc("ns", f"p{i}", (ContainerAlloc("c"),)) for i in range(pods))
    cpus = frozenset({0, 1}) if pods else frozenset()
    return KubeletReading(ApiVersion.V1, ps, Allocatable(cpu_ids=cpus), Support.SERVED, 0.0)


class Script:
    """A kubelet source that answers from a script: a reading or an exception per call."""

    socket_path = "/scripted.sock"

    def __init__(self, answers: list[KubeletReading | Exception]) -> None:
        self._answers: Iterator[KubeletReading | Exception] = iter(answers)

    def read(self) -> KubeletReading:
        answer = next(self._answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def get_pod(self, namespace: str, name: str) -> PodAlloc | None:
        raise NotImplementedError

    def stats(self) -> RequestStats:
        return RequestStats()


def test_failures_back_off_then_recover_and_keep_last_data() -> None:
    """Failures keep the last reading with kubelet_up false; success resets the interval."""
    err = KubeletUnavailable("gone", method="List", code="UNAVAILABLE")
    limited = KubeletRateLimited("slow down", method="List", code="RESOURCE_EXHAUSTED")
    store = Store()
    p = Poller(
        NodeReader(Script([reading(2), err, limited, err, reading(3)]), lambda: TOPO),
        store,
        interval_s=10.0,
        backoff=Backoff(1.0, 30.0),
        rng=random.Random(0),
    )
    assert p.poll_once() == 10.0
    waits = [p.poll_once() for _ in range(3)]
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0 and 2.0 <= waits[2] <= 4.0
    view = store.current()
    assert view is not None and not view.snapshot.kubelet_up
    assert view.snapshot.reading is not None and len(view.snapshot.reading.pods) == 2
    assert view.accounting is not None and view.accounting.pods == 2
    assert "gone" in (view.snapshot.kubelet_error or "")
    assert p.poll_once() == 10.0
    view = store.current()
    assert view is not None and view.snapshot.kubelet_up and view.accounting is not None
    assert view.accounting.pods == 3


def test_empty_reading_is_held_until_confirmed() -> None:
    """An empty answer after a full one is held back, re-read soon, believed once it persists."""
    now = [0.0]
    store = Store()
    p = Poller(
        NodeReader(Script([reading(2), reading(0), reading(0), reading(0)]), lambda: TOPO),
        store,
        interval_s=10.0,
        empty_confirm_s=3.0,
        clock=lambda: now[0],
    )
    p.poll_once()
    first = store.current()
    assert p.poll_once() == 0.5
    now[0] = 1.0
    assert p.poll_once() == 0.5
    assert store.current() is first, "nothing published while held"
    now[0] = 3.5
    assert p.poll_once() == 10.0
    view = store.current()
    assert view is not None and view.accounting is not None and view.accounting.pods == 0
    assert view.snapshot.suspect_empty_readings == 1


def test_logs_are_json_off_a_terminal() -> None:
    """With a non-TTY stream, every log line is one JSON object with event and level."""
    out = io.StringIO()
    logconf.configure("info", stream=out)
    import structlog

    structlog.get_logger("t").info("hello", answer=42)
    structlog.get_logger("t").debug("hidden")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert (event["event"], event["level"], event["answer"]) == ("hello", "info", 42)


def test_failed_polls_reuse_the_last_accounting() -> None:
    """Re-publishing the same reading reuses its accounting; a new reading is accounted anew."""
    err = KubeletUnavailable("gone", method="List", code="UNAVAILABLE")
    store = Store()
    p = Poller(
        NodeReader(Script([reading(2), err, reading(2)]), lambda: TOPO), store, rng=random.Random(0)
    )
    p.poll_once()
    first = store.current()
    p.poll_once()
    second = store.current()
    assert first is not None and second is not None
    assert second.accounting is first.accounting
    p.poll_once()
    third = store.current()
    assert third is not None and third.accounting is not first.accounting


def test_losing_every_pod_alone_is_held() -> None:
    """Pods gone while allocatable CPUs remain (the window ending between calls) is held."""
    full = reading(2)
    no_pods = KubeletReading(ApiVersion.V1, (), full.allocatable, Support.SERVED, 0.0)
    store = Store()
    p = Poller(
        NodeReader(Script([full, no_pods]), lambda: TOPO),
        store,
        interval_s=10.0,
        empty_confirm_s=3.0,
    )
    p.poll_once()
    assert p.poll_once() == 0.5
    view = store.current()
    assert view is not None and view.accounting is not None and view.accounting.pods == 2
