"""Generate the Grafana dashboards in dashboards/ from the definitions below.

Usage: python tools/dashboards.py [--check] [--multi-cluster] [--config FILE] [--out DIR]

Writes one classic dashboard JSON file per board into dashboards/ (or DIR), and removes any
other ``*.json`` there. ``--check`` writes nothing and exits 1 when the committed files differ
from what would be written; tests/monitoring/test_dashboards.py fails the same way.
``--multi-cluster`` shows the ``cluster`` picker (hidden in the committed boards, which suit
one Prometheus per cluster): write those into a directory of your own with ``--out``.
``--config FILE`` takes the settings of tools/mixin_config.py (the names of the ``cluster`` and
``node`` labels, the exporter's and the plugin's job selectors): the boards are written with the
default names and :func:`configured` renames those labels in every query, legend and column.

Every query scopes itself to the ``cluster`` and ``node`` variables; the tests run each one
against a real Prometheus scraping ``podres demo`` and lint them (units, matchers, rate
windows, sums that would count a shared GPU twice). docs/dashboards.md describes the boards.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

from grafana import (
    JSON,
    Dashboard,
    Link,
    Query,
    Row,
    Variable,
    constant_variable,
    custom_variable,
    dashboard_links,
    datasource_variable,
    heatmap,
    query_variable,
    series_override,
    stat,
    state_timeline,
    table,
    timeseries,
    value_text,
)
from mixin_config import ConfigFileError, MixinConfig, load

from podres_exporter.core.telemetry import CLOCK_EVENT_REASONS

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "dashboards"
TAG = "podres"

UID_FLEET = "podres-fleet"
UID_NODE = "podres-node-allocation"
UID_ACCELERATORS = "podres-accelerators"
UID_WASTE = "podres-waste"
UID_HEALTH = "podres-health"
UID_GPUS = "podres-gpus"

# The scrape jobs of the two agents: the Services' names under the ServiceMonitor (and the
# plain scrape configuration in docs/deploy.md), or the one name the PodMonitor gives both.
# (The defaults' exporter and plugin selectors; a --config file's are put in at the end, by
# configured().)
JOBS = "podres-exporter|podres-system/podres-exporter|podres-device-plugin"

NODE = 'node=~"$node"'
CLUSTER = 'cluster=~"$cluster"'
HOLDER = ('namespace=~"$namespace"', 'pod=~"$pod"')
# Clock-event reasons that slow a busy GPU down: every reason the exporter knows but idle and
# clocks set on purpose.
NOT_THROTTLING = frozenset({"gpu_idle", "applications_clocks_setting", "display_clocks_setting"})
THROTTLE_REASONS = "|".join(r for r in CLOCK_EVENT_REASONS if r not in NOT_THROTTLING)


def eq(label: str, value: str) -> str:
    return f'{label}="{value}"'


def ne(label: str, value: str) -> str:
    return f'{label}!="{value}"'


def rx(label: str, value: str) -> str:
    return f'{label}=~"{value}"'


def sel(metric: str, *matchers: str) -> str:
    """``metric`` with the board's node and cluster matchers and any others."""
    return metric + "{" + ", ".join((NODE, CLUSTER, *matchers)) + "}"


def containers(*matchers: str) -> str:
    """Every container-level series (``podres_container_*``) of the board's nodes."""
    return "{" + ", ".join(('__name__=~"podres_container_.+"', NODE, CLUSTER, *matchers)) + "}"


def no_mig_parents() -> str:
    """Leaves out the MIG-enabled GPUs, keeping whole GPUs and MIG instances: such a GPU's
    memory includes its instances', so a sum over both would count it twice."""
    return f"unless on (uuid) {sel('podres_gpu_info', eq('mig_mode', 'enabled'))}"


def board_url(uid: str) -> str:
    """A link into board ``uid`` for the node of the clicked row, keeping the data source,
    cluster and time range."""
    return (
        f"/d/{uid}/{uid}?${{datasource:queryparam}}&${{cluster:queryparam}}"
        "&var-node=${__value.raw}&${__url_time_range}"
    )


NODE_LINKS = (
    Link("Node allocation of ${__value.raw}", board_url(UID_NODE)),
    Link("Accelerators of ${__value.raw}", board_url(UID_ACCELERATORS)),
    Link("Waste and placement on ${__value.raw}", board_url(UID_WASTE)),
    Link("Exporter health on ${__value.raw}", board_url(UID_HEALTH)),
)

UP_DOWN = value_text({0: ("down", "red"), 1: ("up", "green")})


# ---- variables -----------------------------------------------------------------------------


def cluster_variable(multi_cluster: bool) -> Variable:
    return query_variable(
        "cluster", "Cluster", "label_values(podres_build_info, cluster)",
        multi=False, hide=0 if multi_cluster else 2,
        description="The series' cluster label, where several clusters' data meet (Thanos, "
        "Mimir, federation). Hidden: one Prometheus per cluster is assumed; regenerate with "
        "--multi-cluster to show it.",
    )  # fmt: skip


NODE_VAR = query_variable(
    "node", "Node", f"label_values(podres_build_info{{{CLUSTER}}}, node)",
    description="The Kubernetes node, from the scrape's node label.",
)  # fmt: skip
NAMESPACE_VAR = query_variable(
    "namespace", "Namespace", f"label_values({containers()}, namespace)",
    description="Namespaces of the containers that hold CPUs, devices or memory.",
)  # fmt: skip
POD_VAR = query_variable(
    "pod", "Pod", f"label_values({containers(rx('namespace', '$namespace'))}, pod)",
)  # fmt: skip
RESOURCE_VAR = query_variable(
    "resource", "Resource", f"label_values({sel('podres_node_devices')}, resource)",
    description="Extended resources (device plugins) of the selected nodes.",
)  # fmt: skip
GPU_VAR = query_variable(
    "gpu", "GPU", f"label_values({sel('podres_gpu_info')}, uuid)",
    description="GPU and MIG instance UUIDs of the selected nodes.",
)  # fmt: skip
JOB_VAR = constant_variable(
    "job", JOBS, "Scrape jobs of the exporter and the device plugin (see docs/deploy.md)."
)


def variables(multi_cluster: bool, *extra: Variable) -> tuple[Variable, ...]:
    return (datasource_variable(), cluster_variable(multi_cluster), NODE_VAR, *extra)


# ---- the boards ----------------------------------------------------------------------------


