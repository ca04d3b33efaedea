"""Holders counted once, and which of several pods listing a CPU or device still runs."""

from __future__ import annotations

from podres_exporter.core.accounting import LIVENESS_ANOMALY, account, contested, pod_state
from podres_exporter.core.model import (
    Allocatable,
    ContainerAlloc,
    DeviceRef,
    KubeletReading,
    PodAlloc,
    PodLiveness,
)
from tests.core.accounting.support import GPU, pod, reading, topo


def test_a_pod_listed_twice_holds_its_cpus_and_devices_once() -> None:
    """The same pod listed twice is one holder: its CPU is exclusive, its device one row,
    and neither is an anomaly (two rows of one holder would be one series twice)."""
    d = DeviceRef(GPU, "g0", (0,))
    twice = pod("a", ContainerAlloc("c", cpu_ids=frozenset({3}), devices=(d,)))
    acc = account(reading((twice, twice), Allocatable(cpu_ids=frozenset(range(16)))), topo())
    assert [(h.holder.pod, h.value) for h in acc.container_cpus] == [("a", 1)]
    assert [(r.holder.pod, r.device_id) for r in acc.container_devices] == [("a", "g0")]
    assert acc.anomalies["cpu_listed_by_several_containers"] == 0
    assert acc.anomalies["device_held_by_several_containers"] == 0
    assert acc.node_cpus[("0", "exclusive")] == 1


def test_empty_names_are_kept_and_counted() -> None:
    """Pods or containers with empty names still count and raise the empty_name anomaly."""
    acc = account(reading((PodAlloc("", "", (ContainerAlloc(""),)),)), topo())
    assert acc.pods == 1
    assert acc.anomalies["empty_name"] == 3


def _live(running: dict[str, str], finished: dict[str, str]) -> PodLiveness:
    """Liveness facts: pods (by name, in ``default``) with their UIDs, running or not."""
    uids = {("default", n): frozenset({u}) for n, u in {**running, **finished}.items()}
    return PodLiveness(pod_uids=uids, live_uids=frozenset(running.values()))


def test_pod_state_rule() -> None:
    """Running: a UID with a cgroup; finished: UIDs none with a cgroup; else undecided."""
    live = _live({"a": "u1"}, {"b": "u2"})
    assert pod_state(live, "default", "a") == "running"
    assert pod_state(live, "default", "b") == "finished"
    assert pod_state(live, "default", "c") == "undecided"  # no log directory
    assert pod_state(PodLiveness(None, frozenset({"u1"})), "default", "a") == "undecided"
    assert pod_state(PodLiveness(live.pod_uids, None), "default", "a") == "undecided"


def _contested() -> KubeletReading:
    """``old`` finished but is still listed with gpu-0 and CPU 3, now ``new``'s."""
    d = DeviceRef(GPU, "gpu-0", (0,))
    old = pod("old", ContainerAlloc("c", cpu_ids=frozenset({3}), devices=(d,)))
    new = pod("new", ContainerAlloc("c", cpu_ids=frozenset({3}), devices=(d,)))
    return reading((old, new), Allocatable(frozenset(range(16)), devices=(d,)))


def test_a_finished_holder_of_a_contested_device_is_not_counted() -> None:
    """The running pod holds the device and the CPU; no anomaly of several holders."""
    acc = account(_contested(), topo(), _live({"new": "u2"}, {"old": "u1"}))
    assert [(r.holder.pod, r.device_id) for r in acc.container_devices] == [("new", "gpu-0")]
    assert acc.anomalies["device_held_by_several_containers"] == 0
    assert acc.anomalies["cpu_listed_by_several_containers"] == 0
    assert [h.holder.pod for h in acc.container_cpus] == ["new"]
    assert acc.anomalies[LIVENESS_ANOMALY] == 0


