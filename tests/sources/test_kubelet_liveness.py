"""The liveness source: the kubelet's pod log directories and pod cgroups, read from a tree."""

from __future__ import annotations

from pathlib import Path

from podres_exporter.core.accounting import pod_state
from podres_exporter.sources.liveness import (
    parse_pod_log_dirs,
    pod_uid_of_cgroup,
    read_live_pod_uids,
    read_liveness,
)

UID_A = "0b7e2f4c-1d2a-4c3b-9a8e-1f2e3d4c5b6a"
UID_B = "5c1d9e0a-7b6f-4e2d-8c3a-2b1a0f9e8d7c"
UID_C = "9f8e7d6c-5b4a-4392-8172-6a5b4c3d2e1f"


def test_log_dir_names_give_uids_per_pod() -> None:
    """``<ns>_<pod>_<uid>`` names a pod's UID; a pod re-created under its name has two."""
    names = [f"ml_train-0_{UID_A}", f"ml_train-0_{UID_B}", f"web_serve_{UID_C}", "garbage"]
    assert parse_pod_log_dirs(names) == {
        ("ml", "train-0"): frozenset({UID_A, UID_B}),
        ("web", "serve"): frozenset({UID_C}),
    }


def test_cgroup_names_of_both_drivers() -> None:
    """systemd (underscores in the UID, QoS prefix) and cgroupfs names; others are not pods."""
    assert pod_uid_of_cgroup(f"kubepods-burstable-pod{UID_A.replace('-', '_')}.slice") == UID_A
    assert pod_uid_of_cgroup(f"kubepods-pod{UID_B.replace('-', '_')}.slice") == UID_B
    assert pod_uid_of_cgroup(f"pod{UID_C}") == UID_C
    assert pod_uid_of_cgroup("kubepods-besteffort.slice") is None
    assert pod_uid_of_cgroup("cri-containerd-abc.scope") is None


def _systemd_tree(root: Path, *uids: str) -> None:
    base = root / "kubepods.slice"
    (base / "kubepods-besteffort.slice").mkdir(parents=True)
    for uid in uids:
        name = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
        (base / "kubepods-burstable.slice" / name / "cri-containerd-1.scope").mkdir(parents=True)


def test_live_uids_on_cgroup_v2_systemd(tmp_path: Path) -> None:
    """Pod cgroups one QoS level below kubepods.slice are found; Guaranteed pods directly."""
    _systemd_tree(tmp_path, UID_A)
    (tmp_path / "kubepods.slice" / f"kubepods-pod{UID_B.replace('-', '_')}.slice").mkdir()
    assert read_live_pod_uids(tmp_path) == frozenset({UID_A, UID_B})


def test_live_uids_on_cgroup_v1_cgroupfs(tmp_path: Path) -> None:
    """cgroupfs driver under the v1 cpu controller: kubepods/burstable/pod<uid>."""
    (tmp_path / "cpu,cpuacct" / "kubepods" / "burstable" / f"pod{UID_C}").mkdir(parents=True)
    assert read_live_pod_uids(tmp_path) == frozenset({UID_C})


def test_no_kubepods_hierarchy_is_unknown_not_empty(tmp_path: Path) -> None:
    """A cgroup root with no kubepods anywhere: None (undecided), not 'no pod runs'."""
    (tmp_path / "system.slice").mkdir()
    assert read_live_pod_uids(tmp_path) is None
    assert read_live_pod_uids(tmp_path / "missing") is None


def test_read_liveness_feeds_the_rule(tmp_path: Path) -> None:
    """A pod with a cgroup runs; one whose log dir outlived its cgroup finished."""
    logs = tmp_path / "log" / "pods"
    (logs / f"ml_new_{UID_A}").mkdir(parents=True)
    (logs / f"ml_old_{UID_B}").mkdir(parents=True)
    cgroups = tmp_path / "sys" / "fs" / "cgroup"
    _systemd_tree(cgroups, UID_A)
    live = read_liveness(logs, cgroups)
    assert pod_state(live, "ml", "new") == "running"
    assert pod_state(live, "ml", "old") == "finished"
    assert pod_state(live, "ml", "other") == "undecided"


def test_unreadable_log_root_leaves_every_pod_undecided(tmp_path: Path) -> None:
    """No /var/log/pods: the log facts are None and no pod can be decided."""
    cgroups = tmp_path / "cgroup"
    _systemd_tree(cgroups, UID_A)
    live = read_liveness(tmp_path / "no-logs", cgroups)
    assert live.pod_uids is None
    assert live.live_uids == frozenset({UID_A})
    assert pod_state(live, "ml", "new") == "undecided"


def test_a_kubepods_file_is_no_hierarchy(tmp_path: Path) -> None:
    """A ``kubepods.slice`` that is not a directory: no hierarchy, None, no exception."""
    (tmp_path / "kubepods.slice").write_text("")
    assert read_live_pod_uids(tmp_path) is None
