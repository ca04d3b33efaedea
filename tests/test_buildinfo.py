"""The build's revision: PODRES_REVISION from the image build, else the checkout's commit
(a real git repository: a branch file, packed refs, a detached HEAD, a worktree), else
unknown; reading it never fails."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from podres_exporter.buildinfo import UNKNOWN, build_info, checkout_revision, revision


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path / "checkout"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / "f").write_text("x")
    _git(root, "add", "f")
    _git(root, "commit", "-q", "-m", "one")
    return root


def test_the_image_build_wins_over_the_checkout(repo: Path) -> None:
    """PODRES_REVISION (the Dockerfile's build argument) is taken as it is."""
    assert revision({"PODRES_REVISION": "0123abcd"}, repo) == "0123abcd"
    # a value that is no safe label value is ignored: the checkout's commit then
    assert revision({"PODRES_REVISION": "x y\n"}, repo) == _git(repo, "rev-parse", "HEAD")


def test_a_checkout_gives_its_commit_however_git_stores_it(repo: Path, tmp_path: Path) -> None:
    """A branch in its own file, in packed-refs, a detached HEAD and a worktree."""
    head = _git(repo, "rev-parse", "HEAD")
    assert checkout_revision(repo) == head
    _git(repo, "pack-refs", "--all")
    assert not (repo / ".git/refs/heads/main").exists()
    assert checkout_revision(repo) == head
    _git(repo, "checkout", "-q", "--detach")
    assert checkout_revision(repo) == head
    worktree = tmp_path / "wt"
    _git(repo, "worktree", "add", "-q", "-b", "other", str(worktree))
    assert (worktree / ".git").is_file()
    assert checkout_revision(worktree) == head


def test_no_checkout_or_a_broken_one_is_unknown(tmp_path: Path) -> None:
    """No .git, a .git file pointing nowhere, a HEAD naming a missing branch: unknown."""
    assert revision({}, tmp_path) == UNKNOWN
    (tmp_path / ".git").write_text("gitdir: /nonexistent/x\n")
    assert revision({}, tmp_path) == UNKNOWN
    (tmp_path / ".git").unlink()
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git/HEAD").write_text("ref: refs/heads/gone\n")
    assert revision({}, tmp_path) == UNKNOWN
    (tmp_path / ".git/HEAD").write_bytes(b"\xff\xfe")
    assert revision({}, tmp_path) == UNKNOWN


def test_build_info_has_the_python_version() -> None:
    """python_version is the running interpreter's."""
    import platform

    info = build_info("1.2.3", {"PODRES_REVISION": "abc1234"})
    assert (info.version, info.revision) == ("1.2.3", "abc1234")
    assert info.python_version == platform.python_version()
