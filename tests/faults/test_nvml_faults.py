"""NVML failing under the exporter, run as a process with a fake NVML in it
(``gpu_exporter.py``): at init, one GPU lost mid-run, every call hanging. The kubelet's
data keeps flowing, the GPU data says what is wrong, the exporter recovers, and logs one
event per change of state."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from podres_sim import SimKubelet, parse_scenario
from tests.faults.support import (
    GPU_EXPORTER,
    DaemonProcess,
    Starter,
    exporter_flags,
    total,
)
from tests.support import http_get, sample, wait_until

pytestmark = pytest.mark.slow

MakeKubelet = Callable[..., SimKubelet]
SCENARIO = """
name = "two-gpus"
seed = 11
[node]
numa_nodes = 1
cpus_per_numa_node = 4
reserved_cpus = "0"
[[node.devices]]
resource = "nvidia.com/gpu"
ids = ["GPU-0b9c6d1e-1111-4a5a-8b8b-000000000001", "GPU-0b9c6d1e-2222-4a5a-8b8b-000000000002"]
numa = 0
[[pods]]
namespace = "ml"
name = "train"
[[pods.containers]]
name = "main"
cpu = 1
memory = "1Gi"
devices = { "nvidia.com/gpu" = 1 }
"""
GPU_A, GPU_B = (
    "GPU-0b9c6d1e-1111-4a5a-8b8b-000000000001",
    "GPU-0b9c6d1e-2222-4a5a-8b8b-000000000002",
)


class GpuNode:
    """The simulated node and an exporter process with a fake NVML for its GPUs."""

    def __init__(self, kubelet: MakeKubelet, daemons: Starter, directory: Path) -> None:
        scenario_file = directory / "two-gpus.toml"
        scenario_file.write_text(SCENARIO)
        self.sim = kubelet(parse_scenario(SCENARIO))
        self.control_file = directory / "nvml-control.json"
        self._daemons = daemons
        self._scenario_file = scenario_file

    def control(self, **state: Any) -> None:
        """Put the exporter's fake NVML in ``state`` (see gpu_exporter.py)."""
        tmp = self.control_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.control_file)

    def start(self, **state: Any) -> DaemonProcess:
        self.control(**state)
        exporter = self._daemons(
            "exporter",
            [
                *GPU_EXPORTER,
                "--scenario", str(self._scenario_file),
                "--control", str(self.control_file),
                "--",
                *exporter_flags(self.sim, source_timeout="300ms"),
            ],
        )  # fmt: skip
        exporter.wait_url()
        wait_until(lambda: http_get(exporter.url + "/readyz")[0] == 200, timeout=20)
        return exporter


@pytest.fixture
def node(kubelet: MakeKubelet, daemons: Starter, short_dir: Path) -> GpuNode:
    return GpuNode(kubelet, daemons, short_dir)


def kubelet_fresh(exporter: DaemonProcess, since: float) -> bool:
    """Whether the exporter serves a kubelet reading taken after ``since``."""
    s = exporter.scrape()
    taken = sample(s, "podres_kubelet_last_success_timestamp_seconds") or 0.0
    return sample(s, "podres_kubelet_up") == 1 and taken > since


def healthy(exporter: DaemonProcess) -> dict[str, float]:
    """podres_gpu_healthy by UUID."""
    return {
        dict(labels)["uuid"]: v
        for (name, labels), v in exporter.scrape().items()
        if name == "podres_gpu_healthy"
    }


def source(exporter: DaemonProcess) -> tuple[float | None, float | None]:
    """(podres_source_up, podres_source_stale) of the gpu source."""
    s = exporter.scrape()
    return sample(s, "podres_source_up", source="gpu"), sample(
        s, "podres_source_stale", source="gpu"
    )


