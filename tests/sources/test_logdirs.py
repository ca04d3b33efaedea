"""The pod log directories as a pod-identity route, and the routes merged once per poll."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from podres_exporter.core.podlabels import NOTHING
from podres_exporter.core.podmeta import PodDirectory, Route
from podres_exporter.sources.logdirs import LogDirSource
from podres_exporter.sources.poddirectory import IdentityReader, pods_api_socket
from podres_sim.kubelet.podsapi import pods_api_socket_for

U1 = "0b9c2f4e-1d2a-4c5b-9e8f-7a6b5c4d3e2f"
U2 = "5e6f7a8b-9c0d-4e1f-8a2b-3c4d5e6f7a8b"


def test_log_directories_name_each_pods_uid(tmp_path: Path) -> None:
    """Each <namespace>_<pod>_<uid> directory is a pod by UID; other names are ignored;
    the same names give the very same answer; a removed directory takes its pod along."""
    logs = tmp_path / "pods"
    logs.mkdir()
    (logs / f"ml_train-0_{U1}").mkdir()
    (logs / f"ml_train-0_{U2}").mkdir()  # re-created under its name: a second UID
    (logs / "not-a-pod").mkdir()
    source = LogDirSource(logs, wall_clock=lambda: 7.0)
    first = source.current()
    assert first is not None and first.route is Route.LOG_DIRS and first.taken_at == 7.0
    assert {(m.namespace, m.name, uid) for uid, m in first.pods.items()} == {
        ("ml", "train-0", U1),
        ("ml", "train-0", U2),
    }
    assert source.current() is first
    (logs / f"ml_train-0_{U1}").rmdir()
    assert set(source.current().pods) == {U2}  # type: ignore[union-attr]


def test_an_absent_directory_is_no_route_and_a_lost_one_serves_the_last_answer_stale(
    tmp_path: Path,
) -> None:
    """Never read: None. Read once, then gone: the last answer, stale, logged once; back:
    fresh again."""
    logs = tmp_path / "pods"
    source = LogDirSource(logs)
    assert source.current() is None
    logs.mkdir()
    (logs / f"ml_a_{U1}").mkdir()
    good = source.current()
    assert good is not None and not good.stale
    (logs / f"ml_a_{U1}").rmdir()
    logs.rmdir()
    with capture_logs() as events:
        stale = source.current()
        again = source.current()
    assert stale is not None and stale.stale and set(stale.pods) == {U1}
    assert again is stale
    assert [e["event"] for e in events] == ["pod_log_dirs_failed"]
    logs.mkdir()
    back = source.current()
    assert back is not None and not back.stale and not back.pods


class _Broken:
    def start(self) -> None:
        raise OSError("no socket")

    def stop(self) -> None:
        raise RuntimeError("stuck")

    def current(self) -> PodDirectory | None:
        raise RuntimeError("bad answer")


def test_the_identity_reader_merges_once_and_survives_a_broken_route(tmp_path: Path) -> None:
    """The same answers give the very same identity; a route that raises is no answer,
    logged, and the other routes still flow."""
    logs = tmp_path / "pods"
    logs.mkdir()
    (logs / f"ml_a_{U1}").mkdir()
    reader = IdentityReader(
        {Route.PODS_API: _Broken(), Route.LOG_DIRS: LogDirSource(logs)}, NOTHING
    )
    with capture_logs() as events:
        reader.start()
        first = reader.read()
        second = reader.read()
        reader.stop()
    assert second is first
    assert [(r.pod, r.uid) for r in first.pods] == [("a", U1)]
    assert [s.available for s in first.routes] == [False, True]
    assert {e["event"] for e in events} == {
        "pod_identity_route_failed",
        "pod_identity_route_stop_failed",
    }
    (logs / f"ml_b_{U2}").mkdir()
    assert reader.read() is not first


def test_the_pods_api_socket_is_found_beside_the_pod_resources_one() -> None:
    """<root>/pod-resources/kubelet.sock -> <root>/pods-api/pods-api.sock; a socket in a
    directory of another name has its own directory beside it, where the simulator serves."""
    assert pods_api_socket("/var/lib/kubelet/pod-resources/kubelet.sock") == Path(
        "/var/lib/kubelet/pods-api/pods-api.sock"
    )
    flat = Path("/tmp/x/kubelet-0.sock")
    assert pods_api_socket(str(flat)) == Path("/tmp/x/kubelet-0-pods-api/pods-api.sock")
    assert pods_api_socket_for(flat) == pods_api_socket(str(flat))
