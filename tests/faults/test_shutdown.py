"""SIGTERM at awkward moments, to the exporter run as a process: while scrapes are in
flight (a slow reader among them) and while a kubelet call hangs. It exits 0 on time and
the scrapes it accepted complete."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable

import pytest

from podres_sim import SimKubelet, synthetic_scenario
from tests.faults.support import Starter, start_exporter
from tests.support import http_get, parse_samples, wait_until

pytestmark = pytest.mark.slow

MakeKubelet = Callable[..., SimKubelet]
DEADLINE_S = 5.0


def slow_scrape(url: str) -> socket.socket:
    """A /metrics request from a client that reads slowly: a small receive buffer, and
    nothing read yet beyond the first bytes (the server's write then waits on it)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    sock.settimeout(10)
    return sock


def read_response(sock: socket.socket, data: bytes) -> tuple[int, bytes, bool]:
    """Read the rest of an answer that began with ``data``: the status, the body, and
    whether it came short of its Content-Length."""
    with sock:
        while chunk := sock.recv(1 << 16):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    m = re.search(rb"(?i)content-length:\s*(\d+)", head)
    return status, body, not m or int(m.group(1)) != len(body)


def test_sigterm_during_scrapes(kubelet: MakeKubelet, daemons: Starter) -> None:
    """SIGTERM while a slow client reads a 4 MB exposition and 20 other scrapes are in
    flight: every one accepted gets its whole answer, and the exporter exits 0 on time."""
    sim = kubelet(synthetic_scenario(pods=3000))
    exporter = start_exporter(daemons, sim, poll_interval="1h")
    size = len(http_get(exporter.url + "/metrics")[2])
    assert size > 2 << 20, "an answer bigger than the socket buffers"
    slow = slow_scrape(exporter.url)
    first = slow.recv(1024)
    assert first.startswith(b"HTTP/1.1 200")
    time.sleep(0.2)  # the server is writing, blocked on the slow reader

    results: list[tuple[int, bytes]] = []

    def scrape() -> None:
        status, _, body = http_get(exporter.url + "/metrics")
        results.append((status, body))

    many = [threading.Thread(target=scrape) for _ in range(20)]
    for t in many:
        t.start()
    stopping = threading.Thread(target=lambda: stopped.append(exporter.terminate(DEADLINE_S)))
    stopped: list[tuple[int, float]] = []
    stopping.start()
    time.sleep(0.5)  # SIGTERM has arrived; the slow client reads on
    status, body, short = read_response(slow, first)
    for t in many:
        t.join(15)
    stopping.join(DEADLINE_S + 5)
    assert stopped and stopped[0][0] == 0, exporter.tail()
    assert status == 200 and not short, f"the slow scrape cut short at {len(body)} bytes"
    parse_samples(body.decode())
    assert len(results) == len(many), "a scrape broke off (a short read raises)"
    answered = [r for r in results if r[0] != 0]  # 0: refused once the server had stopped
    # Whole answers: the same size but for the per-scrape part (ages, process metrics).
    assert all(s == 200 and abs(len(b) - size) < 1024 for s, b in answered)
    assert not exporter.problems(), exporter.problems()[:3]


def test_sigterm_during_a_hung_kubelet_call(kubelet: MakeKubelet, daemons: Starter) -> None:
    """SIGTERM while a kubelet call hangs (its deadline far away): the exporter exits 0
    within 5 s, saying why."""
    sim = kubelet("minimal")
    exporter = start_exporter(daemons, sim, kubelet_timeout="60s")
    sim.hang_calls()
    calls = sim.total_requests
    wait_until(lambda: sim.total_requests > calls, timeout=10)  # a call is hanging now
    time.sleep(0.2)
    code, took = exporter.terminate(DEADLINE_S)
    assert code == 0, exporter.tail()
    (event,) = exporter.events("exporter_stopped")
    assert event["reason"] == "signal SIGTERM"
    assert took < DEADLINE_S
    assert not exporter.problems(), exporter.problems()[:3]
