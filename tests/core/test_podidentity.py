"""Every route's pods merged: the richest route wins, one series per pod name, bounded."""

from __future__ import annotations

from types import MappingProxyType

from podres_exporter.core.model import Holder
from podres_exporter.core.owners import Owner
from podres_exporter.core.podidentity import HealthRow, RouteState, merge
from podres_exporter.core.podlabels import MAX_LABEL_NAMES, Allowlist
from podres_exporter.core.podmeta import OwnerRef, PodDirectory, PodMeta, ResourceHealth, Route


def _dir(route: Route, *pods: PodMeta, **kw: object) -> PodDirectory:
    return PodDirectory(route, MappingProxyType({p.uid: p for p in pods}), **kw)  # type: ignore[arg-type]


def _api(name: str, uid: str, phase: str = "Running", **labels: str) -> PodMeta:
    return PodMeta(
        "ns",
        name,
        uid,
        Route.PODS_API,
        phase=phase,
        qos_class="BestEffort",
        owners=(OwnerRef("StatefulSet", "db", controller=True),),
        labels=MappingProxyType(labels),
    )


def _logs(name: str, uid: str) -> PodMeta:
    return PodMeta("ns", name, uid, Route.LOG_DIRS)


def test_the_richest_route_wins_and_log_dirs_fill_in() -> None:
    """A UID both routes know is the Pods API's; while the Pods API is still syncing, one
    only the log directories know is served with its UID alone; once it holds the whole
    node, such a log directory is a deleted pod's and is not served."""
    logs = _dir(Route.LOG_DIRS, _logs("db-0", "u0"), _logs("old", "u9"))
    synced = merge({Route.LOG_DIRS: logs, Route.PODS_API: _dir(Route.PODS_API, _api("db-0", "u0"))})
    assert [r.pod for r in synced.pods] == ["db-0"]
    stale = _dir(Route.PODS_API, _api("db-0", "u0"), stale=True)
    assert [r.pod for r in merge({Route.LOG_DIRS: logs, Route.PODS_API: stale}).pods] == [
        "db-0",
        "old",
    ]
    identity = merge(
        {
            Route.LOG_DIRS: logs,
            Route.PODS_API: _dir(Route.PODS_API, _api("db-0", "u0"), synced=False),
        }
    )
    rows = {r.pod: r for r in identity.pods}
    assert rows["db-0"].route is Route.PODS_API
    assert rows["db-0"].owner == Owner("StatefulSet", "db", "StatefulSet", "db")
    assert rows["db-0"].phase == "Running"
    assert rows["old"].route is Route.LOG_DIRS and rows["old"].owner is None
    assert [r.pod for r in identity.pods] == ["db-0", "old"]


def test_a_recreated_pod_is_served_as_its_current_uid() -> None:
    """Two incarnations of db-0: the one not finished is served; both phases are kept
    for settling; with the log directories alone, the greater UID."""
    identity = merge(
        {Route.PODS_API: _dir(Route.PODS_API, _api("db-0", "zz", "Succeeded"), _api("db-0", "aa"))}
    )
    assert [(r.pod, r.uid) for r in identity.pods] == [("db-0", "aa")]
    assert identity.phases[("ns", "db-0")] == frozenset({"Succeeded", "Running"})
    logs = merge({Route.LOG_DIRS: _dir(Route.LOG_DIRS, _logs("db-0", "a1"), _logs("db-0", "b2"))})
    assert [r.uid for r in logs.pods] == ["b2"]
    assert ("ns", "db-0") not in logs.phases  # no route gave a phase
    # A log directory the Pods API does not know is a deleted incarnation's: the Pods
    # API's pod is served, even when it has failed.
    both = merge(
        {
            Route.PODS_API: _dir(Route.PODS_API, _api("db-0", "aa", "Failed"), synced=False),
            Route.LOG_DIRS: _dir(Route.LOG_DIRS, _logs("db-0", "zz")),
        }
    )
    assert [(r.uid, r.phase) for r in both.pods] == [("aa", "Failed")]


def test_allowed_labels_become_columns_and_health_rows() -> None:
    """Allowed labels per pod, their union as the family's columns; each container's
    device health a row."""
    meta = PodMeta(
        "ns",
        "t",
        "u1",
        Route.PODS_API,
        labels=MappingProxyType({"team": "a", "secret": "x"}),
        resource_health=MappingProxyType({"c": (ResourceHealth("r/gpu", "g0", "Unhealthy"),)}),
    )
    identity = merge(
        {Route.PODS_API: _dir(Route.PODS_API, meta, _api("o", "u2", tier="x"))},
        Allowlist.of(("team", "tier")),
    )
    assert identity.labels_allowed
    assert identity.label_names == ("label_team", "label_tier")
    assert {r.pod: r.labels for r in identity.pods} == {
        "t": (("label_team", "a"),),
        "o": (("label_tier", "x"),),
    }
    assert identity.health == (HealthRow(Holder("ns", "t", "c"), "r/gpu", "g0", "Unhealthy"),)
    assert not merge({Route.PODS_API: _dir(Route.PODS_API, meta)}).labels_allowed


def test_label_names_over_the_node_are_bounded() -> None:
    """A node whose pods bring more label names than the bound serves the first names
    and counts the labels left out."""
    pods = [_api(f"p{i}", f"u{i}", **{f"k{i:04d}": "v"}) for i in range(MAX_LABEL_NAMES + 10)]
    identity = merge({Route.PODS_API: _dir(Route.PODS_API, *pods)}, Allowlist.of(("*",)))
    assert len(identity.label_names) == MAX_LABEL_NAMES
    assert identity.labels_dropped == 10
    assert sum(1 for r in identity.pods if r.labels) == MAX_LABEL_NAMES


def test_route_states_say_which_route_is_there() -> None:
    """A route not there (None) is unavailable; a stale or unsynced answer says so."""
    identity = merge(
        {
            Route.PODS_API: _dir(Route.PODS_API, _api("a", "u"), synced=False, taken_at=5.0),
            Route.LOG_DIRS: None,
        }
    )
    assert identity.routes == (
        RouteState(Route.PODS_API, True, False, False, 5.0, 1),
        RouteState(Route.LOG_DIRS, False),
    )


def test_label_pairs_alike_over_pods_are_held_once() -> None:
    """Pods with the same allowed label value share one (name, value) pair in the merged
    identity, so 5,000 pods of a few teams hold each pair once."""
    team = "".join(["pay", "ments"])  # equal strings, not the same object
    pods = [_api(f"p{i}", f"u{i}", team="".join(["pay", "ments"])) for i in range(3)]
    identity = merge({Route.PODS_API: _dir(Route.PODS_API, *pods)}, Allowlist.of(["team"]))
    pairs = [row.labels[0] for row in identity.pods]
    assert pairs[0] == ("label_team", team)
    assert [p is pairs[0] for p in pairs] == [True, True, True]
