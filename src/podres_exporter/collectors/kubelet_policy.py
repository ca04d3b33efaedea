"""The facts the kubelet admits pods with: its policies, whole cores, every registered
device, NUMA distances.

``podres_kubelet_config_info`` and ``podres_kubelet_config_up`` (the configuration file,
``--kubelet-config``), ``podres_node_free_cores`` and ``podres_node_cpu_threads_per_core``
(the free shared pool by physical core), ``podres_node_registered_devices`` (the device
manager's checkpoint, ``--kubelet-device-checkpoint``) and ``podres_node_numa_distance``.
What ``podres fit`` and the fragmentation rules need beside the allocation families.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, view
from podres_exporter.collectors.families import labelled
from podres_exporter.core.accounting.cores import free_cores, threads_per_core
from podres_exporter.core.view import NodeView

CONFIG_SOURCE = "kubelet_config"
CHECKPOINT_SOURCE = "device_checkpoint"

CONFIG_LABELS: Final = (
    "topology_manager_policy",
    "topology_manager_scope",
    "topology_manager_options",
    "cpu_manager_policy",
    "cpu_manager_options",
    "memory_manager_policy",
    "reserved_cpus",
)


def _sparse(
    name: str, documentation: str, typ: str, rows: Iterable[tuple[Mapping[str, str], float]]
) -> Metric:
    """A family whose series leave out their empty labels (the metric contract)."""
    family = Metric(name, documentation, typ)
    suffix = "_info" if typ == "info" else ""
    for labels, value in rows:
        family.add_sample(name + suffix, {k: v for k, v in labels.items() if v}, value)
    return family


def _config(v: NodeView) -> Iterator[Metric]:
    telemetry = v.snapshot.telemetry
    if telemetry is None:
        return
    status = telemetry.sources.get(CONFIG_SOURCE)
    yield GaugeMetricFamily(
        "podres_kubelet_config_up",
        "1 when the latest read of the kubelet's configuration file (--kubelet-config) "
        "succeeded, 0 when it could not be read or parsed (the last good one is served).",
        value=1 if status is not None and status.ok else 0,
    )
    config = telemetry.kubelet_config
    if config is not None:
        yield _sparse(
            "podres_kubelet_config",
            "The kubelet's admission settings, from its configuration file with the "
            "kubelet's defaults for absent keys: Topology Manager policy, scope and options, "
            "CPU manager policy and options, memory manager policy, reserved CPUs. Options "
            "as sorted key=value joined by ','; the CPUs as a CPU list.",
            "info",
            [(config.labels(), 1)],
        )


def _cores(v: NodeView) -> Iterator[Metric]:
    acc, topology = v.accounting, v.snapshot.topology
    if acc is None or acc.cpu_basis == "unknown":
        return
    free = free_cores(acc.cpu_assignments, topology)
    if free is None:
        return
    yield labelled(
        "podres_node_free_cores",
        "Physical cores per NUMA node whose every online SMT sibling is a free shared-pool "
        "CPU (allocatable, exclusive to nobody, not reserved): what the CPU manager's "
        "full-pcpus-only option and its whole-core preference take.",
        ["numa_node"],
        [((numa,), n) for numa, n in sorted(free.items())],
    )
    yield GaugeMetricFamily(
        "podres_node_cpu_threads_per_core",
        "Online CPUs per physical core (SMT threads), as the kubelet counts them.",
        value=threads_per_core(topology),
    )


def _distances(v: NodeView) -> Iterator[Metric]:
    distances = v.snapshot.topology.numa_distances
    if not distances:
        return
    yield labelled(
        "podres_node_numa_distance",
        "The kernel's distance from one NUMA node to another (10: the node itself).",
        ["numa_node", "to_numa_node"],
        [
            ((str(a), str(b)), d)
            for a, row in sorted(distances.items())
            for b, d in sorted(row.items())
        ],
    )


def _registered(v: NodeView) -> Iterator[Metric]:
    registered = v.registered
    if registered is None:
        return
    yield _sparse(
        "podres_node_registered_devices",
        "Every device the kubelet has registered per resource, healthy or not (its "
        "device-manager checkpoint), per NUMA node as the kubelet reported it; no numa_node "
        "label where the node is unknown, 'none' for a device without topology.",
        "gauge",
        [
            ({"resource": resource, "numa_node": numa or ""}, n)
            for (resource, numa), n in sorted(
                registered.counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")
            )
        ],
    )


def _families(v: NodeView) -> Iterator[Metric]:
    yield from _config(v)
    yield from _cores(v)
    yield from _distances(v)
    yield from _registered(v)


COLLECTOR: Final = PartCollector(
    "kubelet_policy",
    "the facts the kubelet admits pods with: its policies, free whole cores, every "
    "registered device, NUMA distances",
    view,
    _families,
    needs=frozenset({CONFIG_SOURCE, CHECKPOINT_SOURCE}),
)
