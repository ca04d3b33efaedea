"""The collector registry: names, defaults, selection and the guarded run over them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors import ALL, collect_all, cpu, select
from podres_exporter.collectors.base import RenderContext
from tests.collectors.support import READING, node_view, rich_view


class Broken:
    name = "broken"
    default_enabled = True
    description = "always fails"
    needs: frozenset[str] = frozenset()

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        raise RuntimeError("boom")
        yield  # pragma: no cover

    def inputs(self, ctx: RenderContext) -> object:
        return ctx.view


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def test_the_registry_names_order_and_defaults() -> None:
    """Every collector, in exposition order, each on by default."""
    assert [c.name for c in ALL] == [
        "build",
        "kubelet",
        "cpu",
        "devices",
        "memory",
        "dra",
        "sources",
        "gpu",
        "pci",
        "net",
        "infiniband",
        "drm",
        "cpu_usage",
        "placement",
        "kubelet_policy",
    ]
    assert all(c.default_enabled for c in ALL)


def test_a_failing_collector_does_not_stop_the_others() -> None:
    """A collector that raises reports success 0; the others' families still come out."""
    fams = collect_all([Broken(), cpu.COLLECTOR], RenderContext(node_view(READING), "x"))
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
    from podres_exporter.exporter.reader import build_sources
    from podres_exporter.exporter.settings import build
    from podres_exporter.sources.gpu import NvmlBackend
    from podres_sim.nvml import FakeNvml

    settings = build({}, {})
    backend = NvmlBackend(FakeNvml())
    files = {"kubelet_config", "device_checkpoint"}
    assert set(build_sources(settings, select({}), backend)) == {"gpu", "sysfs", "cpu", *files}
    off = {"gpu": False, "pci": False, "net": False, "infiniband": False, "drm": False}
    assert set(build_sources(settings, select(off), backend)) == {"cpu", *files}
    no_files = {"cpu_usage": False, "kubelet_policy": False}
    assert set(build_sources(settings, select(no_files), None)) == {"sysfs"}
    backend.close()


def test_no_two_collectors_emit_the_same_family() -> None:
    """Over a view where every collector emits samples, family names are each one's own.

    The registry's own families count as a collector's; the check is also
    prometheus_client's, which knows the _total, _info, _bucket ... series names.
    """
    ctx = RenderContext(rich_view(), "1.2.3")
    emitted = {c.name: list(c.collect(ctx)) for c in ALL}
    for name, families in emitted.items():
        assert any(f.samples for f in families), f"{name} emits no sample: the view is too thin"
    emitted["registry"] = [f for f in collect_all((), ctx) if f.name.startswith("podres_")]
    names = {c: [f.name for f in families] for c, families in emitted.items()}
    for c, own in names.items():
        assert len(own) == len(set(own)), f"{c} emits a family twice"
    for (a, mine), (b, theirs) in itertools.combinations(names.items(), 2):
        assert not set(mine) & set(theirs), f"{a} and {b} both emit {set(mine) & set(theirs)}"
    registry = CollectorRegistry(auto_describe=True)
    for families in emitted.values():
        registry.register(_Families(families))  # raises on a duplicated series name


def test_before_any_reading_only_build_and_kubelet_speak() -> None:
    """No reading, no telemetry: the build and the kubelet connection, and the registry's own."""
    families = collect_all(ALL, RenderContext(node_view(kubelet_up=False), "1.2.3"))
    assert [f.name for f in families] == [
        "podres_build",
        "podres_node",
        "podres_kubelet_up",
        "podres_kubelet_requests",
        "podres_kubelet_request_duration_seconds",
        "podres_kubelet_suspect_empty_readings",
        "podres_collector_success",
        "podres_collector_duration_seconds",
    ]
