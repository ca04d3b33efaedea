"""The kubelet connection: up, requests, API versions, data quality.

``podres_kubelet_*``, pod and container counts, and data anomalies.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, view
from podres_exporter.collectors.families import info, labelled
from podres_exporter.core.model import RequestStats
from podres_exporter.core.view import NodeView


def _durations(stats: RequestStats) -> Metric:
    durations = HistogramMetricFamily(
        "podres_kubelet_request_duration_seconds",
        "Duration of calls to the kubelet pod-resources API, by method.",
        labels=["method"],
    )
    for method in sorted(stats.duration_buckets):
        cumulative = stats.duration_buckets[method]
        buckets = [
            (repr(b), float(n)) for b, n in zip(stats.bucket_bounds, cumulative, strict=True)
        ]
        buckets.append(("+Inf", float(stats.duration_count[method])))
        durations.add_metric([method], buckets, stats.duration_sum[method])
    return durations


def _families(v: NodeView) -> Iterator[Metric]:
    snap = v.snapshot
    yield GaugeMetricFamily(
        "podres_kubelet_up",
        "1 when the latest poll of the kubelet pod-resources API succeeded, else 0.",
        value=1 if snap.kubelet_up else 0,
    )
    yield labelled(
        "podres_kubelet_requests",
        "Calls to the kubelet pod-resources API by method and gRPC status code.",
        ["method", "code"],
        sorted(snap.stats.counts.items()),
        counter=True,
    )
    yield _durations(snap.stats)
    yield labelled(
        "podres_kubelet_suspect_empty_readings",
        "Readings that lost every pod or every allocatable CPU at once "
        "(a kubelet that has just restarted) and were held back until confirmed.",
        [],
        [((), snap.suspect_empty_readings)],
        counter=True,
    )
    reading = snap.reading
    if reading is None:
        return
    yield GaugeMetricFamily(
        "podres_kubelet_last_success_timestamp_seconds",
        "Unix time of the last successful reading of the kubelet.",
        value=reading.taken_at,
    )
    yield info(
        "podres_kubelet_api",
        "The pod-resources API in use and which optional methods the kubelet serves.",
        ["api_version", "get_allocatable"],
        [reading],
        lambda r: [r.api_version.value, r.allocatable_support.value],
    )
    acc = v.accounting
    if acc is None:
        return
    yield GaugeMetricFamily("podres_pods", "Pods the kubelet lists on this node.", value=acc.pods)
    yield GaugeMetricFamily(
        "podres_containers",
        "Containers (restartable sidecars included) of the pods the kubelet lists.",
        value=acc.containers,
    )
    yield labelled(
        "podres_data_anomalies",
        "Odd items in the latest reading that were kept and served, by kind.",
        ["kind"],
        [((kind,), n) for kind, n in acc.anomalies.items()],
    )


COLLECTOR: Final = PartCollector(
    "kubelet",
    "kubelet connection state, request counters and data anomalies",
    view,
    _families,
)


def snapshot_age_seconds(served: NodeView | None, now: float) -> float | None:
    """How old ``served``'s kubelet reading is at ``now``; None before a reading."""
    if served is None or served.snapshot.reading is None:
        return None
    return max(0.0, now - served.snapshot.reading.taken_at)


def snapshot_age(served: NodeView | None, now: float) -> Metric:
    """``podres_snapshot_age_seconds`` at ``now``: rendered when it is served, not cached."""
    age = GaugeMetricFamily(
        "podres_snapshot_age_seconds",
        "Seconds since the served kubelet data was read; grows while the kubelet is unreachable.",
    )
    seconds = snapshot_age_seconds(served, now)
    if seconds is not None:
        age.add_metric([], seconds)
    return age
