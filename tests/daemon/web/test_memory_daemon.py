"""`podres plugin` as a process with TLS: hundreds of connections that never start a
handshake, and rounds of connect-and-close, cost it a few MiB, given back once they go
(bench/hostile_clients.py runs the full-scale attacks and reports the figures)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.web.tlsutil import issue, make_ca
from tests.support import wait_until

pytestmark = pytest.mark.slow  # runs the podres command as a process

CONNECTIONS = 400
MIB = 2**20
CONFIG = '[[resource]]\nname = "example.com/uplink"\n[resource.discover]\n'
CONFIG += 'kind = "netdev"\npattern = "enp*"\n'


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def get(port: int, path: str) -> int:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw) as sock,
    ):
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """A TLS `podres plugin` (no kubelet: it serves HTTP and waits): its pid and port."""
    cert, key = issue(make_ca(), "server").write(tmp_path, "server")
    (tmp_path / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    )
    (tmp_path / "plugin.toml").write_text(CONFIG)
    (tmp_path / "dp").mkdir()
    (tmp_path / "sys").mkdir()
    log = tmp_path / "plugin.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "podres_exporter", "plugin",
                "--resources", str(tmp_path / "plugin.toml"),
                "--device-plugin-dir", str(tmp_path / "dp"),
                "--path.sysfs", str(tmp_path / "sys"),
                "--listen-address", "127.0.0.1:0",
                "--web.config.file", str(tmp_path / "web.yml"),
                "--log-format", "json",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=out,
            start_new_session=True,
        )  # fmt: skip
    try:

        def started() -> str | None:
            for line in log.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    if json.loads(line).get("event") == "plugin_started":
                        return str(json.loads(line)["url"])
            assert proc.poll() is None, log.read_text()
            return None

        url = wait_until(started, timeout=30)
        assert url, log.read_text()
        yield proc.pid, int(url.rsplit(":", 1)[1])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_silent_tls_connections_and_a_port_scan_cost_the_plugin_a_few_mib(
    plugin: tuple[int, int],
) -> None:
    """400 TLS connections that send nothing: the plugin grows by under 16 MiB (asyncio's
    own TLS transport took 256 KiB each: 100 MiB) and answers /healthz meanwhile; after
    they and three rounds of 400 connect-and-close have gone, it is back within 8 MiB."""
    pid, port = plugin
    for _ in range(20):  # warm: the pools' threads, a TLS session, the answers
        assert get(port, "/healthz") == 200
    time.sleep(1.5)
    start = rss(pid)
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(CONNECTIONS)]
    try:
        time.sleep(1.0)
        assert get(port, "/healthz") == 200
        peak = rss(pid)
    finally:
        for sock in held:
            sock.close()
    for _ in range(3):
        scan = [
            socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(CONNECTIONS)
        ]
        for sock in scan:
            sock.close()
    time.sleep(2.5)  # the trim after the burst
    after = rss(pid)
    assert peak - start < 16 * MIB, (start / MIB, peak / MIB)
    assert after - start < 8 * MIB, (start / MIB, after / MIB)
