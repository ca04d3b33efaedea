"""The exporter's /healthz and /readyz through its real HTTP server: a stuck or dead poll
loop fails health; readiness names a cause category, never a path or the kubelet's text."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import grpc
import pytest
from structlog.testing import capture_logs

from podres_exporter.cli.export import Exporter, not_ready_cause
from podres_exporter.core.errors import (
    KubeletError,
    KubeletNotServed,
    KubeletRateLimited,
    KubeletResponseTooLarge,
    KubeletTimeout,
    KubeletUnavailable,
)
from podres_exporter.exporter.reader import Observation
from podres_sim import SimKubelet
from tests.support import exporter_settings, http_get, wait_until

MakeSim = Callable[..., SimKubelet]


@pytest.fixture
def exporters() -> Iterator[list[Exporter]]:
    """Exporters a test started itself (to change its reader first); stopped at teardown."""
    made: list[Exporter] = []
    yield made
    for exp in made:
        exp.stop("test teardown")


def test_a_poll_that_hangs_fails_healthz(make_sim: MakeSim, exporters: list[Exporter]) -> None:
    """The poll loop stuck in a reading (a hung sysfs, a driver call): /healthz answers
    503 "poller stalled" once no poll finished within the stall limit; meanwhile /readyz
    says no reading was taken yet."""
    sim = make_sim("minimal")
    exp = Exporter(exporter_settings(sim), gpu_backend=sim.host.gpu_backend(), stall_after_s=0.5)  # type: ignore[attr-defined]
    exporters.append(exp)
    release = threading.Event()
    entered = threading.Event()

    def stuck() -> Observation:
        entered.set()
        release.wait()
        raise RuntimeError("released")

    exp.reader.observe = stuck  # type: ignore[method-assign]
    exp.start()
    try:
        assert entered.wait(5)
        assert http_get(exp.url + "/readyz")[::2] == (503, b"not ready: no kubelet reading yet\n")
        wait_until(lambda: http_get(exp.url + "/healthz")[0] == 503)
        assert http_get(exp.url + "/healthz")[::2] == (503, b"poller stalled\n")
    finally:
        release.set()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # on purpose
def test_a_poll_loop_that_died_fails_healthz(make_sim: MakeSim, exporters: list[Exporter]) -> None:
    """A BaseException out of a poll ends the loop's thread: /healthz answers 503
    "poller stopped" (the HTTP server still runs)."""
    sim = make_sim("minimal")
    exp = Exporter(exporter_settings(sim), gpu_backend=sim.host.gpu_backend())  # type: ignore[attr-defined]
    exporters.append(exp)

    def dies() -> Observation:
        raise SystemExit("the poll loop ends here")

    exp.reader.observe = dies  # type: ignore[method-assign]
    exp.start()
    wait_until(lambda: not exp.poller.alive())
    assert http_get(exp.url + "/healthz")[::2] == (503, b"poller stopped\n")


def test_a_stopped_web_server_fails_health(make_sim: MakeSim, exporters: list[Exporter]) -> None:
    """The health check asks the web server's loop too: once it stops, health fails."""
    sim = make_sim("minimal")
    exp = Exporter(exporter_settings(sim), gpu_backend=sim.host.gpu_backend())  # type: ignore[attr-defined]
    exporters.append(exp)
    exp.start()
    assert exp.server.site.health() == (True, "ok")
    exp.server.stop()
    assert exp.server.site.health() == (False, "web server stopped")


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ((grpc.StatusCode.INTERNAL, "panic at /var/lib/kubelet/secret"), "answered an error"),
        ((grpc.StatusCode.RESOURCE_EXHAUSTED, "rate limited at /run/x"), "rate-limited"),
        ((grpc.StatusCode.UNIMPLEMENTED, "no such method at /run/x"), "does not serve"),
    ],
)
def test_readyz_names_a_cause_not_the_kubelet_text(
    make_sim: MakeSim, exporters: list[Exporter], fault: tuple[grpc.StatusCode, str], cause: str
) -> None:
    """/readyz before the first reading: "not ready: kubelet <category>", the category from
    the error's class; no gRPC code, detail text or path (the log has them)."""
    sim = make_sim("minimal")
    sim.fail_calls(*fault)
    exp = Exporter(exporter_settings(sim), gpu_backend=sim.host.gpu_backend())  # type: ignore[attr-defined]
    exporters.append(exp)
    exp.start()
    wait_until(lambda: exp.poller.kubelet_error is not None)
    status, _, body = http_get(exp.url + "/readyz")
    assert status == 503 and body.startswith(b"not ready: kubelet ") and cause.encode() in body
    for private in (
        fault[0].name.encode(),
        fault[1].encode(),
        b"/run",
        str(sim.socket_path).encode(),
    ):
        assert private not in body
    sim.clear_faults()
    wait_until(lambda: http_get(exp.url + "/readyz")[::2] == (200, b"ready\n"))


@pytest.mark.parametrize(
    ("err", "cause"),
    [
        (None, "no kubelet reading yet"),
        (KubeletUnavailable("x", method="List", code="UNAVAILABLE"), "kubelet unreachable"),
        (KubeletTimeout("x", method="List", code="DEADLINE_EXCEEDED"), "kubelet timed out"),
        (KubeletRateLimited("x", method="List", code="RESOURCE_EXHAUSTED"), "kubelet rate-limited"),
        (
            KubeletResponseTooLarge("x", method="List", code="RESOURCE_EXHAUSTED"),
            "kubelet answer too large",
        ),
        (
            KubeletNotServed("x", method="List", code="UNIMPLEMENTED"),
            "kubelet does not serve the pod-resources API",
        ),
        (KubeletError("x", method="List", code="INTERNAL"), "kubelet answered an error"),
    ],
)
def test_every_kubelet_error_class_has_a_category(err: KubeletError | None, cause: str) -> None:
    """not_ready_cause: one terse category per error class, the base class last."""
    assert not_ready_cause(err) == cause


def test_stop_cancels_a_hung_kubelet_call(make_sim: MakeSim) -> None:
    """Stopping while a kubelet call hangs (its deadline a minute away): the call is
    cancelled and the poll loop ends, logging no failure for it."""
    sim = make_sim("minimal")
    exp = Exporter(
        exporter_settings(sim, kubelet_timeout_s=60.0),
        gpu_backend=sim.host.gpu_backend(),  # type: ignore[attr-defined]
    )
    exp.start()
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    sim.hang_calls()
    calls = sim.total_requests
    wait_until(lambda: sim.total_requests > calls)  # a call hangs now
    with capture_logs() as logs:
        exp.stop("test")
    assert not exp.poller.alive()
    # (The pod-identity routes say that they stopped: not a failure of the call.)
    assert [e["event"] for e in logs if not e["event"].startswith("pods_api_")] == [
        "exporter_stopped"
    ]
