"""The API-server route against a real HTTPS server speaking the list and watch protocol."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from podres_exporter.core.podmeta import OwnerRef, PodDirectory, Route
from podres_exporter.daemon.backoff import Backoff
from podres_exporter.sources.apiserver import ApiServerPods, WatchLimits
from podres_exporter.sources.apiserver_wire import ApiServer
from tests.sources.apiserver_server import NODE, State, api_server, pod
from tests.support import wait_until

FAST = Backoff(initial_s=0.02, max_s=0.1)


@dataclass
class Wired:
    """The server, the reader, and the token file the reader reads."""

    state: State
    reader: ApiServerPods
    token_path: Path

    def pods(self) -> dict[str, Any]:
        return dict(self.reader.current().pods)

    def rotate_token(self, token: str) -> None:
        """As the kubelet does: a new file swapped in at the path."""
        new = self.token_path.with_name("token.new")
        new.write_text(token)
        os.replace(new, self.token_path)


def _start(tmp_path: Path, state: State, port: int, ca_pem: bytes, **limits: Any) -> Wired:
    token = tmp_path / "token"
    token.write_text(state.accepted)
    (tmp_path / "ca.crt").write_bytes(ca_pem)
    server = ApiServer("127.0.0.1", port, str(token), str(tmp_path / "ca.crt"))
    reader = ApiServerPods(server, NODE, limits=WatchLimits(page_size=2, **limits), backoff=FAST)
    return Wired(state, reader, token)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[State, int, bytes]]:
    with api_server(tmp_path) as (state, port, ca):
        state.put(pod("web-1", labels={"app": "web"}, owner=("ReplicaSet", "web-5d4f")))
        state.put(pod("job-1", owner=("Job", "nightly"), phase="Succeeded", qos="Guaranteed"))
        state.put(pod("elsewhere", node="node-b"))
        state.put(pod("bare", labels={"team": "ml"}, qos="Burstable"))
        yield state, port, ca.cert_pem


@pytest.fixture
def route(tmp_path: Path, served: tuple[State, int, bytes]) -> Iterator[Wired]:
    r = _start(tmp_path, *served)
    r.reader.start()
    try:
        yield r
    finally:
        r.reader.stop()


def watching(r: Wired) -> bool:
    d = r.reader.current()
    return d.synced and not d.stale and r.state.watching > 0


def test_lists_this_nodes_pods_in_pages_then_watches(route: Wired) -> None:
    """The first list (paged, this node's pods only) gives every pod's identity, synced."""
    wait_until(lambda: watching(route))
    d = route.reader.current()
    assert isinstance(d, PodDirectory) and d.route is Route.APISERVER and d.synced
    assert sorted(p.name for p in d.pods.values()) == ["bare", "job-1", "web-1"]
    web = d.pods["uid-web-1"]
    assert (web.namespace, web.phase, web.qos_class) == ("team-a", "Running", "BestEffort")
    assert web.owners == (OwnerRef("ReplicaSet", "web-5d4f", controller=True),)
    assert dict(web.labels) == {"app": "web"}
    job = d.pods["uid-job-1"]
    assert (job.phase, job.qos_class, job.owners[0].kind) == ("Succeeded", "Guaranteed", "Job")
    paths = [p for p, _ in route.state.requests]
    assert all("fieldSelector=spec.nodeName%3Dnode-a" in p for p in paths)
    assert any("continue=" in p for p in paths)  # 3 pods in pages of 2
    assert any("allowWatchBookmarks=true" in p and "watch=1" in p for p in paths)


def test_watch_events_add_change_and_delete(route: Wired) -> None:
    """ADDED, MODIFIED and DELETED events change the directory without a new list."""
    wait_until(lambda: watching(route))
    route.state.put(pod("new", labels={"a": "1"}))
    route.state.put(pod("web-1", labels={"app": "web", "v": "2"}, owner=("ReplicaSet", "x")))
    route.state.delete("uid-bare")
    route.state.put(pod("other-node", node="node-b"))
    wait_until(lambda: "uid-new" in route.pods() and "uid-bare" not in route.pods())
    wait_until(lambda: route.pods()["uid-web-1"].labels.get("v") == "2")
    assert sorted(route.pods()) == ["uid-job-1", "uid-new", "uid-web-1"]
    assert route.state.lists() == 1


def test_same_name_new_uid_is_a_new_pod(route: Wired) -> None:
    """A pod deleted and created again under its name is a new UID, the old one gone."""
    wait_until(lambda: watching(route))
    route.state.delete("uid-web-1")
    route.state.put(pod("web-1", uid="uid-web-1-again"))
    wait_until(lambda: "uid-web-1-again" in route.pods() and "uid-web-1" not in route.pods())


def test_bookmarks_move_the_version_so_a_dropped_watch_resumes_without_a_list(
    route: Wired,
) -> None:
    """After a bookmark, history before it compacted and the connection dropped, the
    watch resumes from the bookmark's version: no 410, no second list."""
    wait_until(lambda: watching(route))
    version = route.state.bookmark()
    wait_until(lambda: route.reader._version == str(version))
    route.state.compact(keep_from=version)
    route.state.drop_watches()
    route.state.put(pod("after-drop"))
    wait_until(lambda: "uid-after-drop" in route.pods())
    wait_until(lambda: watching(route))
    assert route.state.lists() == 1


def test_dropped_connection_resumes_from_the_version_and_keeps_the_pods(route: Wired) -> None:
    """A watch whose connection drops resumes from its version; nothing lost meanwhile."""
    wait_until(lambda: watching(route))
    route.state.drop_watches()
    route.state.put(pod("during-drop"))
    wait_until(lambda: "uid-during-drop" in route.pods())
    assert {"uid-web-1", "uid-job-1", "uid-bare"} <= set(route.pods())
    assert route.state.lists() == 1


@pytest.mark.parametrize("as_error_event", [False, True], ids=["410-status", "error-event"])
def test_gone_lists_again(route: Wired, as_error_event: bool) -> None:
    """410 Gone, as the answer's status or as an ERROR event with code 410, lists again,
    and the new list has the changes made meanwhile."""
    wait_until(lambda: watching(route))
    route.state.gone_as_error = as_error_event
    route.state.drop_watches()
    route.state.delete("uid-job-1")  # while the reader cannot see it
    route.state.compact()
    wait_until(lambda: route.state.lists() == 2)
    wait_until(lambda: "uid-job-1" not in route.pods() and watching(route))
    first, second = [
        p for p, _ in route.state.requests if "watch=1" not in p and "continue" not in p
    ]
    assert "resourceVersion=0" in first  # the watch cache
    assert "resourceVersion" not in second  # after a 410: a consistent read


def test_error_event_410_on_an_open_watch_lists_again(route: Wired) -> None:
    """An ERROR event with code 410 on a watch already open lists again."""
    wait_until(lambda: watching(route))
    route.state.expire_watches()
    wait_until(lambda: route.state.lists() == 2 and watching(route))


def test_a_401_reads_the_rotated_token_and_goes_on(route: Wired) -> None:
    """The server takes a new token; the file was rotated: the 401 reads it again, once."""
    wait_until(lambda: watching(route))
    route.state.accept("token-2")
    route.rotate_token("token-2")
    route.state.drop_watches()
    route.state.put(pod("after-rotation"))
    wait_until(lambda: "uid-after-rotation" in route.pods() and watching(route))
    tokens = [auth for _, auth in route.state.requests]
    assert tokens[-1] == "Bearer token-2"


def test_a_401_reads_the_token_again_even_when_the_file_looks_the_same(route: Wired) -> None:
    """A token rewritten in place (same inode and mtime): only the 401 makes the reader
    read it again, and the watch goes on with it."""
    wait_until(lambda: watching(route))
    st = route.token_path.stat()
    route.state.accept("token-3")
    route.token_path.write_text("token-3")
    os.utime(route.token_path, ns=(st.st_atime_ns, st.st_mtime_ns))
    route.state.drop_watches()
    route.state.put(pod("after-401"))
    wait_until(lambda: "uid-after-401" in route.pods() and watching(route))
    auths = [auth for _, auth in route.state.requests]
    assert "Bearer token-1" in auths and auths[-1] == "Bearer token-3"


def test_a_changed_token_file_is_read_before_the_next_request(
    tmp_path: Path, served: tuple[State, int, bytes]
) -> None:
    """A token file swapped in is read again at the next request, with no 401 first."""
    r = _start(tmp_path, *served)
    assert r.reader._token.get() == "token-1"
    time.sleep(0.01)  # a new file: a new inode or mtime
    r.rotate_token("token-2")
    assert r.reader._token.get() == "token-2"


def test_a_token_never_accepted_is_stale_with_one_event(route: Wired) -> None:
    """401 even with the token read again: the last good pods kept, stale, one event for
    the streak of failures however many retries."""
    wait_until(lambda: watching(route))
    with capture_logs() as logs:
        route.state.accept("someone-else")
        refused = len(route.state.requests)
        route.state.drop_watches()
        wait_until(lambda: len(route.state.requests) > refused + 6)  # retried, token re-read
    d = route.reader.current()
    assert d.synced and d.stale and len(d.pods) == 3
    assert len([e for e in logs if e["event"] == "apiserver_watch_failed"]) == 1
    route.state.accept("token-1")
    wait_until(lambda: watching(route))


def test_each_streak_of_failures_logs_once_and_its_recovery(route: Wired) -> None:
    """A streak ends when a watch is open again (recovered, logged), so the next failure,
    minutes into that watch or not, starts a new streak with an event of its own."""
    wait_until(lambda: watching(route))
    with capture_logs() as logs:
        for _ in range(2):
            route.state.accept("someone-else")
            route.state.drop_watches()
            wait_until(lambda: route.reader.current().stale)
            route.state.accept("token-1")
            wait_until(lambda: watching(route))
    events = [e["event"] for e in logs if e["event"].startswith("apiserver_watch_")]
    assert events == ["apiserver_watch_failed", "apiserver_watch_recovered"] * 2


def test_no_rbac_is_a_clear_stale_answer(tmp_path: Path, served: tuple[State, int, bytes]) -> None:
    """Refused (403) at the first list: not synced, stale, the event names the component."""
    state = served[0]
    state.accept("rbac-less")
    r = _start(tmp_path, *served)
    r.token_path.write_text("token-1")
    r.reader.start()
    try:
        with capture_logs() as logs:
            wait_until(lambda: r.reader.current().stale)
        d = r.reader.current()
        assert not d.synced and not d.pods
    finally:
        r.reader.stop()
    assert any(e["event"] == "apiserver_watch_failed" for e in logs)


def test_an_event_over_the_limit_is_refused_with_one_event(
    tmp_path: Path, served: tuple[State, int, bytes]
) -> None:
    """A watch event over max_event_bytes: refused, one event, stale, the others kept."""
    r = _start(tmp_path, *served, max_event_bytes=4096, max_list_bytes=2**20)
    r.reader.start()
    try:
        wait_until(lambda: watching(r))
        with capture_logs() as logs:
            r.state.put(pod("huge", annotations={"blob": "x" * 10_000}))
            wait_until(lambda: r.reader.current().stale or r.state.lists() > 1)
        refused = [e for e in logs if e["event"] == "apiserver_event_refused"]
        assert len(refused) == 1 and refused[0]["limit_bytes"] == 4096
        assert {"uid-web-1", "uid-job-1", "uid-bare"} <= set(r.pods())
    finally:
        r.reader.stop()


def test_a_list_page_over_the_limit_keeps_the_last_good_pods(
    tmp_path: Path, served: tuple[State, int, bytes]
) -> None:
    """A list page over max_list_bytes is refused: nothing synced from it, stale."""
    served[0].put(pod("huge", annotations={"blob": "x" * 50_000}))
    r = _start(tmp_path, *served, max_list_bytes=20_000)
    r.reader.start()
    try:
        with capture_logs() as logs:
            wait_until(lambda: r.reader.current().stale)
        assert not r.reader.current().synced
        failed = [e for e in logs if e["event"] == "apiserver_watch_failed"]
        assert len(failed) == 1 and "over 20000 bytes" in failed[0]["error"]
    finally:
        r.reader.stop()


def test_a_list_dribbled_slowly_is_cut_at_its_deadline(
    tmp_path: Path, served: tuple[State, int, bytes]
) -> None:
    """A list page sent a byte at a time, each well within the read timeout, is given up at
    the page's deadline: stale, one event, never a reader stuck for the whole body."""
    served[0].dribble_s = 0.05  # a page of two pods: over a minute at this pace
    r = _start(tmp_path, *served, list_deadline_s=0.5)
    r.reader.start()
    try:
        with capture_logs() as logs:
            wait_until(lambda: r.reader.current().stale)
        assert not r.reader.current().synced
        (failed,) = [e for e in logs if e["event"] == "apiserver_watch_failed"]
        assert "not read in 0.5s" in failed["error"]
    finally:
        served[0].dribble_s = 0.0
        r.reader.stop()


def test_the_server_gone_keeps_the_last_good_pods_stale(tmp_path: Path) -> None:
    """With the server gone the pods stay, stale; stop() ends the thread."""
    with api_server(tmp_path) as (state, port, ca):
        state.put(pod("web-1"))
        r = _start(tmp_path, state, port, ca.cert_pem)
        r.reader.start()
        wait_until(lambda: watching(r))
    wait_until(lambda: r.reader.current().stale)
    assert list(r.pods()) == ["uid-web-1"]
    r.reader.stop()
    assert r.reader._thread is not None and not r.reader._thread.is_alive()


@pytest.mark.timeout(60)  # a stop that missed the read would wait out 120 s per round
def test_stop_at_any_moment_ends_the_reader(
    tmp_path: Path, served: tuple[State, int, bytes]
) -> None:
    """stop() at any point of the loop (between requests, connecting, waiting for a watch
    the server never answers) wakes the reader at once, however long its read timeout."""
    state = served[0]
    state.hang = True
    rng = random.Random(7)
    for _ in range(40):
        r = _start(tmp_path, *served, timeout_s=120.0)
        r.reader.start()
        wait_until(lambda: r.reader.current().synced)  # noqa: B023 - called at once
        time.sleep(rng.uniform(0, 0.01))
        r.reader.stop()
        assert r.reader._thread is not None and not r.reader._thread.is_alive()


def test_the_wrong_ca_is_refused(tmp_path: Path, served: tuple[State, int, bytes]) -> None:
    """A server whose certificate is not of the cluster's CA is never read."""
    from tests.daemon.web.tlsutil import make_ca

    state, port, _ = served
    r = _start(tmp_path, state, port, make_ca("another CA").cert_pem)
    r.reader.start()
    try:
        wait_until(lambda: r.reader.current().stale)
        assert not r.reader.current().synced and state.lists() == 0
    finally:
        r.reader.stop()
