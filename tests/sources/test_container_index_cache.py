"""The log-name index of GPU processes' containers, built again only when the kubelet's
log directories change."""

from __future__ import annotations

import os
from pathlib import Path

from podres_exporter.sources.procfs import ContainerIndexCache, read_container_index

CID_A = "a" * 64
CID_B = "b" * 64
UID = "0b1e5a3c-7f00-4d3e-9c1a-2f2e4d6c8a90"


def logs(tmp_path: Path) -> tuple[Path, Path]:
    containers, pods = tmp_path / "containers", tmp_path / "pods"
    containers.mkdir()
    pods.mkdir()
    (containers / f"train-0_ml_trainer-{CID_A}.log").touch()
    (pods / f"ml_train-0_{UID}").mkdir()
    return containers, pods


def touch_dir(path: Path, seconds: int) -> None:
    """Move a directory's mtime on by ``seconds`` (a change within one timestamp tick
    would not show)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 10**9))


def test_the_index_is_rebuilt_only_when_a_log_directory_changes(tmp_path: Path) -> None:
    containers, pods = logs(tmp_path)
    now = [0.0]
    cache = ContainerIndexCache(max_age_s=60.0, clock=lambda: now[0])
    first = cache.read(containers, pods)
    assert first == read_container_index(containers, pods)
    assert cache.read(containers, pods) is first and cache.builds == 1
    (containers / f"serve-0_ml_server-{CID_B}.log").touch()
    touch_dir(containers, 1)
    second = cache.read(containers, pods)
    assert cache.builds == 2 and second == read_container_index(containers, pods)
    assert second != first, "the new container is indexed"
    now[0] += 60.0
    assert cache.read(containers, pods) == second and cache.builds == 3, "at least every minute"


def test_a_missing_directory_is_read_again_at_every_call(tmp_path: Path) -> None:
    """No mtime to go by: the index is built every time (and a directory that appears
    later is seen at once)."""
    containers, _ = logs(tmp_path)
    missing = tmp_path / "not-yet"
    cache = ContainerIndexCache()
    cache.read(containers, missing)
    cache.read(containers, missing)
    assert cache.builds == 2
    missing.mkdir()
    (missing / f"ml_train-0_{UID}").mkdir()
    assert cache.read(containers, missing) == read_container_index(containers, missing)
