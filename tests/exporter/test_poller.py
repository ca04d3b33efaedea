"""The poller's staleness and empty-reading rules, with a scripted kubelet source."""

from __future__ import annotations

import io
import itertools
import json
import random
import threading
import time

import pytest
from structlog.testing import capture_logs

from podres_exporter.core.errors import (
    KubeletError,
    KubeletRateLimited,
    KubeletTimeout,
    KubeletUnavailable,
    SourceError,
)
from podres_exporter.core.model import (
    ApiVersion,
    KubeletReading,
    NodeTopology,
    Support,
)
from podres_exporter.daemon import logconf
from podres_exporter.daemon.backoff import NO_JITTER, Backoff
from podres_exporter.exporter.poller import Poller, Store, stall_after
from podres_exporter.exporter.reader import NodeReader, Observation
from podres_exporter.exporter.settings import build
from tests.exporter.support import TOPO, Script, reading
from tests.support import wait_until


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


# ------------------------------------------------------------------- one log per change


def test_topology_failure_is_logged_once_then_its_recovery() -> None:
    """topology_read_failed once when sysfs starts failing (not at every poll), then
    topology_recovered once when it reads again."""
    answers: list[NodeTopology | SourceError] = [
        TOPO,
        SourceError("no /sys/devices/system/node"),
        SourceError("still none"),
        TOPO,
        TOPO,
    ]

    def topology() -> NodeTopology:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    p = Poller(NodeReader(Script([reading(1)] * 5), topology), Store())
    with capture_logs() as logs:
        for _ in range(5):
            p.poll_once()
    events = [e["event"] for e in logs if e["event"].startswith("topology_")]
    assert events == ["topology_read_failed", "topology_recovered"]


def test_kubelet_failure_is_logged_once_per_cause() -> None:
    """kubelet_read_failed once per (error class, gRPC code): retries of one cause are
    silent, a new cause (even of the same class) is logged, then the recovery."""
    gone = KubeletUnavailable("gone", method="List", code="UNAVAILABLE")
    internal = KubeletError("boom", method="List", code="INTERNAL")
    unknown = KubeletError("what", method="List", code="UNKNOWN")
    script: list[KubeletReading | Exception] = [
        gone,
        gone,
        gone,
        internal,
        internal,
        unknown,
        unknown,
        reading(1),
        gone,
    ]
    p = Poller(NodeReader(Script(script), lambda: TOPO), Store(), rng=random.Random(0))
    with capture_logs() as logs:
        for _ in script:
            p.poll_once()
    failed = [(e["error_kind"], e["code"]) for e in logs if e["event"] == "kubelet_read_failed"]
    assert failed == [
        ("KubeletUnavailable", "UNAVAILABLE"),
        ("KubeletError", "INTERNAL"),
        ("KubeletError", "UNKNOWN"),
        ("KubeletUnavailable", "UNAVAILABLE"),
    ]
    assert [e["event"] for e in logs].count("kubelet_recovered") == 1
    assert p.kubelet_error is gone


def test_a_poll_that_raises_is_logged_once_per_kind() -> None:
    """A reader that raises at every poll: one poll_failed, then poll_recovered."""

    class Flaky(NodeReader):
        def __init__(self) -> None:
            # Answers for every poll until stop(): the loop goes on at 10 ms meanwhile.
            super().__init__(Script([reading(1)] * 10_000), lambda: TOPO)
            self.raises = 3

        def observe(self) -> Observation:
            if self.raises:
                self.raises -= 1
                raise RuntimeError("bad data")
            return super().observe()

    reader = Flaky()
    p = Poller(reader, Store(), interval_s=0.01, backoff=Backoff(0.01, 0.01))
    with capture_logs() as logs:
        p.start()
        wait_until(lambda: any(e["event"] == "poll_recovered" for e in logs))
        p.stop()
    assert [e["event"] for e in logs].count("poll_failed") == 1


def test_the_cadence_counts_from_when_a_poll_was_due_not_from_its_end() -> None:
    """Polls that take 0.25 s at a 0.5 s interval start every 0.5 s, not every 0.75 s;
    a poll longer than the interval is followed at once, without a burst."""
    starts: list[float] = []
    slow = [0.25] * 6 + [1.2] + [0.0] * 4

    class Slow(NodeReader):
        def __init__(self) -> None:
            super().__init__(Script([reading(1)] * 20), lambda: TOPO)

        def observe(self) -> Observation:
            starts.append(time.monotonic())
            time.sleep(slow[len(starts) - 1] if len(starts) <= len(slow) else 0.0)
            return super().observe()

    p = Poller(Slow(), Store(), interval_s=0.5)
    p.start()
    try:
        wait_until(lambda: len(starts) >= 10, timeout=20)
    finally:
        p.stop()
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    steady = gaps[:5]
    assert sum(steady) / len(steady) < 0.6, steady  # 0.75 when waits follow the work
    assert 1.2 <= gaps[6] < 1.45, gaps  # after the long poll: at once, not 0.5 s later
    assert all(g >= 0.45 for g in gaps[7:]), gaps  # then the cadence again, no burst


