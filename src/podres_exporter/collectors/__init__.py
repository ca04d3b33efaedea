"""The registry of collectors and the guarded run over them.

Each collector has a default on/off; ``--collector.NAME`` / ``--no-collector.NAME``
flags are generated from :data:`ALL`. :func:`collect_all` times every collector,
catches its failure (the others still flow) and adds
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


def collect_all(
    collectors: Iterable[Collector],
    ctx: RenderContext,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> list[Metric]:
    """Run every collector under a guard; a failing one yields no families but its own."""
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
            families = list(c.collect(ctx))
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


__all__ = ["ALL", "BY_NAME", "Collector", "RenderContext", "collect_all", "select"]
