"""The registry of collectors and the guarded run over them.

Each collector has a default on/off; the exporter's ``--[no-]collector.NAME`` switches
are generated from :data:`ALL` (``COLLECTOR_SWITCHES`` in
:mod:`podres_exporter.exporter.settings`, beside the exporter's other options).
:func:`collect_all` times every collector, catches its failure (the others still flow) and adds
``podres_collector_success{collector}`` and ``podres_collector_duration_seconds{collector}``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

import structlog
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors import (
    build,
    cpu,
    cpu_usage,
    devices,
    dra,
    drm,
    gpu,
    infiniband,
    kubelet,
    kubelet_policy,
    memory,
    net,
    pci,
    placement,
    telemetry_sources,
)
from podres_exporter.collectors.base import Collector, RenderContext

log = structlog.get_logger(__name__)

ALL: tuple[Collector, ...] = (
    build.COLLECTOR,
    kubelet.COLLECTOR,
    cpu.COLLECTOR,
    devices.COLLECTOR,
    memory.COLLECTOR,
    dra.COLLECTOR,
    telemetry_sources.COLLECTOR,
    gpu.COLLECTOR,
    pci.COLLECTOR,
    net.COLLECTOR,
    infiniband.COLLECTOR,
    drm.COLLECTOR,
    cpu_usage.COLLECTOR,
    placement.COLLECTOR,
    kubelet_policy.COLLECTOR,
)
BY_NAME: Mapping[str, Collector] = {c.name: c for c in ALL}


def select(overrides: Mapping[str, bool]) -> tuple[Collector, ...]:
    """The enabled collectors: defaults, changed by ``overrides`` (name -> on/off).

    Raises KeyError naming an unknown collector.
    """
    for name in overrides:
        if name not in BY_NAME:
            raise KeyError(name)
    return tuple(c for c in ALL if overrides.get(c.name, c.default_enabled))


class FamilyCache:
    """Each collector's families of the latest rendering, with the inputs they came from.

    A collector whose inputs (:meth:`Collector.inputs`) are the very objects of the last
    rendering gives the same family objects again: nothing is built, and the exposition
    writer reuses their text too. The cache holds those inputs, so their identity cannot
    pass to another object meanwhile.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[object, tuple[Metric, ...]]] = {}
        self.hits = 0

    def collect(self, c: Collector, ctx: RenderContext) -> tuple[Metric, ...]:
        """``c``'s families for ``ctx``, reused when its inputs are unchanged."""
        inputs = c.inputs(ctx)
        last = self._last.get(c.name)
        if last is not None and last[0] is inputs:
            self.hits += 1
            return last[1]
        families = tuple(c.collect(ctx))
        self._last[c.name] = (inputs, families)
        return families


def collect_all(
    collectors: Iterable[Collector],
    ctx: RenderContext,
    *,
    clock: Callable[[], float] = time.perf_counter,
    cache: FamilyCache | None = None,
) -> list[Metric]:
    """Run every collector under a guard; a failing one yields no families but its own.

    With ``cache``, a collector whose inputs did not change gives its last families."""
    out: list[Metric] = []
    success = GaugeMetricFamily(
        "podres_collector_success",
        "1 when the collector succeeded in the latest rendering, 0 when it failed.",
        labels=["collector"],
    )
    duration = GaugeMetricFamily(
        "podres_collector_duration_seconds",
        "Time the collector took in the latest rendering.",
        labels=["collector"],
    )
    for c in collectors:
        start = clock()
        try:
            families = cache.collect(c, ctx) if cache is not None else tuple(c.collect(ctx))
        except Exception as err:  # noqa: BLE001 - a broken collector must not take the others down
            log.error("collector_failed", collector=c.name, error=repr(err))
            ok = False
        else:
            out.extend(families)
            ok = True
        success.add_metric([c.name], 1 if ok else 0)
        duration.add_metric([c.name], clock() - start)
    out.extend((success, duration))
    return out


__all__ = ["ALL", "BY_NAME", "Collector", "FamilyCache", "RenderContext", "collect_all", "select"]