def fleet_board(multi_cluster: bool) -> Dashboard:
    unallocated = sel("podres_node_devices", 'resource=~"$resource"', 'state="free"')
    allocated = sel("podres_node_devices", 'resource=~"$resource"', 'state="allocated"')
    unhealthy = sel("podres_node_devices", 'resource=~"$resource"', 'state="allocated_unhealthy"')
    allocatable = sel("podres_node_allocatable_devices", 'resource=~"$resource"')
    overview = Row(
        "Fleet",
        (
            stat(
                "Nodes reporting", "How many nodes does an exporter report from?",
                Query(f"count({sel('podres_build_info')})"), unit="none",
            ),
            stat(
                "Kubelets unreachable",
                "On how many nodes can the exporter not read the kubelet right now?",
                Query(f"count({sel('podres_kubelet_up')} == 0) or vector(0)"),
                unit="none", thresholds=[(1, "red")],
            ),
            stat(
                "Free shared-pool CPUs",
                "How many CPUs are neither reserved nor held exclusively on the selected nodes?",
                Query(f"sum({sel('podres_node_cpus', eq('pool', 'shared_free'))})"), unit="none",
            ),
            stat(
                "Free devices", "How many devices could still be handed out?",
                Query(f"sum({unallocated})"), unit="none",
            ),
            stat(
                "Devices held while unhealthy",
                "How many devices do containers hold that are no longer healthy?",
                Query(f"sum({unhealthy})"), unit="none", thresholds=[(1, "red")],
            ),
            stat(
                "Containers straddling NUMA nodes",
                "How many containers have CPUs, devices or memory on different NUMA nodes?",
                Query(f"count({sel('podres_container_numa_aligned')} == 0) or vector(0)"),
                unit="none", thresholds=[(1, "orange")],
            ),
        ),
    )  # fmt: skip
    devices = Row(
        "Devices by node",
        (
            table(
                "Nodes and resources",
                "Which node has free, allocated or unhealthy devices of which resource? "
                "Click a node to open its boards.",
                Query(f"sum by (node, resource) ({unallocated})"),
                Query(f"sum by (node, resource) ({allocated})"),
                Query(f"sum by (node, resource) ({unhealthy})"),
                Query(f"sum by (node, resource) ({allocatable})"),
                unit="none",
                columns={"node": "Node", "resource": "Resource", "Value #A": "Free",
                         "Value #B": "Allocated", "Value #C": "Allocated unhealthy",
                         "Value #D": "Allocatable"},
                column_links={"Node": NODE_LINKS},
                sort_by="Free", sort_desc=True, height=10,
            ),
        ),
    )  # fmt: skip
    cpu = sel("podres_node_cpus", 'pool="shared_free"')
    mem_free = sel("podres_node_memory_bytes", 'memory_type="memory"', 'state="free"')
    huge_free = sel("podres_node_memory_bytes", 'memory_type=~"hugepages-.+"', 'state="free"')
    nodes = Row(
        "Nodes",
        (
            table(
                "Nodes: CPUs, memory and data",
                "How much CPU and pinnable memory is free on each node, and is its data fresh?",
                Query(f"sum by (node) ({cpu})"),
                Query(f"sum by (node) ({sel('podres_node_cpus', eq('pool', 'exclusive'))})"),
                Query(f"sum by (node) ({mem_free})"),
                Query(f"sum by (node) ({huge_free})"),
                Query(f"max by (node) ({sel('podres_kubelet_up')})"),
                Query(f"max by (node) ({sel('podres_snapshot_age_seconds')})"),
                Query(f"max by (node) ({sel('podres_pods')})"),
                unit="none",
                columns={"node": "Node", "Value #A": "Free shared CPUs",
                         "Value #B": "Exclusive CPUs", "Value #C": "Free pinnable memory",
                         "Value #D": "Free hugepages", "Value #E": "Kubelet up",
                         "Value #F": "Data age", "Value #G": "Pods"},
                column_units={"Free pinnable memory": "bytes", "Free hugepages": "bytes",
                              "Data age": "s"},
                column_links={"Node": NODE_LINKS},
                sort_by="Node", height=10,
            ),
            timeseries(
                "Free devices by resource",
                "How has the fleet's free capacity of each resource changed?",
                Query(f"sum by (resource) ({unallocated})", "{{resource}}"),
                unit="none", width=12,
            ),
            timeseries(
                "Free shared-pool CPUs by node",
                "Which nodes are running out of shared-pool CPUs?",
                Query(f"sum by (node) ({cpu})", "{{node}}"), unit="none", width=12,
            ),
        ),
    )  # fmt: skip
    return Dashboard(
        UID_FLEET, "podres / Fleet",
        "Every node's free, allocated and unhealthy devices and CPUs; where each pod shape "
        "fits; links into the per-node boards.",
        (TAG,), variables(multi_cluster, RESOURCE_VAR), (overview, devices, nodes, fit_row()),
        links=dashboard_links(TAG, "podres boards"),
    )  # fmt: skip


def fit_row() -> Row:
    """Where each pod shape of the rules' fit_shapes fits: the recording rules of
    docs/rules.md ("Where a pod shape fits"), per node and for the selected nodes."""
    admits = sel("node_shape:podres_shape_admittable_pods:sum")
    totals = sel("node:podres_shape_fitting_pods_by_totals:min")
    largest = sel("node_shape:podres_shape_fitting_pods:max")

    def nodes_with(series: str) -> Query:
        return Query(f"count by (shape) ({series} >= 1) or 0 * count by (shape) ({series})")

    return Row(
        "Where does a job fit",
        (
            table(
                "Where does a 1-, 2-, 4-, 8-GPU job fit",
                "For each pod shape the rules follow (fit_shapes: 1, 2, 4, 8 GPUs, CPUs, both): "
                "on how many nodes does one more fit under their Topology Manager policy, how "
                "many such pods they take, on how many nodes the totals say it fits (more: pods "
                "refused with TopologyAffinityError), and the largest free block on one NUMA "
                "node, in pods.",
                nodes_with(admits),
                Query(f"sum by (shape) ({admits})"),
                nodes_with(totals),
                Query(f"max by (shape) ({largest})"),
                unit="none",
                columns={"shape": "Shape", "Value #A": "Nodes that admit one",
                         "Value #B": "Pods they admit", "Value #C": "Nodes whose totals fit",
                         "Value #D": "Largest block (pods)"},
                sort_by="Shape", width=12, height=10,
            ),
            table(
                "Nodes that admit each shape",
                "Which nodes admit a pod of which shape, and how many? Click a node to open "
                "its boards.",
                Query(f"{admits} >= 1"),
                unit="none",
                columns={"node": "Node", "shape": "Shape", "Value": "Pods it admits"},
                column_links={"Node": NODE_LINKS},
                sort_by="Pods it admits", sort_desc=True, width=12, height=10,
            ),
        ),
    )  # fmt: skip


