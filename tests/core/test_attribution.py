"""PIDs to containers: cgroup paths of every driver, log names, /proc parsing."""

from __future__ import annotations

import os

import pytest

from podres_exporter.core.attribution import build_index, container_of, parse_cgroup
from podres_exporter.core.model import Holder
from podres_exporter.core.telemetry import CgroupRef
from podres_exporter.sources.procfs import parse_proc_stat, read_cpu_times, read_pid_cgroups

UID = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"
U_ = UID.replace("-", "_")
CID = "9f" * 32
SLICE = "/kubepods.slice/kubepods-burstable.slice"


@pytest.mark.parametrize(
    "text",
    [
        f"0::{SLICE}/kubepods-burstable-pod{U_}.slice/cri-containerd-{CID}.scope\n",
        f"0::/kubepods/burstable/pod{UID}/{CID}\n",
        f"12:memory:/kubepods/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/pod{UID}/{CID}\n",
        f"0::/kubepods.slice/kubepods-pod{U_}.slice/crio-{CID}.scope\n",
        f"0::/kubepods.slice/kubepods-besteffort-pod{U_}.slice/docker-{CID}.scope",
    ],
)
def test_parse_cgroup_every_driver(text: str) -> None:
    """systemd and cgroupfs drivers, cgroup v1 and v2, containerd, CRI-O and docker."""
    assert parse_cgroup(text) == CgroupRef(UID, CID)


def test_parse_cgroup_outside_kubernetes() -> None:
    """A process of no pod has no reference."""
    assert parse_cgroup("0::/system.slice/sshd.service\n") == CgroupRef(None, None)


def test_index_from_log_names() -> None:
    """Container logs name the container; pod dirs name the pod of a UID; junk is ignored."""
    idx = build_index(
        [f"trainer-0_ml_main-{CID}.log", "not-a-log.txt"],
        [f"ml_trainer-0_{UID}", "junk"],
    )
    assert container_of(idx, CgroupRef(UID, CID)) == Holder("ml", "trainer-0", "main")
    assert idx.by_pod_uid[UID] == ("ml", "trainer-0")
    assert container_of(idx, CgroupRef(UID, "0" * 64)) is None


def test_proc_stat_per_cpu_id() -> None:
    """Per-CPU lines keep their ids (an offline CPU is absent); idle and iowait are not busy."""
    text = (
        "cpu  9 9 9 9 9 9 9 9 0 0\n"
        "cpu0 100 0 50 800 50 0 0 0 0 0\n"
        "cpu3 10 0 0 90 0 0 0 0 0 0\n"
        "intr 1\n"
    )
    t = parse_proc_stat(text, ticks_per_second=100)
    assert dict(t.busy) == {0: 1.5, 3: 0.1}
    assert dict(t.total) == {0: 10.0, 3: 1.0}


def test_real_proc() -> None:
    """This machine's /proc: one entry per online CPU, and our own cgroup readable."""
    t = read_cpu_times("/proc")
    assert len(t.busy) == os.cpu_count()
    assert all(t.total[c] >= t.busy[c] >= 0 for c in t.busy)
    refs = read_pid_cgroups("/proc", [os.getpid(), 999_999_999])
    assert os.getpid() in refs and 999_999_999 not in refs
