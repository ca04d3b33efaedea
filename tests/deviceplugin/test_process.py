"""``python -m podres_exporter.deviceplugin`` as a real process: restart, SIGTERM, bad config."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podres_sim.kubelet.devicemanager import HEALTHY, PluginDevice, SimDeviceManager
from tests.deviceplugin.support import (
    VF_ADDRESSES,
    accepted,
    advertised,
    files,
    plugin_flags,
    plugin_stub,
    write_sysfs,
)
from tests.support import http_get, wait_until

VF = "intel.com/sriov_vf"
NIC = "example.com/uplink"
CONFIG = f"""
[[resource]]
name = "{VF}"
cdi = "intel.com/net"
[resource.discover]
kind = "pci"
vendor = "0x8086"
device = "0x1889"
driver = "vfio-pci"

[[resource]]
name = "{NIC}"
[resource.discover]
kind = "netdev"
pattern = "enp175s0f*"
"""


class PluginProcess:
    """The plugin in a subprocess; its JSON log lines are collected as they come."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "podres_exporter.deviceplugin", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            try:
                self.events.append(json.loads(line))
            except ValueError:
                continue

    def event(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e.get("event") == name), None)

    def wait_event(self, name: str, timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.event(name)
            if found is not None:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        pytest.fail(f"no {name} event; output:\n{''.join(self.lines)}")

    def finish(self, timeout: float = 10.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


@pytest.fixture
def plugin_process(
    sockdir: Path, tmp_path: Path, make_kubelet: Any
) -> Iterator[tuple[PluginProcess, SimDeviceManager]]:
    """A kubelet, then the plugin process on a devtree sysfs with vfio-pci VFs."""
    kubelet = make_kubelet()
    write_sysfs(tmp_path / "sys", vfio=True)
    config = tmp_path / "plugin.toml"
    config.write_text(CONFIG)
    process = PluginProcess(plugin_flags(config, kubelet.directory, tmp_path / "sys"))
    yield process, kubelet
    if process.proc.poll() is None:
        process.proc.kill()
    process.finish()


def test_the_process_survives_a_kubelet_restart_and_re_registers_within_2s(
    plugin_process: tuple[PluginProcess, SimDeviceManager],
) -> None:
    """kubelet.sock re-created, plugin sockets deleted: both resources are registered
    again within 2 s with fresh sockets; Allocate answers on the new socket."""
    process, kubelet = plugin_process
    assert kubelet.wait_for(
        lambda: advertised(kubelet, VF) is not None and advertised(kubelet, NIC) is not None,
        timeout=15,
    )
    assert [d.id for d in advertised(kubelet, VF) or []] == list(VF_ADDRESSES)
    assert advertised(kubelet, NIC) == [PluginDevice("enp175s0f0", HEALTHY, (0,))]
    before = {r.endpoint for r in accepted(kubelet)}
    kubelet.restart()
    restarted = time.monotonic()
    assert kubelet.wait_for(
        lambda: (
            len(accepted(kubelet)) == 4
            and advertised(kubelet, VF) is not None
            and advertised(kubelet, NIC) is not None
        ),
        timeout=5,
    )
    assert time.monotonic() - restarted < 2.0
    after = {r.endpoint for r in accepted(kubelet)[2:]}
    assert not after & before
    assert files(kubelet) == sorted(["kubelet.sock", *after])
    from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb

    resp = plugin_stub(kubelet, VF).Allocate(
        pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=["0000:af:02.1"])]
        ),
        timeout=5,
    )
    (container,) = resp.container_responses
    assert dict(container.envs) == {"PCIDEVICE_INTEL_COM_SRIOV_VF": "0000:af:02.1"}
    assert [d.host_path for d in container.devices] == ["/dev/vfio/41", "/dev/vfio/vfio"]
    assert [c.name for c in container.cdi_devices] == ["intel.com/net=0000:af:02.1"]
    url = process.wait_event("plugin_started")["url"]
    assert url.startswith("http://127.0.0.1:")
    # The kubelet watch counts the restart on its own 100 ms poll, which may come just after
    # the plugin saw its sockets deleted and registered again.
    wait_until(lambda: b"restarts_total 0.0" not in http_get(url + "/metrics")[2], timeout=2)
    status, _, body = http_get(url + "/metrics")
    assert status == 200
    assert b"podres_plugin_kubelet_restarts_total 1.0" in body
    status, headers, body = http_get(
        url + "/metrics",
        {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"},
    )
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert b"podres_plugin_kubelet_restarts_total 1.0" in body and body.endswith(b"# EOF\n")
    status, _, page = http_get(url + "/")
    assert status == 200 and b'<a href="/readyz">/readyz</a>' in page
    assert f"{VF}, {NIC}".encode() in page


def test_sigterm_removes_the_sockets_and_exits_0(
    plugin_process: tuple[PluginProcess, SimDeviceManager],
) -> None:
    """SIGTERM: streams end, sockets removed, the log says why, exit status 0."""
    process, kubelet = plugin_process
    assert kubelet.wait_for(lambda: len(accepted(kubelet)) == 2, timeout=15)
    assert kubelet.wait_for(lambda: all(kubelet.lists_received(r) for r in (VF, NIC)))
    assert len(files(kubelet)) == 3
    sent = time.monotonic()
    process.proc.send_signal(signal.SIGTERM)
    assert process.finish() == 0
    assert time.monotonic() - sent < 5.0
    assert files(kubelet) == ["kubelet.sock"]
    assert (process.event("plugin_stopped") or {}).get("reason") == "signal SIGTERM"
    assert kubelet.wait_for(lambda: not any(kubelet.connected(r) for r in (VF, NIC)), timeout=3)


def test_a_restart_after_sigkill_removes_the_stale_sockets_of_its_own_resources(
    plugin_process: tuple[PluginProcess, SimDeviceManager], tmp_path: Path
) -> None:
    """A plugin killed by SIGKILL leaves its sockets; the next one removes them as it
    starts, and leaves alone a socket of its own name that still answers (another
    instance), another resource's stale socket and a regular file of its own name."""
    process, kubelet = plugin_process
    assert kubelet.wait_for(lambda: len(accepted(kubelet)) == 2, timeout=15)
    process.proc.kill()
    assert process.finish() == -signal.SIGKILL
    left = [n for n in files(kubelet) if n != "kubelet.sock"]
    assert len(left) == 2  # SIGKILL: no cleanup
    prefix = left[0][: -len("0123abcd.sock")]
    live_path = kubelet.directory / f"{prefix}0badc0de.sock"
    plain = kubelet.directory / f"{prefix}0123abcd.sock"
    plain.write_text("not a socket")
    foreign = kubelet.directory / "podres-example-org-other-12345678.sock"
    with socket.socket(socket.AF_UNIX) as stale, socket.socket(socket.AF_UNIX) as live:
        stale.bind(str(foreign))  # bound, never listening: refused, but not ours
        live.bind(str(live_path))
        live.listen()
        restarted = PluginProcess(
            plugin_flags(tmp_path / "plugin.toml", kubelet.directory, tmp_path / "sys")
        )
        try:
            assert kubelet.wait_for(lambda: len(accepted(kubelet)) == 4, timeout=15)
            removed = sorted(
                Path(e["socket"]).name
                for e in restarted.events
                if e.get("event") == "stale_socket_removed"
            )
            now = files(kubelet)
        finally:
            restarted.proc.send_signal(signal.SIGTERM)
            assert restarted.finish() == 0
    assert removed == sorted(left)
    assert not set(left) & set(now)
    assert {live_path.name, plain.name, foreign.name, "kubelet.sock"} < set(now)
    assert len(now) == 6  # those four and the restarted plugin's two sockets


@pytest.mark.parametrize(
    ("config", "args", "message"),
    [
        ('[[resource]]\nname = "kubernetes.io/x"\n', [], "resource[0].name: resource name"),
        (CONFIG + '\n[plugin]\nhealth_interval = "-1s"\n', [], "plugin.health_interval"),
        (CONFIG, ["--health-interval", "soon"], "invalid value for --health-interval"),
        (None, [], "--resources FILE is required"),
    ],
)
def test_bad_configuration_exits_2_naming_the_key(
    tmp_path: Path, config: str | None, args: list[str], message: str
) -> None:
    """A bad resource file or flag is reported (naming it) with exit status 2."""
    argv = list(args)
    if config is not None:
        path = tmp_path / "plugin.toml"
        path.write_text(config)
        argv += ["--resources", str(path)]
    done = subprocess.run(
        [sys.executable, "-m", "podres_exporter.deviceplugin", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stderr.startswith("podres plugin: error: ")