def node_board(multi_cluster: bool) -> Dashboard:
    pool_code = (
        f"max by (node, cpu) ("
        f"{sel('podres_cpu_assignment_info', eq('pool', 'reserved'))} * 0"
        f" or {sel('podres_cpu_assignment_info', eq('pool', 'shared_free'))}"
        f" or {sel('podres_cpu_assignment_info', eq('pool', 'exclusive'))} * 2)"
    )
    pools = value_text(
        {0: ("reserved", "purple"), 1: ("shared", "green"), 2: ("exclusive", "blue")}
    )
    cpus = Row(
        "CPUs",
        (
            timeseries(
                "CPUs per NUMA node by pool",
                "How are each NUMA node's CPUs split between reserved, exclusive and the free "
                "shared pool?",
                Query(f"sum by (node, numa_node, pool) "
                      f"({sel('podres_node_cpus')})",
                      "{{node}} NUMA {{numa_node}} {{pool}}"),
                unit="none", stack=True, width=12, legend_table=True,
            ),
            stat(
                "Free shared-pool CPUs",
                "How many shared-pool CPUs does each NUMA node have left?",
                Query(f"sum by (node, numa_node) "
                      f"({sel('podres_node_cpus', eq('pool', 'shared_free'))})",
                      "{{node}} NUMA {{numa_node}}"),
                unit="none", width=6, height=8, thresholds=[(0, "red"), (1, "green")],
            ),
            stat(
                "Shared pool basis",
                "Does the kubelet report allocatable CPUs (CPU manager static) or are the "
                "online CPUs the pool (policy none)?",
                Query(f"{sel('podres_cpu_shared_pool_basis')} == 1", "{{node}}: {{basis}}"),
                unit="none", width=6, height=8, text_mode="name",
            ),
            table(
                "CPU map",
                "Which container holds which CPU, and which CPUs are shared or reserved?",
                Query(sel("podres_cpu_assignment_info", *HOLDER)),
                unit="none",
                columns={"node": "Node", "cpu": "CPU", "numa_node": "NUMA node",
                         "pool": "Pool", "namespace": "Namespace", "pod": "Pod",
                         "container": "Container"},
                numeric_columns=["cpu"], sort_by="CPU", width=12, height=12,
            ),
            state_timeline(
                "CPU pool per CPU",
                "When was each CPU reserved, shared or exclusive?",
                Query(pool_code, "{{node}} CPU {{cpu}}"),
                unit="none", mappings=[pools], width=12, height=12,
            ),
            timeseries(
                "Exclusive CPUs by container",
                "Which containers hold exclusive CPUs, how many, on which NUMA node?",
                Query(f"sum by (namespace, pod, container, numa_node) "
                      f"({sel('podres_container_exclusive_cpus', *HOLDER)})",
                      "{{namespace}}/{{pod}}/{{container}} NUMA {{numa_node}}"),
                unit="none", stack=True, width=24, legend_table=True,
            ),
        ),
    )  # fmt: skip
    dev = ('resource=~"$resource"',)
    devices = Row(
        "Devices",
        (
            table(
                "Devices per resource and NUMA node",
                "How many devices of each resource are allocatable, allocated, free, or "
                "held while unhealthy, on which NUMA node?",
                Query(f"sum by (node, resource, numa_node) "
                      f"({sel('podres_node_allocatable_devices', *dev)})"),
                *(
                    Query(f"sum by (node, resource, numa_node) "
                          f"({sel('podres_node_devices', *dev, eq('state', state))})")
                    for state in ("allocated", "free", "allocated_unhealthy")
                ),
                unit="none",
                columns={"node": "Node", "resource": "Resource", "numa_node": "NUMA node",
                         "Value #A": "Allocatable", "Value #B": "Allocated",
                         "Value #C": "Free", "Value #D": "Allocated unhealthy"},
                sort_by="Resource", width=12, height=9,
            ),
            timeseries(
                "Free devices",
                "How many devices of each resource were free over time, per NUMA node?",
                Query(f"sum by (node, resource, numa_node) "
                      f"({sel('podres_node_devices', *dev, eq('state', 'free'))})",
                      "{{node}} {{resource}} NUMA {{numa_node}}"),
                unit="none", width=12, height=9,
            ),
            table(
                "Devices held by containers",
                "Which container holds which device id, on which NUMA node?",
                Query(sel("podres_container_device_info", *HOLDER, *dev)),
                unit="none",
                columns={"node": "Node", "namespace": "Namespace", "pod": "Pod",
                         "container": "Container", "resource": "Resource",
                         "device_id": "Device", "numa_node": "NUMA node"},
                sort_by="Namespace", width=12, height=10,
            ),
            table(
                "Device inventory",
                "Which device ids does the kubelet report, and is each free, allocated or held "
                "while unhealthy?",
                Query(sel("podres_node_device_info", *dev)),
                unit="none",
                columns={"node": "Node", "resource": "Resource", "device_id": "Device",
                         "numa_node": "NUMA node", "state": "State"},
                sort_by="Resource", width=12, height=10,
            ),
        ),
    )  # fmt: skip
    memory = Row(
        "Memory and hugepages",
        (
            timeseries(
                "Memory per NUMA node",
                "How much pinnable memory is allocated and free on each NUMA node?",
                Query(f"sum by (node, numa_node, state) "
                      f"({sel('podres_node_memory_bytes', eq('memory_type', 'memory'))})",
                      "{{node}} NUMA {{numa_node}} {{state}}"),
                unit="bytes", width=12, legend_table=True,
            ),
            timeseries(
                "Hugepages per NUMA node",
                "How many hugepages of each size are allocated and free on each NUMA node?",
                Query(f"sum by (node, numa_node, memory_type, state) "
                      f"({sel('podres_node_memory_bytes', rx('memory_type', 'hugepages-.+'))})",
                      "{{node}} NUMA {{numa_node}} {{memory_type}} {{state}}"),
                unit="bytes", width=12, legend_table=True,
            ),
            table(
                "Pinned memory by container",
                "Which container has memory or hugepages pinned, how much, on which NUMA node?",
                Query(sel("podres_container_memory_bytes", *HOLDER)),
                unit="bytes",
                columns={"node": "Node", "namespace": "Namespace", "pod": "Pod",
                         "container": "Container", "memory_type": "Type",
                         "numa_node": "NUMA node", "Value": "Pinned"},
                sort_by="Pinned", sort_desc=True,
            ),
        ),
    )  # fmt: skip
    pods = Row(
        "Pods and containers",
        (
            stat("Pods", "How many pods does the kubelet list?",
                 Query(f"sum({sel('podres_pods')})"), unit="none", width=6),
            stat("Containers", "How many containers do those pods have?",
                 Query(f"sum({sel('podres_containers')})"), unit="none", width=6),
            timeseries(
                "Pods and containers",
                "How have the node's pod and container counts changed?",
                Query(f"sum by (node) ({sel('podres_pods')})", "{{node}} pods"),
                Query(f"sum by (node) ({sel('podres_containers')})", "{{node}} containers"),
                unit="none", width=12, height=4,
            ),
        ),
    )  # fmt: skip
    return Dashboard(
        UID_NODE, "podres / Node allocation",
        "Who holds which CPUs, devices and memory on a node, and what is still free, per "
        "NUMA node.",
        (TAG,), variables(multi_cluster, NAMESPACE_VAR, POD_VAR, RESOURCE_VAR),
        (cpus, devices, memory, pods), links=dashboard_links(TAG, "podres boards"),
    )  # fmt: skip


