"""The node ports the end-to-end tier needs, checked free before it installs anything.

The exporter and the device plugin run with ``hostNetwork: true``, so they listen on the
machine's own 9842 and 9843: a process already there (an exporter started by hand, a
demo) would answer the tier's requests in their place, and its assertions would fail
misleadingly. The cluster's own components take ports found free at start
(``Cluster.ports``). :func:`busy_ports` says which needed port is taken, by what
process when it can be seen (``/proc``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Mapping
from pathlib import Path

NODE_PORTS: Mapping[int, str] = {
    9842: "the exporter's /metrics (hostNetwork)",
    9843: "the device plugin's /metrics (hostNetwork)",
}
"""The fixed ports the tier's pods listen on, and what for."""

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def port_taken(port: int) -> bool:
    """Whether a listener on ``port`` (any address, IPv4 or IPv6) would fail to bind, as
    the daemons bind it (``SO_REUSEADDR``: a connection in TIME_WAIT is no obstacle)."""
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            probe = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this machine
            continue
        with probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind((address, port))
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    return True
                if err.errno != errno.EADDRNOTAVAIL:
                    raise
    return False


def port_holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """The process listening on TCP ``port``: ``pid N: its command line``; None when
    no listener can be seen (another user's process, without root)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in (proc / "net" / table).read_text().splitlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == _LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{inode}]")
    for pid_dir in proc.iterdir() if inodes else ():
        if not pid_dir.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (pid_dir / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return f"pid {pid_dir.name}: {_command(pid_dir)}"
    return None


def _command(pid_dir: Path) -> str:
    raw = (pid_dir / "cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ")
    text = raw.decode(errors="replace")
    return text if len(text) <= 200 else text[:200] + "..."


def busy_ports(ports: Mapping[int, str] = NODE_PORTS) -> str | None:
    """What to tell the user when a needed port is taken, naming each such port, what it
    is for and its holder; None when every one is free."""
    taken = []
    for port, purpose in sorted(ports.items()):
        if port_taken(port):
            holder = port_holder(port) or "a process this user cannot see"
            taken.append(f"port {port} ({purpose}) is already in use by {holder}")
    if not taken:
        return None
    return (
        "the end-to-end tier needs these node ports free and installed nothing: "
        + "; ".join(taken)
        + ". Stop what holds them and run it again."
    )
