"""The plugin's bound on advertised device ids: refused in the file when it cannot fit,
trimmed (and said) when discovery finds more, and the memory it keeps under the limit."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.core.errors import ConfigError
from podres_exporter.deviceplugin import inventory as inv
from podres_exporter.deviceplugin.config import MAX_DEVICE_IDS, MAX_REPLICAS, parse_config
from tests.deviceplugin.support import advertised, plugin_flags
from tests.deviceplugin.test_process import PluginProcess
from tests.support import wait_until

MIB = 1 << 20
LIMIT = 128 * MIB  # deploy/components/device-plugin/device-plugin-daemonset.yaml


def _dev_resources(count: int, replicas: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"example.com/r{i}",
            "replicas": replicas,
            "discover": {"kind": "dev", "glob": "w*"},
        }
        for i in range(count)
    ]


def test_replicas_that_cannot_fit_the_share_name_the_key() -> None:
    """With more resources than MAX_DEVICE_IDS / replicas, a resource's share has no room
    for one device with all its replicas: the file is refused, naming that key."""
    count = MAX_DEVICE_IDS // MAX_REPLICAS + 1
    with pytest.raises(ConfigError, match=r"resource\[0\]\.replicas: 1024 ids per device"):
        parse_config({"resource": _dev_resources(count, MAX_REPLICAS)})
    config = parse_config({"resource": _dev_resources(count - 1, MAX_REPLICAS)})
    assert config.ids_per_resource == MAX_REPLICAS


def test_hardware_past_the_share_is_withheld_first_by_key() -> None:
    """A resource advertises the devices whose replicas all fit ``max_ids``, by key; the
    rest are counted as withheld, and come back when the share allows them."""
    (res,) = parse_config({"resource": _dev_resources(1, 4)}).resources
    found = inv.Discovery(dev_nodes={"w*": tuple(f"w{i}" for i in (3, 1, 0, 2))})
    state, _ = inv.update(
        res, found, inv.initial_state(res), now=0.0, xid_unhealthy_for_s=1.0, max_ids=10
    )
    assert sorted({d.hardware for d in state.inventory.devices}) == ["w0", "w1"]
    assert len(state.inventory.devices) == 8 and state.withheld == 2
    state, _ = inv.update(res, found, state, now=1.0, xid_unhealthy_for_s=1.0, max_ids=16)
    assert len(state.inventory.devices) == 16 and state.withheld == 0


@pytest.mark.slow
def test_twenty_resources_of_twenty_devices_at_1024_replicas_stay_under_the_limit(
    make_kubelet: Any, tmp_path: Path
) -> None:
    """20 resources x 20 devices x replicas = 1024 (409,600 ids asked): the kubelet is
    sent at most MAX_DEVICE_IDS ids in all, each resource says once what it withholds,
    and the plugin's peak memory stays under its 128Mi limit."""
    kubelet = make_kubelet()
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(20):
        (dev / f"w{i}").write_text("")
    config = tmp_path / "plugin.toml"
    config.write_text(
        "".join(
            f'[[resource]]\nname = "example.com/r{i}"\nreplicas = 1024\n'
            '[resource.discover]\nkind = "dev"\nglob = "w*"\n'
            for i in range(20)
        )
    )
    names = [f"example.com/r{i}" for i in range(20)]
    process = PluginProcess(
        [*plugin_flags(config, kubelet.directory, tmp_path / "sys"), "--path.dev", str(dev)]
    )
    try:
        lists = wait_until(
            lambda: (
                (got := [advertised(kubelet, n) for n in names])
                and all(g is not None for g in got)
                and got
            ),
            timeout=60,
        )
        wait_until(lambda: len(_events(process, "devices_over_limit")) >= 20, timeout=30)
        peak = _peak_bytes(process.proc.pid)
    finally:
        process.proc.send_signal(signal.SIGTERM)
        assert process.finish(timeout=30) == 0
    share = MAX_DEVICE_IDS // 20
    assert all(len(devices) == (share // 1024) * 1024 for devices in lists)
    assert sum(len(devices) for devices in lists) <= MAX_DEVICE_IDS
    withheld = _events(process, "devices_over_limit")
    assert sorted(e["resource"] for e in withheld) == sorted(names)  # once each
    assert {e["withheld_devices"] for e in withheld} == {20 - share // 1024}
    assert peak < LIMIT, f"peak {peak / MIB:.0f} MiB"


def _events(process: PluginProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in process.events if e.get("event") == name]


def _peak_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")
