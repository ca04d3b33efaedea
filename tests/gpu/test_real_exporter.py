"""On a real NVIDIA driver: ``podres snapshot`` and ``podres export`` read the real NVML
beside a simulated kubelet whose pod holds the real GPUs (and MIG devices, where MIG is
already on); their answers name the pod, and the UUIDs and indices are those of
``nvidia-smi -q``; a CUDA process the test starts shows up as documented. Skipped where
no driver answers (see ``conftest.py``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.sources.gpu import NvmlBackend
from podres_sim import SimKubelet, resolve_scenario
from tests.faults.support import PODRES, DaemonProcess, started
from tests.gpu.checks import (
    attributed_processes,
    check_exposition,
    check_identity,
    check_nvidia_smi,
    check_snapshot,
    unattributed_processes,
)
from tests.gpu.cuda_client import find_client
from tests.gpu.node import CONTAINER, POD, scenario_toml
from tests.gpu.probe import Device, Probe, nvidia_smi
from tests.support import Samples, http_get, select, wait_until

pytestmark = pytest.mark.gpu


def _held(real: Probe) -> list[Device]:
    """The devices the pod holds: GPUs with MIG off, and MIG devices."""
    return [d for d in real.devices if d.parent is not None or not d.mig_enabled]


@pytest.fixture(scope="module")
def node(real_driver: Probe) -> Iterator[SimKubelet]:
    """A simulated kubelet whose pod holds the real devices."""
    directory = Path(tempfile.mkdtemp(prefix="gpu-tier-", dir="/tmp"))
    gpus = [d.uuid for d in real_driver.gpus if not d.mig_enabled]
    migs = [d.uuid for d in real_driver.migs]
    (directory / "node.toml").write_text(scenario_toml(gpus, migs))
    sim = SimKubelet(resolve_scenario(str(directory / "node.toml")), str(directory / "k.sock"))
    sim.start()
    yield sim
    sim.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def real_driver() -> Probe:
    from tests.gpu.conftest import driver

    found = driver()
    assert found.ok, found.message
    return found


@pytest.fixture(scope="module")
def exporter(node: SimKubelet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """``podres export`` on the real NVML, sysfs and procfs, against the simulated kubelet."""
    flags = [
        "--kubelet-socket", str(node.socket_path),
        "--listen-address", "127.0.0.1:0",
        "--poll-interval", "500ms",
        "--log-format", "json",
    ]  # fmt: skip
    starter = started(tmp_path_factory.mktemp("exporter"))
    start = next(starter)
    daemon = start("exporter", [*PODRES, "export", *flags])
    daemon.wait_url()
    wait_until(lambda: http_get(daemon.url + "/readyz")[0] == 200, timeout=30)
    yield daemon
    next(starter, None)


def _scrape_with_gpus(exporter: DaemonProcess, uuids: list[str]) -> Samples:
    """The first scrape that has every device's info series."""
    found: dict[str, Samples] = {}

    def ready() -> bool:
        samples = exporter.scrape()
        found["samples"] = samples
        return all(select(samples, "podres_gpu_info", uuid=u) for u in uuids)

    wait_until(ready, timeout=30, interval=0.5)
    return found["samples"]


def test_snapshot_names_the_pod_and_the_real_devices(
    real: Probe, node: SimKubelet, facts: dict[str, Any]
) -> None:
    """``podres snapshot`` against the simulated kubelet and the real NVML: each device
    held is there, healthy, at its NVML index, held by the pod's container."""
    done = subprocess.run(
        [*PODRES, "snapshot", "--kubelet-socket", str(node.socket_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    problems = []
    for device in _held(real):
        problems += check_snapshot(doc, device.uuid, device.index, f"{POD}/{CONTAINER}")
    facts["checks"]["snapshot"] = problems or "every device held, healthy, at its index"
    assert not problems


def test_export_serves_the_real_devices_as_nvidia_smi_names_them(
    real: Probe,
    exporter: DaemonProcess,
    real_backend: NvmlBackend,
    facts: dict[str, Any],
) -> None:
    """``podres export``: each device's series name the pod, at its NVML index; each
    field read is served and each unsupported one is not."""
    samples = _scrape_with_gpus(exporter, [d.uuid for d in real.devices])
    problems = []
    for device in real.devices:
        held = device.parent is not None or not device.mig_enabled
        problems += check_identity(samples, device.uuid, device.index, POD if held else None)
    reading = real_backend.read()
    for gpu in reading.gpus:
        problems += [f"{gpu.uuid} {p}" for p in check_exposition(gpu, samples)]
    facts["checks"]["export"] = problems or "every device named, fields served as read"
    assert not problems


def test_export_names_the_gpus_as_nvidia_smi_does(
    real: Probe, exporter: DaemonProcess, facts: dict[str, Any]
) -> None:
    """The exporter's GPUs are those of ``nvidia-smi -q``: the same UUIDs at the same
    indices, the same models, the same driver (skipped where nvidia-smi is absent)."""
    smi, why = nvidia_smi()
    if smi is None:
        facts["checks"]["nvidia-smi"] = why
        pytest.skip(why)
    facts["nvidia_smi"] = smi
    samples = _scrape_with_gpus(exporter, [d.uuid for d in real.gpus])
    problems = check_nvidia_smi(smi, samples)
    facts["checks"]["nvidia-smi"] = problems or "indices, UUIDs, models and driver agree"
    assert not problems


def test_a_cuda_process_is_counted_unattributed(
    real: Probe, exporter: DaemonProcess, real_backend: NvmlBackend, facts: dict[str, Any]
) -> None:
    """A CUDA process the test starts (in no pod's cgroup) is counted on its device by
    ``podres_gpu_holder_processes`` with empty holder labels, as documented, never on the
    pod that holds the device."""
    ok, why = find_client()
    if not ok:
        facts["checks"]["process"] = why
        pytest.skip(why)
    device = (_held(real) or list(real.devices))[0]
    client = subprocess.Popen(
        [sys.executable, "-m", "tests.gpu.cuda_client", device.uuid],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None
        line = client.stdout.readline().strip()
        if not line.startswith("ready"):
            facts["checks"]["process"] = f"the CUDA client could not start: {line}"
            pytest.skip(f"the CUDA client could not start: {line}")
        found: dict[str, Samples] = {}

        def counted() -> bool:
            found["samples"] = exporter.scrape()
            return unattributed_processes(found["samples"], device.uuid) >= 1

        wait_until(counted, timeout=30, interval=0.5)
        pids = {
            p.pid for g in real_backend.read().gpus if g.uuid == device.uuid for p in g.processes
        }
        same_namespace = client.pid in pids
        facts["checks"]["process"] = (
            f"pid {client.pid} on {device.uuid}: counted unattributed; NVML lists "
            + (
                "it under the same pid"
                if same_namespace
                else f"pids {sorted(pids)} (another pid namespace)"
            )
        )
        assert attributed_processes(found["samples"], device.uuid) == 0
    finally:
        if client.stdin is not None:
            client.stdin.close()
        try:
            client.wait(timeout=20)
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()
