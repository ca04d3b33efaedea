"""The kubelet connection: up, requests, API versions, data quality."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import RenderContext


class KubeletCollector:
    """``podres_kubelet_*``, pod and container counts, and data anomalies."""

    name = "kubelet"
    default_enabled = True
    description = "kubelet connection state, request counters and data anomalies"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        snap = ctx.view.snapshot
        yield GaugeMetricFamily(
            "podres_kubelet_up",
            "1 when the latest poll of the kubelet pod-resources API succeeded, else 0.",
            value=1 if snap.kubelet_up else 0,
        )
        stats = snap.stats
        requests = CounterMetricFamily(
            "podres_kubelet_requests",
            "Calls to the kubelet pod-resources API by method and gRPC status code.",
            labels=["method", "code"],
        )
        for (method, code), n in sorted(stats.counts.items()):
            requests.add_metric([method, code], n)
        yield requests
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
        yield durations
        suspect = CounterMetricFamily(
            "podres_kubelet_suspect_empty_readings",
            "Readings that lost every pod or every allocatable CPU at once "
            "(a kubelet that has just restarted) and were held back until confirmed.",
        )
        suspect.add_metric([], snap.suspect_empty_readings)
        yield suspect
        reading = snap.reading
        if reading is None:
            return
        yield GaugeMetricFamily(
            "podres_kubelet_last_success_timestamp_seconds",
            "Unix time of the last successful reading of the kubelet.",
            value=reading.taken_at,
        )
        info = InfoMetricFamily(
            "podres_kubelet_api",
            "The pod-resources API in use and which optional methods the kubelet serves.",
            labels=["version", "get_allocatable"],
        )
        info.add_metric([reading.api_version.value, reading.allocatable_support.value], {})
        yield info
        acc = ctx.view.accounting
        if acc is None:
            return
        yield GaugeMetricFamily(
            "podres_pods", "Pods the kubelet lists on this node.", value=acc.pods
        )
        yield GaugeMetricFamily(
            "podres_containers",
            "Containers (restartable sidecars included) of the pods the kubelet lists.",
            value=acc.containers,
        )
        anomalies = GaugeMetricFamily(
            "podres_data_anomalies",
            "Odd items in the latest reading that were kept and served, by kind.",
            labels=["kind"],
        )
        for kind, n in acc.anomalies.items():
            anomalies.add_metric([kind], n)
        yield anomalies


class BuildCollector:
    """``podres_build_info``."""

    name = "build"
    default_enabled = True
    description = "the exporter's own version"

    def collect(self, ctx: RenderContext) -> Iterator[Metric]:
        info = InfoMetricFamily("podres_build", "The exporter's version.", labels=["version"])
        info.add_metric([ctx.version], {})
        yield info
