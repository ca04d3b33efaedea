"""One meaning per label name across the served families, on the simulated demo node.

Each label name below is carried only by the families where it means the one thing
docs/metrics.md says; a family that starts to use it for something else fails here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from podres_sim import SimKubelet
from tests.exporter.test_reader_golden import exposition
from tests.support import parse_samples

# Label -> the families that carry it (of those the demo serves), and what it means there.
STATE = {  # an allocation state: free, allocated, allocated_unhealthy
    "podres_node_devices",
    "podres_node_device_info",
    "podres_node_memory_bytes",
}
POOL = {"podres_node_cpus", "podres_cpu_assignment_info"}  # a CPU pool
DRIVER = {  # a kernel driver
    "podres_pci_info",
    *(f"podres_drm_{m}" for m in ("busy_ratio", "vram_used_bytes", "vram_total_bytes")),
    *(f"podres_drm_{m}" for m in ("frequency_hertz", "power_watts", "temperature_celsius")),
    "podres_drm_energy_joules_total",
}
KIND = {"podres_data_anomalies"}  # an anomaly kind
VERSION = {"podres_build_info"}  # our version


def _carriers(make_sim: Callable[..., SimKubelet]) -> dict[str, set[str]]:
    by_label: dict[str, set[str]] = defaultdict(set)
    for name, labels in parse_samples(exposition(make_sim("demo"))):
        for label, _ in labels:
            by_label[label].add(name)
    return by_label


def test_each_label_name_has_one_meaning(make_sim: Callable[..., SimKubelet]) -> None:
    """device is used by no family; state, pool, driver, kind and version only where they
    mean an allocation state, a CPU pool, a kernel driver, an anomaly kind, our version."""
    carriers = _carriers(make_sim)
    assert not carriers.get("device"), carriers.get("device")
    assert not carriers.get("physical_id") and not carriers.get("index")
    assert carriers["state"] == STATE
    assert carriers["pool"] == POOL
    assert carriers["driver"] <= DRIVER and "podres_pci_info" in carriers["driver"]
    assert carriers["kind"] == KIND
    assert carriers["version"] <= VERSION
    # the GPU identity is named the same way wherever a GPU is spoken of
    gpu_families = {n for n in carriers["uuid"] if n.startswith("podres_gpu_")}
    assert gpu_families and all(n in carriers["gpu"] for n in gpu_families)
    for name in (
        "podres_node_device_info",
        "podres_container_device_info",
        "podres_device_resolution_info",
    ):
        assert {"uuid", "gpu", "gpu_instance", "compute_instance"} <= {
            label for label, names in carriers.items() if name in names
        }, name