def test_a_backoff_is_waited_in_full_after_a_slow_failure() -> None:
    """A kubelet call that fails after 0.3 s (a deadline, say) is retried the whole backoff
    (0.5 s) after the failure, not at once because the poll took longer than the wait."""
    starts: list[float] = []

    class Failing(NodeReader):
        def __init__(self) -> None:
            down = KubeletUnavailable("down", method="List", code="UNAVAILABLE")
            super().__init__(Script([down] * 20), lambda: TOPO)

        def observe(self) -> Observation:
            starts.append(time.monotonic())
            time.sleep(0.3)
            return super().observe()

    p = Poller(Failing(), Store(), interval_s=0.1, backoff=Backoff(0.5, 0.5, NO_JITTER))
    p.start()
    try:
        wait_until(lambda: len(starts) >= 4, timeout=20)
    finally:
        p.stop()
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(g >= 0.75 for g in gaps[:3]), gaps  # 0.3 s of failing + 0.5 s of backoff


@pytest.mark.parametrize(
    ("interval_s", "answers", "backoff_s", "released"),
    [
        (0.2, [reading(1)] * 50, 1.0, False),
        (10.0, [reading(1)] * 50, 1.0, True),
        (0.2, [KubeletUnavailable("down", method="List", code="UNAVAILABLE")] * 50, 6.0, True),
    ],
    ids=["polls-close-together", "polls-far-apart", "long-backoff"],
)
def test_the_kubelet_channel_is_let_go_only_for_a_long_wait(
    interval_s: float, answers: list[KubeletReading | Exception], backoff_s: float, released: bool
) -> None:
    """A wait of 5 s or more (the interval, or a backoff) lets the kubelet's channel go
    after the poll, until the next one: an open channel costs gRPC's threads waking
    several times a second. Polls close together keep it."""
    script = Script(answers)
    polls: list[int] = []  # the releases so far, as each poll starts

    class Counted(NodeReader):
        def observe(self) -> Observation:
            polls.append(script.released)
            return super().observe()

    backoff = Backoff(backoff_s, backoff_s, NO_JITTER)
    p = Poller(Counted(script, lambda: TOPO), Store(), interval_s=interval_s, backoff=backoff)
    p.start()
    try:
        if released:
            wait_until(lambda: script.released == 1)
        else:
            wait_until(lambda: len(polls) >= 5)
    finally:
        p.stop()
    if released:
        assert polls == [0]  # after the poll, not before it
    else:
        assert script.released == 0


def test_a_release_that_fails_is_logged_and_the_loop_goes_on() -> None:
    """The kubelet client failing to let its channel go: a warning, and the next poll
    comes as due."""

    class Stubborn(Script):
        def release(self) -> None:
            super().release()
            raise RuntimeError("channel busy")

    script = Stubborn([reading(1)] * 5)
    polls: list[float] = []

    class Counted(NodeReader):
        def observe(self) -> Observation:
            polls.append(time.monotonic())
            return super().observe()

    p = Poller(Counted(script, lambda: TOPO), Store(), interval_s=10.0)
    with capture_logs() as logs:
        p.start()
        try:
            wait_until(lambda: script.released == 1)
            assert p.alive()
            assert p.health() == (True, "ok")
        finally:
            p.stop()
    failed = [e for e in logs if e["event"] == "kubelet_release_failed"]
    assert len(failed) == 1 and "channel busy" in failed[0]["error"]
    assert len(polls) == 1


# ----------------------------------------------------------------------------- health


def test_stall_after_covers_the_longest_legitimate_cycle() -> None:
    """Twice the longest wait plus every kubelet deadline and the source timeout; a minute
    at least."""
    assert stall_after(build({}, {})) == 2 * (30 + 3 * 10 + 5)
    fast = build(
        {
            "--poll-interval": "1s",
            "--kubelet-backoff-max": "1s",
            "--kubelet-timeout": "1s",
            "--source-timeout": "1s",
        },
        {},
    )
    assert stall_after(fast) == 60.0
    slow = build({"--poll-interval": "1h", "--kubelet-timeout": "1m"}, {})
    assert stall_after(slow) == 2 * (3600 + 180 + 5)


class Hanging(NodeReader):
    """A reader whose observe() blocks until unblocked, or raises what it is given."""

    def __init__(self, *, raise_: BaseException | None = None) -> None:
        super().__init__(Script([reading(1)] * 100), lambda: TOPO)
        self.unblock = threading.Event()
        self.entered = threading.Event()
        self.raise_ = raise_

    def observe(self) -> Observation:
        self.entered.set()
        if self.raise_ is not None:
            raise self.raise_
        self.unblock.wait()
        return super().observe()


