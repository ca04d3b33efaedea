"""Metric samples -> the rows of ``podres top``. Pure: no I/O, no clock, no terminal.

Every source (the local kubelet rendered in-process, an exporter's ``/metrics``,
Prometheus) ends up as samples (name, labels, value: :class:`AnySample`) in a
:class:`Reading`; :func:`build` turns one reading (and, for CPU busy shares, an earlier one) into
per-node headers, container rows and device rows. :mod:`.selection` filters and
sorts them for a view; :mod:`.jsonout` is ``-o json``.

Which metric feeds which value (docs/metrics.md has each metric):

- header: ``podres_node_cpus`` (CPUs per NUMA node and pool), ``podres_node_devices``
  (free devices per resource), ``podres_node_memory_bytes`` (free memory and hugepages
  per NUMA node), ``podres_kubelet_up``, ``podres_snapshot_age_seconds``, ``podres_pods``,
  ``podres_containers``;
- container rows: ``podres_cpu_assignment_info`` (exclusive CPU ids; container ``""``
  is a pod's own, its private shared pool), ``podres_pod_shared_pool_cpus`` (a pod row
  for each pod with a pod-level CPU set, even when its pool is empty),
  ``podres_cpu_busy_seconds_total`` (busy share, from two readings) or :data:`BUSY_RATIO`
  (a rate the source computed), ``podres_container_device_info``,
  ``podres_container_memory_bytes``, ``podres_container_numa_aligned``, holder-labelled
  ``podres_gpu_utilization_ratio`` / ``podres_gpu_memory_{used,total}_bytes`` and, for a
  GPU shared with others, the holder's ``podres_gpu_holder_sm_utilization_ratio`` /
  ``podres_gpu_holder_memory_used_bytes``; ``podres_container_dynamic_resource_info``
  (the devices of its DRA claims);
- device rows: ``podres_node_device_info`` (state, hence health and "free"),
  ``podres_container_device_info`` (holders), ``podres_device_resolution_info`` (the
  physical device of an id) to find ``podres_gpu_*`` / ``podres_drm_busy_ratio`` values;
  ``podres_container_dynamic_resource_info`` (a row per DRA device in use, with its holders).

Samples carrying a ``node`` label (or else an ``instance`` label, as Prometheus adds)
are grouped by it; samples with neither belong to the reading's ``origin``.

One room per table: :mod:`.samples` (readings, grouped per node), :mod:`.header`,
:mod:`.containers`, :mod:`.devices`, :mod:`.busy` (CPU busy shares between readings) and
:mod:`.nodes` (every node's rows: :func:`build`).
"""

from podres_exporter.top.rows.busy import (
    advance_baseline,
    busy_key,
    cpu_stamp,
    cpu_times_advanced,
    needs_second_reading,
)
from podres_exporter.top.rows.containers import ContainerRow, DeviceHolding
from podres_exporter.top.rows.devices import DeviceRow
from podres_exporter.top.rows.header import MemoryFree, NodeHeader, NumaCpus, ResourceCount
from podres_exporter.top.rows.nodes import NodeData, TopData, add_busy, build
from podres_exporter.top.rows.samples import (
    BUSY_COUNTER,
    BUSY_RATIO,
    CPU_SOURCE_STAMP,
    METRICS,
    AnySample,
    Reading,
    Sample,
    natural_key,
    node_of,
    numa_key,
)

__all__ = [
    "BUSY_COUNTER",
    "BUSY_RATIO",
    "CPU_SOURCE_STAMP",
    "METRICS",
    "AnySample",
    "ContainerRow",
    "DeviceHolding",
    "DeviceRow",
    "MemoryFree",
    "NodeData",
    "NodeHeader",
    "NumaCpus",
    "Reading",
    "ResourceCount",
    "Sample",
    "TopData",
    "add_busy",
    "advance_baseline",
    "build",
    "busy_key",
    "cpu_stamp",
    "cpu_times_advanced",
    "natural_key",
    "needs_second_reading",
    "node_of",
    "numa_key",
]