def accelerators_board(multi_cluster: bool) -> Dashboard:
    gpu = ('uuid=~"$gpu"',)
    holder_gpu = (*HOLDER, *gpu)
    who = "{{namespace}}/{{pod}}/{{container}} {{uuid}}"
    shared = f"({sel('podres_gpu_shared', *gpu)} == 1)"
    throttled = sel("podres_gpu_clock_event_reason", *holder_gpu, rx("reason", THROTTLE_REASONS))
    overview = Row(
        "GPUs",
        (
            stat("GPUs", "How many physical GPUs are there?",
                 Query(f"count({sel('podres_gpu_info', eq('parent_uuid', ''), *gpu)})"),
                 unit="none"),
            stat("MIG instances", "How many MIG instances are the MIG-enabled GPUs split into?",
                 Query(f"count({sel('podres_gpu_info', ne('parent_uuid', ''), *gpu)}) "
                       "or vector(0)"),
                 unit="none"),
            stat("Shared GPUs", "How many GPUs do several containers hold (time-slicing)?",
                 Query(f"sum({sel('podres_gpu_shared', *gpu)})"), unit="none"),
            stat("Unhealthy GPUs", "How many GPUs or MIG instances stopped answering NVML?",
                 Query(f"count({sel('podres_gpu_healthy', *gpu)} == 0) or vector(0)"),
                 unit="none", thresholds=[(1, "red")]),
            stat("Unattributed GPU processes",
                 "How many processes run on a GPU that no container holding it owns?",
                 Query(f"sum({sel('podres_gpu_holder_processes', eq('namespace', ''), *gpu)})"),
                 unit="none", thresholds=[(1, "orange")]),
            stat("NVML available", "Does every selected node have a working NVIDIA driver?",
                 Query(f"min({sel('podres_nvml_available')})"), unit="none",
                 mappings=[value_text({0: ("no", "red"), 1: ("yes", "green")})]),
            table(
                "GPU inventory",
                "Which GPUs and MIG instances are there, of which model, on which NUMA node?",
                Query(sel("podres_gpu_info", *gpu)),
                unit="none",
                columns={"node": "Node", "gpu": "Index", "uuid": "UUID", "model": "Model",
                         "mig_mode": "MIG mode", "parent_uuid": "Parent GPU",
                         "gpu_instance": "GI", "compute_instance": "CI",
                         "numa_node": "NUMA node", "pci_bus_id": "PCI",
                         "driver_version": "Driver"},
                numeric_columns=["gpu"], sort_by="Index", height=8,
            ),
        ),
    )  # fmt: skip
    usage = Row(
        "Use by workload",
        (
            timeseries(
                "GPU utilisation",
                "How busy is each GPU, and who holds it? (A shared GPU shows once, with empty "
                "holder labels: its split is below.)",
                Query(sel("podres_gpu_utilization_ratio", *holder_gpu), who),
                unit="percentunit", max_=1,
            ),
            timeseries(
                "Memory-bandwidth utilisation",
                "How much of the time is each GPU's memory being read or written?",
                Query(sel("podres_gpu_memory_utilization_ratio", *holder_gpu), who),
                unit="percentunit", max_=1,
            ),
            timeseries(
                "Device memory used",
                "How much device memory does each GPU or MIG instance have in use?",
                Query(sel("podres_gpu_memory_used_bytes", *holder_gpu), who),
                unit="bytes",
            ),
            timeseries(
                "Device memory used by namespace",
                "How much GPU memory does each namespace use? (MIG instances count, the GPUs "
                "that hold them do not; shared GPUs count under an empty namespace.)",
                Query(f"sum by (namespace) "
                      f"({sel('podres_gpu_memory_used_bytes', *holder_gpu)} "
                      f"{no_mig_parents()})", "{{namespace}}"),
                unit="bytes", stack=True,
            ),
            timeseries(
                "Power draw",
                "How much power does each GPU draw?",
                Query(sel("podres_gpu_power_watts", *holder_gpu), who),
                unit="watt",
            ),
            timeseries(
                "Power draw against the limit",
                "How close is each GPU to its power limit?",
                Query(f"{sel('podres_gpu_power_watts', *holder_gpu)} "
                      f"/ {sel('podres_gpu_power_limit_watts', *holder_gpu)}", who),
                unit="percentunit", max_=1,
            ),
            timeseries(
                "Temperature",
                "How hot is each GPU?",
                Query(sel("podres_gpu_temperature_celsius", *holder_gpu), who),
                unit="celsius", min_=None,
            ),
            timeseries(
                "Clocks",
                "What SM and memory clocks does each GPU run at?",
                Query(sel("podres_gpu_sm_clock_hertz", *holder_gpu), f"SM {who}"),
                Query(sel("podres_gpu_memory_clock_hertz", *holder_gpu), f"memory {who}"),
                unit="hertz",
            ),
            state_timeline(
                "Throttling",
                "Is each GPU slowed by power or thermal limits, and since when? (The number of "
                "active throttle reasons; the table beside it names them.)",
                Query(f"sum by (node, uuid, namespace, pod, container) ({throttled})", who),
                unit="none", thresholds=[(1, "orange"), (2, "red")],
            ),
            table(
                "Active clock-event reasons",
                "Which clock-event reasons are active on which GPU right now (idle included)?",
                Query(f"{sel('podres_gpu_clock_event_reason', *holder_gpu)} == 1"),
                unit="none",
                columns={"node": "Node", "uuid": "GPU", "namespace": "Namespace",
                         "pod": "Pod", "container": "Container", "reason": "Reason"},
                sort_by="GPU", width=12,
            ),
            timeseries(
                "PCIe throughput",
                "How much data moves over each GPU's PCIe link?",
                Query(sel("podres_gpu_pcie_transmit_bytes_per_second", *holder_gpu),
                      f"tx {who}"),
                Query(sel("podres_gpu_pcie_receive_bytes_per_second", *holder_gpu),
                      f"rx {who}"),
                unit="Bps",
            ),
            timeseries(
                "Energy used by namespace",
                "How much energy did each namespace's GPUs use over the time range?",
                Query(f"sum by (namespace) (increase("
                      f"{sel('podres_gpu_energy_joules_total', *holder_gpu)}[$__range]))",
                      "{{namespace}}"),
                unit="joule",
            ),
        ),
    )  # fmt: skip
    errors = Row(
        "Errors",
        (
            table(
                "Memory errors",
                "Which GPUs have ECC errors or remapped rows, and is a remapping pending or "
                "failed?",
                *(
                    Query(f"sum by (node, uuid, namespace, pod, container) "
                          f"({sel(metric, *holder_gpu, *matchers)})")
                    for metric, *matchers in (
                        ("podres_gpu_ecc_errors_total", eq("type", "corrected")),
                        ("podres_gpu_ecc_errors_total", eq("type", "uncorrected")),
                        ("podres_gpu_remapped_rows_total", eq("cause", "correctable")),
                        ("podres_gpu_remapped_rows_total", eq("cause", "uncorrectable")),
                        ("podres_gpu_remapping_pending",),
                        ("podres_gpu_remapping_failed",),
                    )
                ),
                unit="none",
                columns={"node": "Node", "uuid": "GPU", "namespace": "Namespace",
                         "pod": "Pod", "container": "Container",
                         "Value #A": "ECC corrected", "Value #B": "ECC uncorrected",
                         "Value #C": "Rows remapped (correctable)",
                         "Value #D": "Rows remapped (uncorrectable)",
                         "Value #E": "Remapping pending", "Value #F": "Remapping failed"},
                sort_by="ECC uncorrected", sort_desc=True, width=12, height=8,
            ),
            timeseries(
                "ECC errors",
                "Are ECC errors occurring now, on which GPU?",
                Query(f"sum by (uuid, namespace, pod, container, type) (rate("
                      f"{sel('podres_gpu_ecc_errors_total', *holder_gpu)}[$__rate_interval]))",
                      f"{{{{type}}}} {who}"),
                unit="cps", width=12, height=8,
            ),
            table(
                "XID errors",
                "Which GPUs reported XID errors in the time range, which codes, how many?",
                Query(f"sum by (node, uuid, namespace, pod, container, xid) (increase("
                      f"{sel('podres_gpu_xid_errors_total', *holder_gpu)}[$__range])) > 0"),
                unit="none",
                columns={"node": "Node", "uuid": "GPU", "namespace": "Namespace",
                         "pod": "Pod", "container": "Container", "xid": "XID",
                         "Value": "Errors"},
                sort_by="Errors", sort_desc=True, width=24, height=6,
            ),
        ),
    )  # fmt: skip
    mig = Row(
        "MIG instances",
        (
            table(
                "MIG instances and holders",
                "Which MIG instances does each GPU have, who holds them, how much memory do "
                "they use?",
                Query(f"{sel('podres_gpu_memory_used_bytes', *holder_gpu)} * on (uuid) "
                      f"group_left (parent_uuid, gpu_instance, model) "
                      f"{sel('podres_gpu_info', ne('parent_uuid', ''))}"),
                Query(f"{sel('podres_gpu_memory_total_bytes', *holder_gpu)} * on (uuid) "
                      f"group_left (parent_uuid, gpu_instance, model) "
                      f"{sel('podres_gpu_info', ne('parent_uuid', ''))}"),
                unit="bytes",
                columns={"node": "Node", "parent_uuid": "GPU", "gpu_instance": "GI",
                         "uuid": "MIG instance", "model": "Profile",
                         "namespace": "Namespace", "pod": "Pod", "container": "Container",
                         "Value #A": "Memory used", "Value #B": "Memory"},
                numeric_columns=["gpu_instance"], sort_by="GI", width=12, height=9,
            ),
            timeseries(
                "MIG instance memory used",
                "How much memory does each MIG instance use, and who holds it?",
                Query(f"{sel('podres_gpu_memory_used_bytes', *holder_gpu, rx('uuid', 'MIG-.+'))}",
                      who),
                unit="bytes", width=12, height=9,
            ),
        ),
    )  # fmt: skip
    total_line: list[JSON] = [
        {"id": "custom.stacking", "value": {"group": "A", "mode": "none"}},
        {"id": "custom.fillOpacity", "value": 0},
        {"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
    ]
    sharing = Row(
        "Shared GPUs",
        (
            table(
                "Shared GPUs, counted once",
                "Which GPUs are shared, how busy is each (counted once), how much memory is in "
                "use, and by how many processes?",
                Query(f"{sel('podres_gpu_utilization_ratio', *gpu)} and on (uuid) {shared}"),
                Query(f"{sel('podres_gpu_memory_used_bytes', *gpu)} and on (uuid) {shared}"),
                Query(f"{sel('podres_gpu_memory_total_bytes', *gpu)} and on (uuid) {shared}"),
                Query(f"sum by (node, uuid) ({sel('podres_gpu_holder_processes', *gpu)} "
                      f"and on (uuid) {shared})"),
                unit="none",
                columns={"node": "Node", "uuid": "GPU", "Value #A": "Utilisation",
                         "Value #B": "Memory used", "Value #C": "Memory",
                         "Value #D": "Processes"},
                column_units={"Utilisation": "percentunit", "Memory used": "bytes",
                              "Memory": "bytes"},
                sort_by="GPU", width=24, height=5,
            ),
            timeseries(
                "Shared GPU utilisation and its split",
                "How busy is each shared GPU (dashed, once) and which holder uses how much of "
                "it (stacked)?",
                Query(f"{sel('podres_gpu_utilization_ratio', *gpu)} and on (uuid) {shared}",
                      "{{uuid}} (device)"),
                Query(f"{sel('podres_gpu_holder_sm_utilization_ratio', *holder_gpu)} "
                      f"and on (uuid) {shared}", who),
                unit="percentunit", stack=True,
                overrides=[series_override(r".*\(device\)", total_line)],
            ),
            timeseries(
                "Shared GPU memory and its split",
                "How much memory is in use on each shared GPU (dashed, once), and by which "
                "holder (stacked)?",
                Query(f"{sel('podres_gpu_memory_used_bytes', *gpu)} and on (uuid) {shared}",
                      "{{uuid}} (device)"),
                Query(f"{sel('podres_gpu_holder_memory_used_bytes', *holder_gpu)} "
                      f"and on (uuid) {shared}", who),
                unit="bytes", stack=True,
                overrides=[series_override(r".*\(device\)", total_line)],
            ),
        ),
    )  # fmt: skip
    processes = Row(
        "Processes",
        (
            table(
                "GPU processes by holder",
                "How many processes, using how much memory, does each container run on each "
                "GPU? (An empty holder: processes of no container holding that GPU.)",
                Query(sel("podres_gpu_holder_processes", *holder_gpu)),
                Query(sel("podres_gpu_holder_memory_used_bytes", *holder_gpu)),
                unit="none",
                columns={"node": "Node", "uuid": "GPU", "namespace": "Namespace",
                         "pod": "Pod", "container": "Container", "Value #A": "Processes",
                         "Value #B": "Memory used"},
                column_units={"Memory used": "bytes"},
                sort_by="Memory used", sort_desc=True, width=12, height=9,
            ),
            timeseries(
                "Unattributed GPU processes over time",
                "Which GPUs run processes that belong to no container holding them (another "
                "pod, or the host)?",
                Query(sel("podres_gpu_holder_processes", 'namespace=""', *gpu), "{{uuid}}"),
                unit="none", width=12, height=9,
            ),
        ),
    )  # fmt: skip
    drm = Row(
        "AMD and Intel GPUs",
        (
            timeseries(
                "amdgpu busy",
                "How busy is each AMD GPU, and who holds it?",
                Query(sel("podres_drm_busy_ratio", *HOLDER),
                      "{{namespace}}/{{pod}}/{{container}} {{card}}"),
                unit="percentunit", max_=1,
            ),
            timeseries(
                "amdgpu VRAM used",
                "How much of each AMD GPU's VRAM is in use?",
                Query(f"{sel('podres_drm_vram_used_bytes', *HOLDER)} "
                      f"/ {sel('podres_drm_vram_total_bytes', *HOLDER)}",
                      "{{namespace}}/{{pod}}/{{container}} {{card}}"),
                unit="percentunit", max_=1,
            ),
        ),
    )  # fmt: skip
    return Dashboard(
        UID_ACCELERATORS, "podres / Accelerators by workload",
        "How the GPUs and MIG instances a workload holds are doing: use, memory, power, "
        "temperature, clocks, throttling and errors, by namespace, pod and container.",
        (TAG,), variables(multi_cluster, NAMESPACE_VAR, POD_VAR, GPU_VAR),
        (overview, usage, errors, mig, sharing, processes, drm),
        links=dashboard_links(TAG, "podres boards"),
    )  # fmt: skip


def waste_board(multi_cluster: bool) -> Dashboard:
    exclusive = sel("podres_container_exclusive_cpus", *HOLDER)
    held = f"sum by (node, namespace, pod, container) ({exclusive})"
    busy = (
        f"sum by (node, namespace, pod, container) "
        f"(rate({sel('podres_cpu_busy_seconds_total', *HOLDER)}[$__rate_interval]))"
    )
    idle = Row(
        "Held but idle",
        (
            stat(
                "Devices idle over an hour",
                "How many held devices have shown no use for more than an hour?",
                Query(f"count({sel('podres_held_device_idle_seconds', *HOLDER)} > 3600) "
                      "or vector(0)"),
                unit="none", thresholds=[(1, "orange")],
            ),
            table(
                "Devices held but idle",
                "Which devices does a container hold without using them, and for how long?",
                Query(sel("podres_held_device_idle_seconds", *HOLDER)),
                unit="s",
                columns={"node": "Node", "device_id": "Device", "namespace": "Namespace",
                         "pod": "Pod", "container": "Container", "Value": "Idle for"},
                sort_by="Idle for", sort_desc=True, width=20,
            ),
            table(
                "Exclusive CPUs held against use",
                "Which containers hold exclusive CPUs they leave idle?",
                Query(held), Query(busy), Query(f"{held} - {busy}"),
                Query(f"{busy} / {held}"),
                unit="none",
                columns={"node": "Node", "namespace": "Namespace", "pod": "Pod",
                         "container": "Container", "Value #A": "Exclusive CPUs",
                         "Value #B": "Busy CPUs", "Value #C": "Idle CPUs",
                         "Value #D": "Busy share"},
                column_units={"Busy share": "percentunit"},
                sort_by="Idle CPUs", sort_desc=True, width=12, height=10,
            ),
            timeseries(
                "Idle exclusive CPUs by container",
                "How many of its exclusive CPUs has each container left idle over time?",
                Query(f"{held} - {busy}", "{{namespace}}/{{pod}}/{{container}}"),
                unit="none", width=12, height=10,
            ),
            timeseries(
                "Idle time of held devices",
                "Since when has each held device been idle?",
                Query(sel("podres_held_device_idle_seconds", *HOLDER),
                      "{{namespace}}/{{pod}}/{{container}} {{device_id}}"),
                unit="s", width=24,
            ),
        ),
    )  # fmt: skip
    placement = Row(
        "NUMA placement",
        (
            table(
                "Containers straddling NUMA nodes",
                "Which containers have CPUs, devices or pinned memory on different NUMA nodes?",
                Query(f"{sel('podres_container_numa_aligned', *HOLDER)} == 0"),
                unit="none",
                columns={"node": "Node", "namespace": "Namespace", "pod": "Pod",
                         "container": "Container"},
                sort_by="Namespace", width=12,
            ),
            timeseries(
                "Placed containers by alignment",
                "How many containers with placed resources are NUMA-aligned, and how many "
                "straddle?",
                Query(f"count by (node) ({sel('podres_container_numa_aligned', *HOLDER)} == 1)",
                      "{{node}} aligned"),
                Query(f"count by (node) ({sel('podres_container_numa_aligned', *HOLDER)} == 0)",
                      "{{node}} straddling"),
                unit="none", width=12,
            ),
        ),
    )  # fmt: skip
    shared = Row(
        "Shared CPU pool",
        (
            timeseries(
                "Shared-pool contention per NUMA node",
                "How busy are the shared-pool CPUs that every container without exclusive CPUs "
                "runs on?",
                Query(sel("podres_shared_pool_busy_ratio"), "{{node}} NUMA {{numa_node}}"),
                unit="percentunit", max_=1,
            ),
            timeseries(
                "Shared-pool size per NUMA node",
                "How many CPUs are left in each NUMA node's shared pool?",
                Query(sel("podres_node_cpus", 'pool="shared_free"'),
                      "{{node}} NUMA {{numa_node}}"),
                unit="none",
            ),
        ),
    )  # fmt: skip
    unallocated = sel("podres_node_devices", 'resource=~"$resource"', 'state="free"')
    free = Row(
        "Free capacity",
        (
            table(
                "Free capacity by resource",
                "What could still be scheduled: free devices in all, the most on one node, "
                "and the most on one NUMA node (for a pod that must be NUMA-aligned)?",
                Query(f"sum by (resource) ({unallocated})"),
                Query(f"max by (resource) (sum by (node, resource) ({unallocated}))"),
                Query(f"max by (resource) ({unallocated})"),
                unit="none",
                columns={"resource": "Resource", "Value #A": "Free",
                         "Value #B": "Most on one node", "Value #C": "Most on one NUMA node"},
                sort_by="Free", sort_desc=True, width=12, height=8,
            ),
            timeseries(
                "Free shared-pool CPUs",
                "How many shared-pool CPUs are free across the selected nodes, and how many at "
                "most on one NUMA node?",
                Query(f"sum({sel('podres_node_cpus', eq('pool', 'shared_free'))})",
                      "shared-pool CPUs"),
                Query(f"max({sel('podres_node_cpus', eq('pool', 'shared_free'))})",
                      "most shared-pool CPUs on one NUMA node"),
                unit="none", width=6, height=8,
            ),
            timeseries(
                "Free pinnable memory",
                "How much memory and hugepages of each size are free across the selected "
                "nodes?",
                Query(f"sum by (memory_type) "
                      f"({sel('podres_node_memory_bytes', eq('state', 'free'))})",
                      "{{memory_type}}"),
                unit="bytes", width=6, height=8,
            ),
        ),
    )  # fmt: skip
    return Dashboard(
        UID_WASTE, "podres / Waste and placement",
        "Hardware held but idle, containers straddling NUMA nodes, shared-pool contention, "
        "and what could still be scheduled.",
        (TAG,), variables(multi_cluster, NAMESPACE_VAR, POD_VAR, RESOURCE_VAR),
        (idle, placement, shared, free), links=dashboard_links(TAG, "podres boards"),
    )  # fmt: skip


def health_board(multi_cluster: bool) -> Dashboard:
    job = 'job=~"$job"'
    requests = sel("podres_kubelet_requests_total")
    kubelet = Row(
        "Kubelet connection",
        (
            state_timeline(
                "Kubelet up",
                "Could the exporter read the kubelet's pod-resources API?",
                Query(sel("podres_kubelet_up"), "{{node}}"),
                unit="none", mappings=[UP_DOWN],
                width=12, height=6,
            ),
            timeseries(
                "Data age",
                "How old is the kubelet data being served?",
                Query(sel("podres_snapshot_age_seconds"), "{{node}}"),
                unit="s", width=12, height=6,
            ),
            timeseries(
                "Kubelet requests",
                "How often does the exporter call the kubelet, by method and result?",
                Query(f"sum by (node, method, code) (rate({requests}[$__rate_interval]))",
                      "{{node}} {{method}} {{code}}"),
                unit="reqps", width=8,
            ),
            timeseries(
                "Kubelet errors and rate-limit hits",
                "Which kubelet calls fail, and with what code (RESOURCE_EXHAUSTED: the "
                "kubelet's rate limit)?",
                Query(f"sum by (node, method, code) (rate("
                      f"{sel('podres_kubelet_requests_total', ne('code', 'OK'))}"
                      f"[$__rate_interval]))", "{{node}} {{method}} {{code}}"),
                unit="reqps", width=8,
            ),
            timeseries(
                "Kubelet request duration (p99)",
                "How long do the slowest kubelet calls take?",
                Query("histogram_quantile(0.99, sum by (node, method, le) (rate("
                      f"{sel('podres_kubelet_request_duration_seconds_bucket')}"
                      "[$__rate_interval])))", "{{node}} {{method}}"),
                unit="s", width=8,
            ),
            heatmap(
                "Kubelet request duration",
                "How are kubelet call durations distributed over time?",
                Query("sum by (le) (rate("
                      f"{sel('podres_kubelet_request_duration_seconds_bucket')}"
                      "[$__rate_interval]))"),
                unit="reqps", y_unit="s", width=12,
            ),
            table(
                "Kubelet API",
                "Which pod-resources API version does each kubelet serve, and "
                "GetAllocatableResources?",
                Query(sel("podres_kubelet_api_info")),
                unit="none",
                columns={"node": "Node", "api_version": "API", "get_allocatable": "Allocatable"},
                sort_by="Node", width=12,
            ),
        ),
    )  # fmt: skip
    stale = value_text({0: ("fresh", "green"), 1: ("stale", "red")})
    ok = value_text({0: ("failed", "red"), 1: ("ok", "green")})
    collectors = Row(
        "Collectors and sources",
        (
            state_timeline(
                "Collector success",
                "Did every collector succeed in each rendering?",
                Query(sel("podres_collector_success"), "{{node}} {{collector}}"),
                unit="none", mappings=[ok], width=12, height=10,
            ),
            timeseries(
                "Collector duration",
                "How long does each collector take?",
                Query(sel("podres_collector_duration_seconds"), "{{node}} {{collector}}"),
                unit="s", width=12, height=10,
            ),
            state_timeline(
                "Source staleness",
                "Is each telemetry source's data from its latest read, or older?",
                Query(sel("podres_source_stale"), "{{node}} {{source}}"),
                unit="none", mappings=[stale], width=8,
            ),
            timeseries(
                "Source read duration",
                "How long does each telemetry source take to read?",
                Query(sel("podres_source_duration_seconds"), "{{node}} {{source}}"),
                unit="s", width=8,
            ),
            timeseries(
                "Time since source success",
                "How long ago did each source last read successfully?",
                Query(f"time() - {sel('podres_source_last_success_timestamp_seconds')}",
                      "{{node}} {{source}}"),
                unit="s", width=8,
            ),
        ),
    )  # fmt: skip
    scrapes = Row(
        "Scrapes",
        (
            state_timeline(
                "Targets up",
                "Can Prometheus scrape the exporter and the device plugin on each node?",
                Query(sel("up", job), "{{node}} {{job}} {{instance}}"),
                unit="none", mappings=[UP_DOWN], width=8,
            ),
            timeseries(
                "Scrape duration",
                "How long does a scrape of each agent take?",
                Query(sel("scrape_duration_seconds", job), "{{node}} {{job}} {{instance}}"),
                unit="s", width=8,
            ),
            timeseries(
                "Exporter memory",
                "How much memory does the exporter's process use? (The device plugin serves no "
                "process metrics.)",
                Query(sel("process_resident_memory_bytes", job), "{{node}} {{job}} {{instance}}"),
                unit="bytes", width=8,
            ),
        ),
    )  # fmt: skip
    plugin = Row(
        "Device plugin",
        (
            state_timeline(
                "Plugin registered",
                "Does the kubelet hold the plugin's current registration for each resource?",
                Query(sel("podres_plugin_registered"), "{{node}} {{resource}}"),
                unit="none", mappings=[value_text({0: ("no", "red"), 1: ("yes", "green")})],
                width=8,
            ),
            timeseries(
                "Registrations",
                "How often does the plugin register with the kubelet, and does it succeed?",
                Query(f"sum by (node, resource, result) (increase("
                      f"{sel('podres_plugin_registrations_total')}[$__rate_interval]))",
                      "{{node}} {{resource}} {{result}}"),
                unit="none", width=8,
            ),
            timeseries(
                "Advertised devices by health",
                "How many devices does the plugin advertise, healthy and unhealthy? (A step is "
                "a health change.)",
                Query(sel("podres_plugin_devices"), "{{node}} {{resource}} {{health}}"),
                unit="none", width=8,
            ),
            stat(
                "Device health changes",
                "How many times did the number of healthy devices change in the time range?",
                Query(f"sum(changes({sel('podres_plugin_devices', eq('health', 'Healthy'))}"
                      "[$__range]))"),
                unit="none", width=4, thresholds=[(1, "orange")],
            ),
            stat(
                "Kubelet restarts seen",
                "How many kubelet restarts did the plugin see in the time range?",
                Query(f"sum(increase({sel('podres_plugin_kubelet_restarts_total')}"
                      "[$__range]))"),
                unit="none", width=4,
            ),
            timeseries(
                "Allocate answers",
                "How many Allocate calls does the plugin answer, with what result?",
                Query(f"sum by (node, resource, result) (rate("
                      f"{sel('podres_plugin_allocations_total')}[$__rate_interval]))",
                      "{{node}} {{resource}} {{result}}"),
                unit="reqps", width=8,
            ),
            timeseries(
                "ListAndWatch streams",
                "Does the kubelet keep one ListAndWatch stream open per resource?",
                Query(sel("podres_plugin_list_and_watch_streams"), "{{node}} {{resource}}"),
                unit="none", width=8,
            ),
        ),
    )  # fmt: skip
    anomalies = Row(
        "Data anomalies",
        (
            timeseries(
                "Anomalies in the kubelet's data",
                "Which odd items did the latest kubelet reading contain (kept and served)?",
                Query(f"sum by (node, kind) ({sel('podres_data_anomalies')})",
                      "{{node}} {{kind}}"),
                unit="none", width=8,
            ),
            timeseries(
                "Suspect empty readings",
                "How often did the kubelet answer with no pods or no CPUs at once (held back)?",
                Query(f"sum by (node) (increase("
                      f"{sel('podres_kubelet_suspect_empty_readings_total')}"
                      "[$__rate_interval]))", "{{node}}"),
                unit="none", width=8,
            ),
            timeseries(
                "Device ids without telemetry",
                "How many device ids of each resource matched no telemetry device?",
                Query(sel("podres_device_ids_unmatched"), "{{node}} {{resource}}"),
                unit="none", width=8,
            ),
            table(
                "Versions",
                "Which exporter and plugin version runs on each node?",
                Query(sel("podres_build_info")),
                Query(sel("podres_plugin_build_info")),
                unit="none",
                columns={"node": "Node", "job": "Job", "version": "Version"},
                sort_by="Node",
            ),
        ),
    )  # fmt: skip
    return Dashboard(
        UID_HEALTH, "podres / Exporter and plugin health",
        "Is the exporter reading the kubelet and its telemetry sources, are the scrapes "
        "healthy, and is the device plugin registered?",
        (TAG,), variables(multi_cluster, JOB_VAR),
        (kubelet, collectors, scrapes, plugin, anomalies),
        links=dashboard_links(TAG, "podres boards"),
    )  # fmt: skip


# ---- the questions users ask first -------------------------------------------------------

# One row per GPU (or MIG instance): every query of the GPU table has these labels.
GPU_ROW = "node, gpu, uuid, model, namespace, pod, container"
WINDOW_VAR = custom_variable(
    "window", "Window", ("1h", "6h", "24h", "7d"), "6h",
    description="The window the averages and rates of the idle panels are taken over.",
)  # fmt: skip
THRESHOLD_VAR = custom_variable(
    "threshold", "Utilisation below", ("0.05", "0.1", "0.25", "0.5"), "0.1",
    description="A GPU whose average utilisation over the window is below this is listed.",
)  # fmt: skip
IDLE_RATE_VAR = custom_variable(
    "idle_rate", "Traffic below (B/s)", ("1", "100", "1000", "10000"), "100",
    description="A held interface that moved fewer bytes a second (received and sent) over "
    "the window is listed: 1 for none at all, more to allow for ARP, LLDP and keep-alives.",
)  # fmt: skip


def with_model(expr: str) -> str:
    """``expr`` (a device-level GPU series) with the GPU's index and model, one series per
    GPU row (:data:`GPU_ROW`)."""
    return (
        f"max by ({GPU_ROW}) ({expr} * on (uuid) group_left (gpu, model) {sel('podres_gpu_info')})"
    )


def gpus_board(multi_cluster: bool) -> Dashboard:
    total = with_model(sel("podres_gpu_memory_total_bytes", *HOLDER))
    holders = f"count by (uuid) ({sel('podres_container_device_info')})"
    table_row = Row(
        "GPUs and their holders",
        (
            table(
                "GPUs",
                "Which GPUs and MIG instances are there, of which model, who holds each, how "
                "busy is it and how much of its memory is in use? One row per GPU; a GPU that "
                "several containers share shows empty holder labels and its number of holders.",
                Query(with_model(sel("podres_gpu_utilization_ratio", *HOLDER))),
                Query(with_model(sel("podres_gpu_memory_used_bytes", *HOLDER))),
                Query(total),
                Query(f"{total} * 0 + on (uuid) group_left () {holders} or {total} * 0"),
                unit="none",
                columns={"node": "Node", "gpu": "GPU", "model": "Model", "uuid": "UUID",
                         "namespace": "Namespace", "pod": "Pod", "container": "Container",
                         "Value #D": "Holders", "Value #A": "Utilisation",
                         "Value #B": "Memory used", "Value #C": "Memory"},
                column_units={"Utilisation": "percentunit", "Memory used": "bytes",
                              "Memory": "bytes"},
                numeric_columns=["gpu"], sort_by="GPU", height=10,
            ),
        ),
    )  # fmt: skip
    average = f"avg_over_time({sel('podres_gpu_utilization_ratio', *HOLDER)}[$window])"
    low = f"{with_model(average)} < $threshold"
    traffic = " + ".join(
        f"rate({sel(f'podres_net_{way}_bytes_total', *HOLDER, ne('namespace', ''))}[$window])"
        for way in ("receive", "transmit")
    )
    idle_vfs = f"max by (node, address, interface, namespace, pod, container) ({traffic})"
    idle = Row(
        "Held but idle",
        (
            stat(
                "GPUs under the threshold",
                "How many GPUs averaged less utilisation than the threshold over the window?",
                Query(f"count({low}) or vector(0)"),
                unit="none", thresholds=[(1, "orange")],
            ),
            table(
                "GPUs with low utilisation",
                "Which GPUs averaged less than the threshold over the window, and who holds "
                "them? (Not only idle ones: a GPU at 3% is as good as lost.)",
                Query(low),
                unit="percentunit",
                columns={"node": "Node", "gpu": "GPU", "model": "Model", "uuid": "UUID",
                         "namespace": "Namespace", "pod": "Pod", "container": "Container",
                         "Value": "Average utilisation"},
                numeric_columns=["gpu"], sort_by="Average utilisation", width=20,
            ),
            table(
                "Held interfaces without traffic",
                "Which network interfaces (SR-IOV VFs in the main) does a container hold that "
                "moved less than the chosen bytes a second over the window?",
                Query(f"{idle_vfs} < $idle_rate"),
                unit="Bps",
                columns={"node": "Node", "address": "PCI address", "interface": "Interface",
                         "namespace": "Namespace", "pod": "Pod", "container": "Container",
                         "Value": "Traffic"},
                sort_by="Traffic", height=8,
            ),
        ),
    )  # fmt: skip
    # The recording rule node_resource:podres_free_devices:max (docs/rules.md): each node's
    # largest free block on one NUMA node, per resource.
    largest = sel("node_resource:podres_free_devices:max", 'resource=~"$resource"')

    def fit(devices: int) -> Query:
        return Query(
            f"count by (resource) ({largest} >= {devices}) or 0 * count by (resource) ({largest})"
        )

    blocks = Row(
        "Free blocks on one NUMA node",
        (
            table(
                "Largest free block per node",
                "How many free devices of each resource does each node have on its best NUMA "
                "node (what one NUMA-aligned pod could get there)?",
                Query(largest),
                unit="none",
                columns={"node": "Node", "resource": "Resource", "Value": "Largest free block"},
                column_links={"Node": NODE_LINKS},
                sort_by="Largest free block", sort_desc=True, width=12, height=10,
            ),
            table(
                "Nodes that fit a job on one NUMA node",
                "What is the fleet's largest free block on one NUMA node, and on how many "
                "nodes does a 1-, 2-, 4- or 8-device job fit on one NUMA node?",
                Query(f"max by (resource) ({largest})"),
                fit(1), fit(2), fit(4), fit(8),
                unit="none",
                columns={"resource": "Resource", "Value #A": "Largest free block",
                         "Value #B": "Nodes fitting 1", "Value #C": "Nodes fitting 2",
                         "Value #D": "Nodes fitting 4", "Value #E": "Nodes fitting 8"},
                sort_by="Largest free block", sort_desc=True, width=12, height=10,
            ),
        ),
    )  # fmt: skip
    return Dashboard(
        UID_GPUS, "podres / GPUs, idle hardware and free blocks",
        "One row per GPU with its holder, use and memory; GPUs and interfaces held but "
        "(nearly) idle; and the largest free block on one NUMA node across the fleet.",
        (TAG,),
        variables(multi_cluster, NAMESPACE_VAR, POD_VAR, RESOURCE_VAR, WINDOW_VAR,
                  THRESHOLD_VAR, IDLE_RATE_VAR),
        (table_row, idle, blocks), links=dashboard_links(TAG, "podres boards"),
    )  # fmt: skip


# ---- the scrape's labels -------------------------------------------------------------------

DOCS_URL = "https://github.com/podres-exporter/podres-exporter/blob/main/docs"


def labels_banner(config: MixinConfig) -> Row:
    """A row that stays green while the scrape gives the series what the boards need, and
    says what to add when it does not: 1, series without the node label (a plain static
    target, a pod job without the relabelling); 2, our holder labels renamed to
    ``exported_namespace``/``exported_pod`` (``honor_labels`` false); 3, both."""
    node = config.node_label
    no_node = f"count(podres_build_info{{{eq('node', '')}, {CLUSTER}}}) > bool 0 or vector(0)"
    renamed = f"count({containers(ne('exported_namespace', ''))}) > bool 0 or vector(0)"
    lacks = (
        f"series lack the {node} label: add a target label {node} with the node's name "
        "(relabel __meta_kubernetes_pod_node_name, or set it on the static target)"
    )
    honor = (
        "the scrape renamed our namespace/pod labels to exported_*: set honor_labels: true "
        "on the scrape job"
    )
    return Row(
        "Scrape labels",
        (
            stat(
                "Scrape labels",
                f"Do the series carry the {node} label and our own namespace and pod labels? "
                "Green when they do; otherwise it says what to change in the scrape "
                "(docs/deploy.md, docs/dashboards.md).",
                Query(f"({no_node}) + 2 * ({renamed})"),
                unit="none", width=24, height=3, text_mode="value",
                mappings=[value_text({0: ("scrape labels ok", "green"), 1: (lacks, "red"),
                                      2: (honor, "red"), 3: (f"{lacks}; {honor}", "red")})],
                links=(Link("Scrape set-ups (docs/deploy.md)",
                            f"{DOCS_URL}/deploy.md#prometheus-operator"),
                       Link("What the banner checks (docs/dashboards.md)",
                            f"{DOCS_URL}/dashboards.md#the-scrape-labels-banner")),
            ),
        ),
    )  # fmt: skip


# ---- the settings ------------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_JOB_MATCHER = re.compile(r'\s*job\s*=(~?)\s*"((?:[^"\\]|\\.)*)"\s*')


def rename_labels(expr: str, names: dict[str, str]) -> str:
    """``expr`` with each label name in ``names`` replaced: every bare identifier outside
    string literals that is such a name (a matcher's or a grouping's label, the label of
    ``label_values``), never ``$node`` nor a metric name that contains one."""
    if not names:
        return expr
    label = re.compile(r"(?<![\w$.:])(" + "|".join(map(re.escape, names)) + r")(?!\w)")
    out: list[str] = []
    pos = 0
    for string in _STRING.finditer(expr):
        out.append(label.sub(lambda m: names[m.group(1)], expr[pos : string.start()]))
        out.append(string.group())
        pos = string.end()
    out.append(label.sub(lambda m: names[m.group(1)], expr[pos:]))
    return "".join(out)


def job_regex(config: MixinConfig) -> str:
    """The regex of the job constant: the union of the two selectors' ``job`` values."""
    parts = []
    for key in ("exporter_selector", "plugin_selector"):
        found = _JOB_MATCHER.fullmatch(getattr(config, key))
        if not found:
            raise ConfigFileError(
                f'key {key!r}: the boards need one job matcher, job="..." or job=~"..."'
            )
        value = found.group(2)
        parts.append(value if found.group(1) else re.escape(value))
    return "|".join(dict.fromkeys("|".join(parts).split("|")))


def configured(board: JSON, config: MixinConfig) -> JSON:
    """``board`` (written with the default label names) for ``config``: the cluster and node
    labels renamed in every query, legend and table column, the job constant its selectors'."""
    names = {
        old: new
        for old, new in (("node", config.node_label), ("cluster", config.cluster_label))
        if old != new
    }
    legend = {f"{{{{{old}}}}}": f"{{{{{new}}}}}" for old, new in names.items()}
    for panel in (p for row in board["panels"] for p in (row, *row.get("panels", []))):
        for target in panel.get("targets", []):
            target["expr"] = rename_labels(target["expr"], names)
            for old, new in legend.items():
                target["legendFormat"] = target["legendFormat"].replace(old, new)
        for step in panel.get("transformations", []):
            options = step["options"]
            if step["id"] == "filterFieldsByName":
                include = options["include"]["names"]
                options["include"]["names"] = [names.get(n, n) for n in include]
            elif step["id"] == "organize":
                for key in ("indexByName", "renameByName"):
                    options[key] = {names.get(k, k): v for k, v in options[key].items()}
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            query["query"] = rename_labels(query["query"], names)
        elif variable["type"] == "constant" and variable["name"] == "job":
            variable["query"] = job_regex(config)
    return board


def boards(multi_cluster: bool = False, config: MixinConfig | None = None) -> dict[str, JSON]:
    """Every board's JSON by file name, for ``config`` (the defaults when None)."""
    config = config or MixinConfig()
    out: dict[str, JSON] = {}
    builds = (fleet_board, node_board, accelerators_board, waste_board, health_board, gpus_board)
    for build in builds:
        board = build(multi_cluster)
        board = dataclasses.replace(board, rows=(labels_banner(config), *board.rows))
        out[f"{board.uid}.json"] = configured(board.to_json(), config)
    return out


def render(board: JSON) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def rendered(multi_cluster: bool = False, config: MixinConfig | None = None) -> dict[str, str]:
    """Every board's file content by file name."""
    return {name: render(board) for name, board in boards(multi_cluster, config).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if files differ")
    parser.add_argument("--multi-cluster", action="store_true", help="show the cluster picker")
    parser.add_argument(
        "--config", type=Path, help="a JSON file of settings (tools/mixin_config.py)"
    )
    parser.add_argument("--out", type=Path, default=OUT, help="output directory")
    args = parser.parse_args(argv)
    try:
        config = load(args.config)
        files = rendered(args.multi_cluster, config)
    except ConfigFileError as err:
        where = "" if str(err).startswith(str(args.config)) else f"{args.config}: "
        print(f"dashboards: {where}{err}", file=sys.stderr)
        return 2
    present = {p.name: p.read_text() for p in sorted(args.out.glob("*.json"))}
    if args.check:
        stale = sorted(n for n in files.keys() | present.keys() if files.get(n) != present.get(n))
        for name in stale:
            print(f"{args.out / name}: out of date (run make dashboards)", file=sys.stderr)
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in present.keys() - files.keys():
        (args.out / name).unlink()
    for name, text in files.items():
        if present.get(name) != text:
            (args.out / name).write_text(text)
    print(f"{len(files)} dashboards in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