def test_a_hung_poll_fails_health_after_the_stall_limit() -> None:
    """The loop blocked in a poll: healthy until stall_after_s has passed, then "poller
    stalled"; healthy again once it finishes a poll."""
    now = [0.0]
    reader = Hanging()
    p = Poller(reader, Store(), clock=lambda: now[0], stall_after_s=10.0)
    assert p.health() == (False, "poller stopped")  # not started
    p.start()
    try:
        assert reader.entered.wait(5)
        now[0] = 10.0
        assert p.health() == (True, "ok")
        now[0] = 10.5
        assert p.health() == (False, "poller stalled")
        reader.unblock.set()
        wait_until(lambda: p.health() == (True, "ok"))
    finally:
        reader.unblock.set()
        p.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # on purpose
def test_a_dead_loop_fails_health() -> None:
    """A BaseException ends the loop's thread: "poller stopped"."""
    reader = Hanging(raise_=SystemExit("gone"))
    p = Poller(reader, Store())
    p.start()
    wait_until(lambda: not p.alive())
    assert p.health() == (False, "poller stopped")


def test_every_distinct_cause_of_a_failure_is_named_with_its_count() -> None:
    """Causes of one class and code but another message are each named once, with the
    count of every cause so far; a cause seen again is silent; the recovery counts all."""
    missing = KubeletUnavailable(
        f"socket {Script.socket_path} does not exist", method="List", code="UNAVAILABLE"
    )
    refused = KubeletUnavailable("connection refused", method="List", code="UNAVAILABLE")
    big = [
        KubeletError(f"larger than max ({n} vs. 16777216)", method="List", code="INTERNAL")
        for n in (17000000, 17000001)
    ]
    script: list[KubeletReading | Exception] = [missing, refused, missing, *big, reading(1)]
    p = Poller(NodeReader(Script(script), lambda: TOPO), Store(), rng=random.Random(0))
    with capture_logs() as logs:
        for _ in script:
            p.poll_once()
    failed = [e for e in logs if e["event"] == "kubelet_read_failed"]
    assert [e["error"] for e in failed] == [str(missing), str(refused), str(big[0])]
    (recovered,) = [e for e in logs if e["event"] == "kubelet_recovered"]
    assert recovered["causes"] == {
        "KubeletUnavailable UNAVAILABLE: socket <socket> does not exist": 2,
        "KubeletUnavailable UNAVAILABLE: connection refused": 1,
        "KubeletError INTERNAL: larger than max (N vs. N)": 2,
    }
    assert failed[-1]["causes"]["KubeletUnavailable UNAVAILABLE: connection refused"] == 1


def test_causes_past_the_most_named_are_counted_together() -> None:
    """A kubelet with endless distinct messages costs a bounded log: past eight causes
    one more line names them together."""
    errors = [
        KubeletError(f"cause {chr(97 + i)}", method="List", code="UNKNOWN") for i in range(12)
    ]
    p = Poller(NodeReader(Script(list(errors)), lambda: TOPO), Store(), rng=random.Random(0))
    with capture_logs() as logs:
        for _ in errors:
            p.poll_once()
    failed = [e for e in logs if e["event"] == "kubelet_read_failed"]
    assert len(failed) == 9 and failed[-1]["causes"]["other causes"] == 1


def test_every_wording_of_one_refusal_is_one_cause() -> None:
    """gRPC's several messages for a refused connection end in the same reason: one cause,
    one event; a missing socket is another."""
    code = "UNAVAILABLE"
    refusals = [
        KubeletUnavailable(f"kubelet List on /k.sock: UNAVAILABLE: {m}", method="List", code=code)
        for m in (
            "failed to connect to all addresses; last error: UNKNOWN: unix:/k.sock: "
            "Connection refused",
            "connect failed: addr: unix:/k.sock error: Connection refused",
            "failed to connect to all addresses; last error: UNKNOWN: unix:/k.sock: "
            "No such file or directory",
        )
    ]
    p = Poller(NodeReader(Script(list(refusals)), lambda: TOPO), Store(), rng=random.Random(0))
    with capture_logs() as logs:
        for _ in refusals:
            p.poll_once()
    failed = [e for e in logs if e["event"] == "kubelet_read_failed"]
    assert failed[-1]["causes"] == {
        "KubeletUnavailable UNAVAILABLE: Connection refused": 2,
        "KubeletUnavailable UNAVAILABLE: No such file or directory": 1,
    }
    assert len(failed) == 2


def test_every_timeout_is_one_cause() -> None:
    """Timeouts of either call, in gRPC's several words for them, are one cause: a hung
    kubelet is logged once."""
    code = "DEADLINE_EXCEEDED"
    timeouts = [
        KubeletTimeout(f"kubelet {m} on /k.sock: DEADLINE_EXCEEDED: {d}", method=m, code=code)
        for m, d in (("List", "Deadline Exceeded"), ("GetAllocatableResources", "Stream removed"))
    ]
    p = Poller(NodeReader(Script(list(timeouts)), lambda: TOPO), Store(), rng=random.Random(0))
    with capture_logs() as logs:
        for _ in timeouts:
            p.poll_once()
    (failed,) = [e for e in logs if e["event"] == "kubelet_read_failed"]
    assert failed["causes"] == {"KubeletTimeout DEADLINE_EXCEEDED": 1}
