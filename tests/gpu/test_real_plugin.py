"""On a real NVIDIA driver: ``podres plugin`` with ``kind = "nvml"`` registers with the
simulated kubelet's device manager, advertises the real GPUs (and MIG devices where MIG
is already on) healthy, answers Allocate with the runtime's variable naming them and
only device nodes that exist here, and GetPreferredAllocation without error. Skipped
where no driver answers (see ``conftest.py``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podres_exporter._generated.deviceplugin.v1beta1 import api_pb2 as pb
from podres_sim.kubelet.devicemanager import HEALTHY, SimDeviceManager
from tests.deviceplugin.support import advertised, plugin_flags, plugin_stub
from tests.deviceplugin.test_process import PluginProcess
from tests.gpu.checks import check_allocation, runtime_nodes
from tests.gpu.node import GPU_RESOURCE, MIG_RESOURCE
from tests.gpu.probe import Probe

pytestmark = pytest.mark.gpu

_CONFIG = """
[[resource]]
name = "{gpu}"
[resource.discover]
kind = "nvml"

[[resource]]
name = "{mig}"
[resource.discover]
kind = "nvml"
mig = true
"""


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[tuple[PluginProcess, SimDeviceManager]]:
    """The device manager, then ``podres plugin`` on the real NVML and sysfs."""
    directory = Path(tempfile.mkdtemp(prefix="gpu-dp-", dir="/tmp"))
    (directory / "plugins").mkdir()
    kubelet = SimDeviceManager(directory / "plugins")
    kubelet.start()
    config = tmp_path / "plugin.toml"
    config.write_text(_CONFIG.format(gpu=GPU_RESOURCE, mig=MIG_RESOURCE))
    process = PluginProcess(plugin_flags(config, kubelet.directory, Path("/sys")))
    yield process, kubelet
    if process.proc.poll() is None:
        process.proc.terminate()
    try:
        process.finish(timeout=15)
    finally:
        kubelet.stop(remove_socket=True)
        shutil.rmtree(directory, ignore_errors=True)


def _advertised(kubelet: SimDeviceManager, resource: str, process: PluginProcess) -> list[Any]:
    """The devices the plugin lists for ``resource`` once it has sent a list."""
    listed = kubelet.wait_for(lambda: advertised(kubelet, resource) is not None, timeout=30)
    assert listed, "".join(process.lines)
    return advertised(kubelet, resource) or []


def test_the_plugin_advertises_allocates_and_prefers_the_real_gpus(
    real: Probe, plugin: tuple[PluginProcess, SimDeviceManager], facts: dict[str, Any]
) -> None:
    """Every GPU with MIG off (every MIG device) is advertised healthy; Allocate of the
    first names it in NVIDIA_VISIBLE_DEVICES and returns only device nodes that exist;
    GetPreferredAllocation picks one of those offered."""
    process, kubelet = plugin
    expected = {
        GPU_RESOURCE: [d.uuid for d in real.gpus if not d.mig_enabled],
        MIG_RESOURCE: [d.uuid for d in real.migs],
    }
    notes = []
    for resource, uuids in expected.items():
        if not uuids:
            continue
        devices = _advertised(kubelet, resource, process)
        assert sorted(d.id for d in devices) == sorted(uuids)
        assert all(d.health == HEALTHY for d in devices), devices
        stub = plugin_stub(kubelet, resource)
        answer = stub.Allocate(
            pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=uuids[:1])]
            ),
            timeout=10,
        )
        (container,) = answer.container_responses
        host_paths = [d.host_path for d in container.devices]
        problems = check_allocation(dict(container.envs), host_paths, uuids[:1], os.path.exists)
        preferred = stub.GetPreferredAllocation(
            pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(
                        available_deviceIDs=uuids, allocation_size=1
                    )
                ]
            ),
            timeout=10,
        )
        (choice,) = preferred.container_responses
        if len(choice.deviceIDs) != 1 or choice.deviceIDs[0] not in uuids:
            problems.append(f"GetPreferredAllocation chose {list(choice.deviceIDs)}")
        minor = next((d.minor for d in real.devices if d.uuid == uuids[0]), None)
        missing = [n for n in runtime_nodes(minor) if not os.path.exists(n)]
        notes.append(
            f"{resource}: {len(uuids)} advertised healthy; Allocate -> "
            f"NVIDIA_VISIBLE_DEVICES={container.envs.get('NVIDIA_VISIBLE_DEVICES')}, "
            f"device nodes returned {host_paths or 'none (the NVIDIA runtime adds them)'}; "
            f"the runtime's nodes here: "
            + (f"missing {missing}" if missing else ", ".join(runtime_nodes(minor)))
        )
        assert not problems, problems
    facts["checks"]["plugin"] = notes
