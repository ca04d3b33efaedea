"""What ``podres_build_info`` and ``podres_plugin_build_info`` say of the running build.

``revision``: the git commit the package was built from, when known. The container image
knows it from its build (the Dockerfile turns the build argument ``PODRES_REVISION`` into the
environment variable of that name); a process run from a git checkout (an editable install)
reads it from the checkout's ``.git``; a wheel installed elsewhere says ``unknown``. Reading
it never fails and costs a few small file reads, once per process.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

UNKNOWN = "unknown"
# A commit (or a name a build gave instead, e.g. a tag): short, and safe as a label value.
_REVISION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# The checkout around an editable install: src/podres_exporter/buildinfo.py -> repo root.
_CHECKOUT = Path(__file__).resolve().parents[2]
_MAX_READ = 1 << 20  # packed-refs of a large repository; anything larger is not read


@dataclass(frozen=True, slots=True)
class BuildInfo:
    """The labels of the build info series."""

    version: str
    revision: str = UNKNOWN
    python_version: str = ""


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_READ + 1)
    except OSError:
        return None
    if len(data) > _MAX_READ:
        return None
    return data.decode("utf-8", "replace")


def _git_dir(root: Path) -> Path | None:
    """The git directory of the checkout at ``root``: ``.git``, or where a ``.git`` file
    (a worktree, a submodule) points."""
    dot = root / ".git"
    if dot.is_dir():
        return dot
    text = _read(dot)
    if text is None or not text.startswith("gitdir:"):
        return None
    target = Path(text[len("gitdir:") :].strip())
    return target if target.is_absolute() else (root / target)


def _common_dir(git: Path) -> Path:
    """Where a worktree's branches live (its ``commondir``), else ``git`` itself."""
    text = _read(git / "commondir")
    if text is None:
        return git
    target = Path(text.strip())
    return target if target.is_absolute() else (git / target)


def _ref_commit(git: Path, ref: str) -> str | None:
    """The commit of branch ``ref`` (``refs/heads/main``): its own file, or packed-refs."""
    for base in (git, _common_dir(git)):
        found = (_read(base / ref) or "").strip()
        if _COMMIT.match(found):
            return found
        for line in (_read(base / "packed-refs") or "").splitlines():
            commit, _, name = line.partition(" ")
            if name == ref and _COMMIT.match(commit):
                return commit
    return None


def checkout_revision(root: Path = _CHECKOUT) -> str | None:
    """The commit checked out at ``root`` (a detached HEAD, or its branch's), or None when
    ``root`` is no checkout or it cannot be told."""
    try:
        git = _git_dir(root)
        head = (_read(git / "HEAD") or "").strip() if git is not None else ""
        if git is None or _COMMIT.match(head):
            return head or None
        return _ref_commit(git, head[len("ref: ") :]) if head.startswith("ref: ") else None
    except (OSError, ValueError):
        return None


def revision(env: Mapping[str, str], root: Path = _CHECKOUT) -> str:
    """The build's revision: ``PODRES_REVISION`` (set by the image's build), else the
    checkout's commit, else ``unknown``."""
    given = env.get("PODRES_REVISION", "").strip()
    if given and _REVISION.match(given):
        return given
    return checkout_revision(root) or UNKNOWN


def build_info(version: str, env: Mapping[str, str], root: Path = _CHECKOUT) -> BuildInfo:
    """The build info of this process: ``version``, its revision and Python's version."""
    return BuildInfo(version, revision(env, root), platform.python_version())
