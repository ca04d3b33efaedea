"""The end-to-end tier's port check, without a cluster: a taken node port is named with
its holder before anything is installed."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from tests.e2e.ports import NODE_PORTS, busy_ports, port_holder, port_taken
from tests.e2e.test_install import EXPORTER_URL, PLUGIN_URL
from tests.support import run_in_group

REPO = Path(__file__).resolve().parents[2]


def _listener(address: str = "127.0.0.1", port: int = 0) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen()
    return sock


def test_a_taken_port_is_named_with_its_holder() -> None:
    """A port with a listener (on the loopback only, too) is taken; the message names
    the port, what it is for and the process that holds it; a free port passes."""
    with _listener() as held:
        port = held.getsockname()[1]
        assert port_taken(port)
        assert (port_holder(port) or "").startswith(f"pid {os.getpid()}: ")
        message = busy_ports({port: "the exporter's /metrics"})
    assert message is not None
    assert f"port {port} (the exporter's /metrics) is already in use by pid {os.getpid()}" in (
        message
    )
    assert not port_taken(port) and busy_ports({port: "free again"}) is None


def test_the_checked_ports_are_those_the_tier_scrapes() -> None:
    """The ports checked are the exporter's and the plugin's, as the tier reaches them."""
    assert {int(url.rsplit(":", 1)[1]) for url in (EXPORTER_URL, PLUGIN_URL)} == set(NODE_PORTS)


def test_an_opted_in_run_fails_naming_a_taken_port_before_it_builds_anything(
    tmp_path: Path,
) -> None:
    """With the tier requested and 9842 taken, every test fails at once naming the port;
    no image is built, no cluster started."""
    held = _listener("0.0.0.0", 9842) if not port_taken(9842) else None
    try:
        done = run_in_group(
            [
                sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q",
                "-o", "addopts=", str(REPO / "tests" / "e2e" / "test_install.py"),
            ],
            timeout=120,
            cwd=REPO,
            env={**os.environ, "PODRES_E2E_KUBERNETES": str(tmp_path)},
        )  # fmt: skip
    finally:
        if held is not None:
            held.close()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "port 9842 (the exporter's /metrics (hostNetwork)) is already in use by" in done.stdout
    assert "installed nothing" in done.stdout and "[e2e " not in done.stdout
