"""`podres snapshot` against a kubelet socket nobody answers on: exit 2, one line naming the
socket and --kubelet-socket, nothing logged before it (no NVML or telemetry source line).

Each case is real: a unix socket bound and closed without unlinking (what a stopped kubelet
leaves), a plain file, a directory, a listener that never accepts, and the simulated kubelet
taking calls it never answers. The command runs as a user runs it, off a terminal (so it
logs JSON at info level) in a process of its own.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podres_sim import SimKubelet
from tests.cli.test_errors import one_line, podres

HINT = "pass --kubelet-socket PATH (or PODRES_KUBELET_SOCKET)"


def _stale(tmp_path: Path) -> Path:
    """A unix socket file nothing listens on: bound, then closed without unlinking."""
    path = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
    return path


def _plain(tmp_path: Path) -> Path:
    path = tmp_path / "plain.sock"
    path.write_text("")
    return path


def _directory(tmp_path: Path) -> Path:
    path = tmp_path / "dir.sock"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_stale, ["refuses connections", "nothing listens on it"]),
        (_plain, ["is not a unix socket"]),
        (_directory, ["is not a unix socket"]),
    ],
    ids=["stale-socket", "plain-file", "directory"],
)
def test_a_socket_path_nobody_answers_on_exits_2_with_one_line(
    tmp_path: Path, make: Callable[[Path], Path], words: list[str]
) -> None:
    """A stale socket file, a plain file, a directory: exit 2, one line naming the path and
    --kubelet-socket once, nothing logged before it."""
    path = make(tmp_path)
    rc, err = podres("snapshot", "--kubelet-socket", str(path))
    assert rc == 2, err
    line = one_line(err, "podres snapshot: error:", str(path), HINT, *words)
    assert line.count("--kubelet-socket") == 1, line


@pytest.fixture
def never_accepts(tmp_path: Path) -> Iterator[Path]:
    """A unix socket that listens and never accepts: connecting works, nothing answers."""
    path = tmp_path / "mute.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        s.listen(8)
        yield path


def test_a_listener_that_never_answers_exits_2_with_one_line(never_accepts: Path) -> None:
    """A socket that takes connections and never speaks: exit 2, one line naming the socket
    and the flag, nothing logged before it (the sources' lines are dropped)."""
    rc, err = podres("snapshot", "--kubelet-socket", str(never_accepts), "--kubelet-timeout", "1s")
    assert rc == 2, err
    line = one_line(err, "podres snapshot: error: no kubelet answers on", str(never_accepts), HINT)
    assert line.count("--kubelet-socket") == 1, line


def test_a_kubelet_that_takes_calls_and_never_answers_exits_2(
    make_sim: Callable[..., SimKubelet],
) -> None:
    """A kubelet that accepts each call and never answers it: exit 2 at --kubelet-timeout,
    one line naming the socket, --kubelet-socket and --kubelet-timeout."""
    sim = make_sim("minimal")
    sim.hang_calls()
    rc, err = podres(
        "snapshot", "--kubelet-socket", str(sim.socket_path), "--kubelet-timeout", "200ms"
    )
    assert rc == 2, err
    one_line(
        err,
        f"no kubelet answers on {sim.socket_path}",
        "DEADLINE_EXCEEDED",
        "--kubelet-timeout 0.2s",
        HINT,
    )


def test_a_kubelet_that_answers_gets_its_log_lines_and_the_json(
    make_sim: Callable[..., SimKubelet],
) -> None:
    """A kubelet that answers: exit 0; the held log lines (JSON, off a terminal) reach
    stderr once the kubelet has answered."""
    sim = make_sim("minimal")
    rc, err = podres("snapshot", "--kubelet-socket", str(sim.socket_path))
    assert rc == 0, err
    assert '"event": "source_ok"' in err
