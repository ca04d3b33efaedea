"""The facts the kubelet admits with, read through the whole pipeline: the simulated node's
kubelet files and sysfs -> NodeReader -> the kubelet_policy families; and what happens when
the kubelet's configuration file cannot be read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from structlog.testing import capture_logs

from podres_exporter.core.cpulist import format_cpulist
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.exporter.textformat import write
from podres_sim import SimKubelet
from tests.support import Samples, exporter_settings, parse_samples, sample, select

FAMILIES = (
    "podres_kubelet_config_info",
    "podres_kubelet_config_up",
    "podres_node_free_cores",
    "podres_node_cpu_threads_per_core",
    "podres_node_registered_devices",
    "podres_node_numa_distance",
)


def read_once(reader: NodeReader) -> Samples:
    """One observation of ``reader``, rendered and parsed back."""
    view = reader.view(reader.observe(), generation=1)
    return parse_samples(write(reader.families(view, "t"), False).decode())


def test_the_demo_node_serves_its_kubelets_facts(make_sim: Callable[..., SimKubelet]) -> None:
    """Every family, with the values the demo scenario gives its node."""
    sim = make_sim("demo")
    node = sim.scenario.node
    settings = exporter_settings(sim)
    reader = NodeReader.from_settings(settings, gpu_backend=sim.host.gpu_backend())  # type: ignore[attr-defined]
    try:
        got = read_once(reader)
    finally:
        reader.close()
    for name in FAMILIES:
        assert any(n.startswith(name) for n, _ in got), name
    info = select(got, "podres_kubelet_config_info")
    assert [dict(labels) for labels in info] == [
        {
            # No policy in the scenario: the kubelet's defaults, as its config file says.
            "topology_manager_policy": node.topology_policy or "none",
            "topology_manager_scope": node.topology_scope,
            "cpu_manager_policy": "static",
            "memory_manager_policy": "Static",
            "reserved_cpus": format_cpulist(node.reserved_cpus),
        }
    ]
    assert sample(got, "podres_kubelet_config_up") == 1
    assert sample(got, "podres_node_cpu_threads_per_core") == node.threads_per_core == 2
    assert sample(got, "podres_node_numa_distance", numa_node="0", to_numa_node="1") == 21
    # Every device of the scenario, the unhealthy VF included, on its own NUMA node.
    registered: Counter[tuple[str, str]] = Counter()
    for d in node.devices:
        registered[(d.resource, "none" if d.numa is None else ",".join(map(str, d.numa)))] += 1
    for (resource, numa), n in registered.items():
        assert sample(got, "podres_node_registered_devices", resource=resource, numa_node=numa) == n
    # Free whole cores: pairs (2k, 2k+1) both in the free shared pool.
    free = {
        int(dict(labels)["cpu"])
        for labels in select(got, "podres_cpu_assignment_info", pool="shared_free")
    }
    for n_id, cpus in enumerate(node.numa_cpus):
        whole = sum(1 for c in cpus[::2] if {c, c + 1} <= free)
        assert sample(got, "podres_node_free_cores", numa_node=str(n_id)) == whole


def test_an_unreadable_configuration_is_said_once_and_recovers(
    make_sim: Callable[..., SimKubelet], tmp_path: Path
) -> None:
    """A missing file: up 0, one warning naming the file and --kubelet-config, the rest of
    the node still served; the last good settings kept after a later failure; back to 1
    once the file is there again."""
    sim = make_sim("minimal")
    config = tmp_path / "config.yaml"
    settings = exporter_settings(sim, kubelet_config=str(config))
    reader = NodeReader.from_settings(settings, gpu_backend=sim.host.gpu_backend())  # type: ignore[attr-defined]
    try:
        with capture_logs() as logs:
            first = read_once(reader)
            read_once(reader)
        failed = [e for e in logs if e["event"] == "source_failed"]
        assert len(failed) == 1
        assert failed[0]["source"] == "kubelet_config"
        assert str(config) in failed[0]["error"] and "--kubelet-config" in failed[0]["error"]
        assert sample(first, "podres_kubelet_config_up") == 0
        assert not select(first, "podres_kubelet_config_info")
        assert select(first, "podres_node_cpus")  # the node is still served
        config.write_text("cpuManagerPolicy: static\n")
        good = read_once(reader)
        assert sample(good, "podres_kubelet_config_up") == 1
        config.write_text("cpuManagerPolicy: [\n")
        bad = read_once(reader)
        assert sample(bad, "podres_kubelet_config_up") == 0
        [labels] = select(bad, "podres_kubelet_config_info")
        assert dict(labels)["cpu_manager_policy"] == "static"
    finally:
        reader.close()
