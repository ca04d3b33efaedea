"""The simulated kubelet's gRPC servers on unix sockets, bound and stopped the way a
kubelet's are: every start binds a new inode, a stop leaves the socket file behind,
stale (clients get ``UNAVAILABLE``), unless it is to be removed."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

__all__ = ["bind", "old_inode_held", "shut_down", "unlink_socket"]


@contextlib.contextmanager
def old_inode_held(path: Path, owner: object) -> Iterator[Path | None]:
    """Hold the inode of the socket file at ``path`` with a hard link beside it (yielded;
    None when there is no file), so that a socket bound meanwhile cannot reuse its
    number: a client watching the inode sees a restart. ``owner`` makes the link's name
    its own."""
    hold = path.with_name(f".{path.name}.{os.getpid()}.{id(owner):x}.old")
    try:
        os.link(path, hold)
    except OSError:
        yield None
        return
    try:
        yield hold
    finally:
        with contextlib.suppress(FileNotFoundError):
            hold.unlink()


def bind(server: grpc.Server, executor: ThreadPoolExecutor, path: Path) -> None:
    """Bind ``server`` to the unix socket ``path``; OSError when it cannot (``executor``,
    the server's, is shut down then)."""
    try:
        port = server.add_insecure_port(f"unix:{path}")
    except RuntimeError as exc:
        executor.shutdown(wait=False)
        raise OSError(f"cannot bind {path}: {exc}") from exc
    if port == 0:
        executor.shutdown(wait=False)
        raise OSError(f"cannot bind {path}")


def shut_down(
    server: grpc.Server,
    executor: ThreadPoolExecutor | None,
    path: Path,
    *,
    owner: object,
    stale: bool,
) -> None:
    """Stop ``server`` at once (in-flight calls are cancelled), then its ``executor``.
    gRPC unlinks its socket on shutdown: with ``stale`` the same inode is put back at
    ``path``, as a stopped kubelet leaves its socket file."""
    with old_inode_held(path, owner) as hold:
        server.stop(grace=None).wait()
        if hold is not None and stale and not path.exists():
            os.link(hold, path)
    if executor is not None:
        executor.shutdown(wait=True, cancel_futures=True)


def unlink_socket(path: Path) -> None:
    """Remove the socket file at ``path``, if there is one."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
