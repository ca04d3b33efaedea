"""The kubelet collector: connection, request counters, API, pods and anomalies."""

from __future__ import annotations

from podres_exporter.collectors import kubelet
from tests.collectors.support import READING, STATS, exposition, node_view

EXPECTED = """\
# HELP podres_kubelet_up 1 when the latest poll of the kubelet pod-resources API succeeded, else 0.
# TYPE podres_kubelet_up gauge
podres_kubelet_up 1.0
# HELP podres_kubelet_requests_total Calls to the kubelet pod-resources API by method and gRPC status code.
# TYPE podres_kubelet_requests_total counter
podres_kubelet_requests_total{code="OK",method="GetAllocatableResources"} 2.0
podres_kubelet_requests_total{code="OK",method="List"} 3.0
podres_kubelet_requests_total{code="Unavailable",method="List"} 1.0
# HELP podres_kubelet_request_duration_seconds Duration of calls to the kubelet pod-resources API, by method.
# TYPE podres_kubelet_request_duration_seconds histogram
podres_kubelet_request_duration_seconds_bucket{le="0.01",method="GetAllocatableResources"} 2.0
podres_kubelet_request_duration_seconds_bucket{le="0.1",method="GetAllocatableResources"} 2.0
podres_kubelet_request_duration_seconds_bucket{le="+Inf",method="GetAllocatableResources"} 2.0
podres_kubelet_request_duration_seconds_count{method="GetAllocatableResources"} 2.0
podres_kubelet_request_duration_seconds_sum{method="GetAllocatableResources"} 0.008
podres_kubelet_request_duration_seconds_bucket{le="0.01",method="List"} 1.0
podres_kubelet_request_duration_seconds_bucket{le="0.1",method="List"} 3.0
podres_kubelet_request_duration_seconds_bucket{le="+Inf",method="List"} 4.0
podres_kubelet_request_duration_seconds_count{method="List"} 4.0
podres_kubelet_request_duration_seconds_sum{method="List"} 0.5
# HELP podres_kubelet_suspect_empty_readings_total Readings that lost every pod or every allocatable CPU at once (a kubelet that has just restarted) and were held back until confirmed.
# TYPE podres_kubelet_suspect_empty_readings_total counter
podres_kubelet_suspect_empty_readings_total 2.0
# HELP podres_kubelet_last_success_timestamp_seconds Unix time of the last successful reading of the kubelet.
# TYPE podres_kubelet_last_success_timestamp_seconds gauge
podres_kubelet_last_success_timestamp_seconds 90.0
# HELP podres_kubelet_api_info The pod-resources API in use and which optional methods the kubelet serves.
# TYPE podres_kubelet_api_info gauge
podres_kubelet_api_info{api_version="v1",get_allocatable="served"} 1.0
# HELP podres_pods Pods the kubelet lists on this node.
# TYPE podres_pods gauge
podres_pods 2.0
# HELP podres_containers Containers (restartable sidecars included) of the pods the kubelet lists.
# TYPE podres_containers gauge
podres_containers 2.0
# HELP podres_data_anomalies Odd items in the latest reading that were kept and served, by kind.
# TYPE podres_data_anomalies gauge
podres_data_anomalies{kind="cpu_not_online"} 0.0
podres_data_anomalies{kind="cpu_listed_by_several_containers"} 0.0
podres_data_anomalies{kind="device_held_by_several_containers"} 0.0
podres_data_anomalies{kind="empty_device_id"} 0.0
podres_data_anomalies{kind="empty_name"} 0.0
podres_data_anomalies{kind="memory_overcommitted"} 0.0
podres_data_anomalies{kind="pods_over_limit"} 0.0
podres_data_anomalies{kind="containers_over_limit"} 0.0
podres_data_anomalies{kind="devices_over_limit"} 0.0
podres_data_anomalies{kind="cpus_over_limit"} 0.0
podres_data_anomalies{kind="entries_over_limit"} 0.0
podres_data_anomalies{kind="duplicate_pod"} 0.0
"""

EXPECTED_BEFORE_ANY_READING = """\
# HELP podres_kubelet_up 1 when the latest poll of the kubelet pod-resources API succeeded, else 0.
# TYPE podres_kubelet_up gauge
podres_kubelet_up 0.0
# HELP podres_kubelet_requests_total Calls to the kubelet pod-resources API by method and gRPC status code.
# TYPE podres_kubelet_requests_total counter
# HELP podres_kubelet_request_duration_seconds Duration of calls to the kubelet pod-resources API, by method.
# TYPE podres_kubelet_request_duration_seconds histogram
# HELP podres_kubelet_suspect_empty_readings_total Readings that lost every pod or every allocatable CPU at once (a kubelet that has just restarted) and were held back until confirmed.
# TYPE podres_kubelet_suspect_empty_readings_total counter
podres_kubelet_suspect_empty_readings_total 0.0
"""


def test_kubelet_collector_exact_text() -> None:
    """Requests sorted by method and code, a histogram per method, anomalies in their order."""
    view = node_view(READING, stats=STATS, suspect_empty_readings=2)
    assert exposition(kubelet.COLLECTOR, view) == EXPECTED


def test_kubelet_collector_before_any_reading() -> None:
    """Without a reading: the connection state and the (empty) counters only."""
    view = node_view(kubelet_up=False)
    assert exposition(kubelet.COLLECTOR, view) == EXPECTED_BEFORE_ANY_READING