def test_undecided_holders_keep_todays_accounting_and_count_an_anomaly() -> None:
    """No evidence for one pod: both holders stay, and the device and CPU count as undecided."""
    acc = account(_contested(), topo(), _live({"new": "u2"}, {}))
    assert len(acc.container_devices) == 2
    assert acc.anomalies["device_held_by_several_containers"] == 1
    assert acc.anomalies["cpu_listed_by_several_containers"] == 1
    assert acc.anomalies[LIVENESS_ANOMALY] == 2


def test_without_liveness_facts_accounting_is_as_before() -> None:
    """None: both holders counted, the anomalies as before, no liveness anomaly reported."""
    acc = account(_contested(), topo())
    assert len(acc.container_devices) == 2
    assert acc.anomalies["device_held_by_several_containers"] == 1
    assert LIVENESS_ANOMALY not in acc.anomalies


def test_finished_pod_alone_keeps_its_device() -> None:
    """Liveness settles only contested items: a finished pod alone still shows its device."""
    d = DeviceRef(GPU, "gpu-0", (0,))
    r = reading((pod("old", ContainerAlloc("c", devices=(d,))),), Allocatable(devices=(d,)))
    acc = account(r, topo(), _live({}, {"old": "u1"}))
    assert [r.holder.pod for r in acc.container_devices] == ["old"]


def test_contested_is_a_device_or_cpu_listed_by_several_pods() -> None:
    """Liveness is asked only when several pods list one device or CPU; one pod listing
    a CPU at its own level and in a container is not contested."""
    gpu0 = DeviceRef(GPU, "GPU-0", (0,))
    a = pod("a", ContainerAlloc("c", cpu_ids=frozenset({1}), devices=(gpu0,)))
    b = pod("b", ContainerAlloc("c", cpu_ids=frozenset({2})))
    assert not contested(reading((a, b)))
    own = PodAlloc(
        "default", "own", (ContainerAlloc("c", cpu_ids=frozenset({3})),), cpu_ids=frozenset({3, 4})
    )
    assert not contested(reading((a, own)))
    two_containers = pod(
        "t", ContainerAlloc("x", devices=(gpu0,)), ContainerAlloc("y", devices=(gpu0,))
    )
    assert not contested(reading((two_containers,)))
    stale = pod("stale", ContainerAlloc("c", devices=(gpu0,)))
    assert contested(reading((a, stale)))
    cpu = pod("cpu", ContainerAlloc("c", cpu_ids=frozenset({1})))
    assert contested(reading((a, cpu)))
    pod_level = PodAlloc("default", "p", (), cpu_ids=frozenset({4}))
    assert contested(reading((own, pod_level)))


def test_a_pods_phase_settles_it_ahead_of_the_trees() -> None:
    """A finished phase drops the holder even where the trees cannot tell (no log
    directory, no cgroup tree); Pending or Running keeps it; Unknown leaves it to the trees."""
    phases = {
        ("default", "old"): frozenset({"Succeeded"}),
        ("default", "new"): frozenset({"Running"}),
    }
    blind = PodLiveness(None, None, phases)
    acc = account(_contested(), topo(), blind)
    assert [(r.holder.pod, r.device_id) for r in acc.container_devices] == [("new", "gpu-0")]
    assert [h.holder.pod for h in acc.container_cpus] == ["new"]
    assert acc.anomalies[LIVENESS_ANOMALY] == 0
    # The trees say old runs and new has finished; the phases say otherwise and win.
    trees = _live({"old": "u1"}, {"new": "u2"})
    assert pod_state(PodLiveness(trees.pod_uids, trees.live_uids, phases), "default", "new") == (
        "running"
    )
    unknown = PodLiveness(
        trees.pod_uids, trees.live_uids, {("default", "new"): frozenset({"Unknown"})}
    )
    assert pod_state(unknown, "default", "new") == "finished"  # the trees decide
    # A pod re-created under its name: one incarnation done, the next pending: running.
    again = PodLiveness(None, None, {("default", "a"): frozenset({"Failed", "Pending"})})
    assert pod_state(again, "default", "a") == "running"
    assert (
        pod_state(
            PodLiveness(None, None, {("default", "a"): frozenset({"Failed"})}), "default", "a"
        )
        == "finished"
    )
