"""Collectors translate a NodeView into exact exposition text; failures are contained."""

from __future__ import annotations

from collections.abc import Iterator
from types import MappingProxyType

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors import collect_all, select
from podres_exporter.collectors.base import RenderContext
from podres_exporter.collectors.cpu import CpuCollector
from podres_exporter.http import _render
from podres_exporter.model import (
    Allocatable,
    ApiVersion,
    ContainerAlloc,
    KubeletReading,
    NodeTopology,
    PodAlloc,
    Snapshot,
    Support,
)
from podres_exporter.view import NodeView


def view() -> NodeView:
    topo = NodeTopology(frozenset(range(4)), MappingProxyType({0: 0, 1: 0, 2: 1, 3: 1}))
    reading = KubeletReading(
        ApiVersion.V1,
        (PodAlloc("ml", "train", (ContainerAlloc("main", cpu_ids=frozenset({1})),)),),
        Allocatable(cpu_ids=frozenset({1, 2, 3})),
        Support.SERVED,
        taken_at=1.0,
    )
    return NodeView.of(Snapshot(1, 1.0, topo, reading, True))


EXPECTED_CPU = """\
# HELP podres_node_cpus CPUs per NUMA node and pool: allocatable, exclusive (held by one container), shared_free (allocatable minus all exclusive), reserved (online, not allocatable).
# TYPE podres_node_cpus gauge
podres_node_cpus{numa_node="0",pool="allocatable"} 1.0
podres_node_cpus{numa_node="0",pool="exclusive"} 1.0
podres_node_cpus{numa_node="0",pool="reserved"} 1.0
podres_node_cpus{numa_node="0",pool="shared_free"} 0.0
podres_node_cpus{numa_node="1",pool="allocatable"} 2.0
podres_node_cpus{numa_node="1",pool="exclusive"} 0.0
podres_node_cpus{numa_node="1",pool="reserved"} 0.0
podres_node_cpus{numa_node="1",pool="shared_free"} 2.0
# HELP podres_cpu_shared_pool_basis 1 for the basis of the shared pool: 'allocatable' (the kubelet reports allocatable CPUs) or 'online' (it reports none: CPU manager policy none, or no GetAllocatableResources; the node's online CPUs are the pool).
# TYPE podres_cpu_shared_pool_basis gauge
podres_cpu_shared_pool_basis{basis="allocatable"} 1.0
podres_cpu_shared_pool_basis{basis="online"} 0.0
# HELP podres_container_exclusive_cpus CPUs held exclusively by a container, per NUMA node.
# TYPE podres_container_exclusive_cpus gauge
podres_container_exclusive_cpus{container="main",namespace="ml",numa_node="0",pod="train"} 1.0
# HELP podres_cpu_assignment_info One series per CPU: its NUMA node, pool and, when exclusive, its holder.
# TYPE podres_cpu_assignment_info gauge
podres_cpu_assignment_info{container="",cpu="0",namespace="",numa_node="0",pod="",pool="reserved"} 1.0
podres_cpu_assignment_info{container="main",cpu="1",namespace="ml",numa_node="0",pod="train",pool="exclusive"} 1.0
podres_cpu_assignment_info{container="",cpu="2",namespace="",numa_node="1",pod="",pool="shared_free"} 1.0
podres_cpu_assignment_info{container="",cpu="3",namespace="",numa_node="1",pod="",pool="shared_free"} 1.0
"""


def test_cpu_collector_exact_text() -> None:
    """The CPU collector renders exactly the expected exposition for a small node."""
    text = _render(
        CpuCollector().collect(RenderContext(view(), "1.2.3")), openmetrics=False
    ).decode()
    assert text == EXPECTED_CPU


class Broken:
    name = "broken"
    default_enabled = True
    description = "always fails"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        raise RuntimeError("boom")
        yield  # pragma: no cover


def test_a_failing_collector_does_not_stop_the_others() -> None:
    """A collector that raises reports success 0; the others' families still come out."""
    fams = collect_all([Broken(), CpuCollector()], RenderContext(view(), "x"))
    names = {f.name for f in fams}
    assert "podres_node_cpus" in names
    success = {
        s.labels["collector"]: s.value
        for f in fams
        if f.name == "podres_collector_success"
        for s in f.samples
    }
    assert success == {"broken": 0, "cpu": 1}


def test_select_rejects_unknown_names() -> None:
    """An unknown collector name is a KeyError naming it; defaults are all on."""
    from podres_exporter.collectors import ALL

    assert select({}) == ALL
    assert "cpu" not in {c.name for c in select({"cpu": False})}
    try:
        select({"gpu-magic": True})
    except KeyError as err:
        assert err.args[0] == "gpu-magic"
    else:  # pragma: no cover
        raise AssertionError("no KeyError")


def test_sources_follow_the_enabled_collectors() -> None:
    """A telemetry source is read only when a collector that needs it is on."""
    from podres_exporter.cli.export import build_sources
    from podres_exporter.settings import build
    from podres_exporter.sim.fakenvml import FakeNvml
    from podres_exporter.sources.gpu import NvmlBackend

    settings = build({}, {})
    backend = NvmlBackend(FakeNvml())
    assert set(build_sources(settings, select({}), backend)) == {"gpu", "sysfs", "cpu"}
    off = {"gpu": False, "pci": False, "net": False, "infiniband": False, "drm": False}
    assert set(build_sources(settings, select(off), backend)) == {"cpu"}
    assert set(build_sources(settings, select({"cpu_usage": False}), None)) == {"sysfs"}
    backend.close()