def test_nvml_failing_at_init_then_recovering(node: GpuNode) -> None:
    """nvmlInit fails: no GPU data (nvml_available 0) while the kubelet's data flows, one
    event for every retry; NVML comes back: the GPUs are served, one event."""
    exporter = node.start(init_error=pynvml.NVML_ERROR_UNKNOWN)
    s = exporter.scrape()
    assert sample(s, "podres_nvml_available") == 0
    assert not total(s, "podres_gpu_info")
    assert sample(s, "podres_pods") == len(node.sim.node.pods)
    since = time.time()
    wait_until(lambda: kubelet_fresh(exporter, since + 1.0), timeout=10)  # retried meanwhile
    (event,) = exporter.events("nvml_unavailable")
    assert "nvmlInit" in event["error"]
    node.control()
    wait_until(lambda: healthy(exporter) == {GPU_A: 1, GPU_B: 1}, timeout=10)
    assert sample(exporter.scrape(), "podres_nvml_available") == 1
    assert len(exporter.events("nvml_initialised")) == 1
    assert len(exporter.events("nvml_unavailable")) == 1
    assert not exporter.problems(), exporter.problems()[:3]
    assert exporter.terminate()[0] == 0


def test_one_gpu_lost_mid_run(node: GpuNode) -> None:
    """One GPU lost: it is unhealthy and its readings gone, the other flows, the kubelet's
    data too; one event when it is lost, one when it is back."""
    exporter = node.start()
    wait_until(lambda: healthy(exporter) == {GPU_A: 1, GPU_B: 1}, timeout=10)
    node.control(broken=[GPU_A])
    wait_until(lambda: healthy(exporter) == {GPU_A: 0, GPU_B: 1}, timeout=10)
    s = exporter.scrape()
    assert total(s, "podres_gpu_memory_total_bytes", uuid=GPU_B) > 0
    assert not total(s, "podres_gpu_memory_total_bytes", uuid=GPU_A)
    since = time.time()
    wait_until(lambda: kubelet_fresh(exporter, since + 1.0), timeout=10)  # polled meanwhile
    (lost,) = exporter.events("gpu_unhealthy")
    assert lost["device"] == GPU_A
    node.control()
    wait_until(lambda: healthy(exporter) == {GPU_A: 1, GPU_B: 1}, timeout=10)
    assert [e["device"] for e in exporter.events("gpu_recovered")] == [GPU_A]
    assert len(exporter.events("gpu_unhealthy")) == 1
    assert not exporter.problems(), exporter.problems()[:3]
    assert exporter.terminate()[0] == 0


def test_nvml_calls_hanging(node: GpuNode) -> None:
    """Every NVML call hangs: the GPU data served is the last, marked stale, the kubelet's
    keeps flowing, one event; the calls return: fresh again, one event."""
    exporter = node.start()
    wait_until(lambda: healthy(exporter) == {GPU_A: 1, GPU_B: 1}, timeout=10)
    node.control(hang=True)
    wait_until(lambda: source(exporter) == (0, 1), timeout=10)
    assert healthy(exporter) == {GPU_A: 1, GPU_B: 1}, "the last GPU reading, kept"
    since = time.time()
    wait_until(lambda: kubelet_fresh(exporter, since + 1.5), timeout=10)  # several polls
    failed = exporter.events("source_failed", source="gpu")
    assert len(failed) == 1 and "--source-timeout" in failed[0]["error"]
    node.control()
    wait_until(lambda: source(exporter) == (1, 0), timeout=10)
    assert len(exporter.events("source_ok", source="gpu")) == 2  # at start, and now
    assert not exporter.problems(), exporter.problems()[:3]
    assert exporter.terminate()[0] == 0


def test_sigterm_while_nvml_hangs(node: GpuNode) -> None:
    """SIGTERM while an NVML call hangs: the exporter still exits 0 within 5 s."""
    exporter = node.start()
    wait_until(lambda: healthy(exporter) == {GPU_A: 1, GPU_B: 1}, timeout=10)
    node.control(hang=True)
    wait_until(lambda: source(exporter) == (0, 1), timeout=10)
    code, _ = exporter.terminate(timeout=5.0)
    assert code == 0, exporter.tail()
    assert exporter.events("exporter_stopped")
