"""Images for the end-to-end cluster, built here: no registry is needed.

- ``debian:bookworm-slim``, the Dockerfile's base: used as it is when the image store has
  it; otherwise a stand-in made once with ``debootstrap --variant=minbase bookworm`` and
  imported, so the next run on the same machine skips it.
- the project's image, built from the real ``Dockerfile`` by ``make image``;
- the pod sandbox ("pause") image: a static binary that waits for SIGTERM.

Each is saved as a docker-archive tar that containerd imports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

BASE_IMAGE = "docker.io/library/debian:bookworm-slim"
PROJECT_IMAGE = "localhost/podres-exporter:e2e"
DEBIAN_MIRROR = "http://deb.debian.org/debian"

PAUSE_C = r"""
#include <signal.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; _exit(0); }
int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    for (;;) pause();
}
"""


class ImageError(RuntimeError):
    """An image could not be built (the message carries the tool's output)."""


def _run(argv: list[str], *, cwd: Path | None = None, what: str) -> None:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        raise ImageError(f"{what} failed ({' '.join(argv[:3])} ...):\n{tail}")


def image_exists(name: str) -> bool:
    return subprocess.run(["podman", "image", "exists", name], check=False).returncode == 0


def ensure_base_image(log: Callable[[str], None]) -> None:
    """Make ``debian:bookworm-slim`` available to podman, with debootstrap if need be."""
    if image_exists(BASE_IMAGE):
        return
    log(f"{BASE_IMAGE} is not in the image store: making a stand-in with debootstrap")
    with tempfile.TemporaryDirectory(prefix="podres-e2e-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        _run(
            ["debootstrap", "--variant=minbase", "bookworm", str(root), DEBIAN_MIRROR],
            what="debootstrap of the base image",
        )
        # As a context, the pipe's end left with us is closed and tar waited for.
        with subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE) as tar:
            imported = subprocess.run(
                ["podman", "import", "-", BASE_IMAGE],
                stdin=tar.stdout,
                capture_output=True,
                text=True,
                check=False,
            )
        if imported.returncode != 0 or tar.returncode != 0:
            raise ImageError(f"podman import of the base image failed: {imported.stderr}")


def build_project_image(repo: Path, log: Callable[[str], None]) -> None:
    """``make image`` from the repository, tagged :data:`PROJECT_IMAGE`."""
    flags = ["--network", "host"]
    # A host whose pip needs its own CA bundle: the build's pip needs it as well (the
    # Dockerfile takes it as the build secret ``pip-ca``, never stored in a layer).
    bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
    if bundle and Path(bundle).is_file():
        flags += ["--secret", f"id=pip-ca,src={bundle}"]
    log(f"building {PROJECT_IMAGE} from the Dockerfile (make image)")
    _run(
        ["make", "image", f"IMAGE={PROJECT_IMAGE}", f"IMAGE_BUILD_FLAGS={' '.join(flags)}"],
        cwd=repo,
        what="make image",
    )


def build_pause_image(name: str, log: Callable[[str], None]) -> None:
    """A ``FROM scratch`` image holding a static ``/pause``."""
    if image_exists(name):
        return
    if shutil.which("cc") is None:
        raise ImageError("a C compiler (cc) is needed to build the pod sandbox image")
    log(f"building the pod sandbox image {name}")
    with tempfile.TemporaryDirectory(prefix="podres-e2e-pause-") as tmp:
        ctx = Path(tmp)
        (ctx / "pause.c").write_text(PAUSE_C)
        _run(
            ["cc", "-static", "-Os", "-o", str(ctx / "pause"), str(ctx / "pause.c")],
            what="compiling pause",
        )
        (ctx / "Containerfile").write_text(
            'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n'
        )
        _run(["podman", "build", "-q", "-t", name, str(ctx)], what="podman build of pause")


def save(name: str, dest: Path) -> Path:
    """``podman save`` as a docker-archive tar (what ``ctr images import`` reads)."""
    dest.unlink(missing_ok=True)
    _run(
        ["podman", "save", "--format", "docker-archive", "-o", str(dest), name],
        what=f"podman save {name}",
    )
    return dest
