"""Scenario validation: what the schema's dataclasses check when they are built.

The records (``scenario.records``) call these from their ``__post_init__``. This module
imports no record: it reads the fields that the shapes below name (the records have them)
and the vocabulary (``scenario.kinds``), so the data imports its checks and never the
other way round.

``check_node`` and ``check_scenario`` raise ScenarioError naming the source and the
key (``node.reserved_cpus``, ``pods[2].containers[0].kind``); ``check_kubelet`` and
``check_device_plugins`` raise ValueError starting with the key, which the TOML
loader turns into a ScenarioError.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, get_args

from podres_exporter.core.errors import ScenarioError
from podres_exporter.core.kube import NameProblem, extended_resource_problem, is_hugepages_name
from podres_sim.scenario.kinds import (
    MEMORY_TYPE,
    ApiMode,
    ContainerKind,
    CpuPolicy,
    DeviceGrouping,
    MemoryPolicy,
    Naming,
    QoS,
    RpcMode,
)

# The fields each check reads, as the records have them (read-only: a frozen dataclass's
# field satisfies a property).


class _Device(Protocol):
    @property
    def resource(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def numa(self) -> tuple[int, ...] | None: ...


class NodeShape(Protocol):
    """What :func:`check_node` reads of a ``NodeSpec``."""

    @property
    def name(self) -> str: ...
    @property
    def numa_cpus(self) -> Sequence[Sequence[int]]: ...
    @property
    def numa_nodes(self) -> int: ...
    @property
    def reserved_cpus(self) -> Sequence[int]: ...
    @property
    def offline_cpus(self) -> Sequence[int]: ...
    @property
    def cpu_policy(self) -> str: ...
    @property
    def memory_policy(self) -> str: ...
    @property
    def threads_per_core(self) -> int: ...
    @property
    def memory(self) -> Mapping[str, Sequence[int]]: ...
    @property
    def devices(self) -> Sequence[_Device]: ...
    @property
    def resources(self) -> Sequence[str]: ...


class _Container(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def cpu_m(self) -> int: ...
    @property
    def memory(self) -> int: ...
    @property
    def hugepages(self) -> Mapping[str, int]: ...
    @property
    def devices(self) -> Mapping[str, int]: ...
    @property
    def listed(self) -> bool: ...


class _Pod(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def replicas(self) -> int: ...
    @property
    def naming(self) -> str: ...
    @property
    def qos(self) -> str | None: ...
    @property
    def cpu_m(self) -> int: ...
    @property
    def memory(self) -> int: ...
    @property
    def containers(self) -> Sequence[_Container]: ...


class ScenarioShape(Protocol):
    """What :func:`check_scenario` reads of a ``Scenario``."""

    @property
    def node(self) -> NodeShape: ...
    @property
    def pods(self) -> Sequence[_Pod]: ...
    @property
    def churn_interval_s(self) -> float: ...
    @property
    def plugin_resources(self) -> Sequence[str]: ...


class PluginsShape(Protocol):
    """What :func:`check_device_plugins` reads of a ``DevicePluginsSpec``."""

    @property
    def resources(self) -> Sequence[str]: ...
    @property
    def directory(self) -> str: ...
    @property
    def resource_grace_s(self) -> float: ...
    @property
    def retry_pending(self) -> bool: ...


__all__ = ["check_device_plugins", "check_kubelet", "check_node", "check_scenario"]

# Why a [device_plugins] resource is not an extended resource name.
_INVALID_DOMAIN = "has an invalid domain (expected a lowercase DNS subdomain)"
_INVALID_NAME = "has an invalid name part (alphanumerics, '-', '_' or '.', at most 63)"
_NAME_PROBLEMS = {
    NameProblem.NO_DOMAIN: "has no domain (expected domain/name)",
    NameProblem.KUBERNETES_IO: "is in the kubernetes.io namespace",
    NameProblem.REQUESTS_PREFIX: "starts with requests.",
    NameProblem.SLASHES: "has more than one /",
    NameProblem.EMPTY_DOMAIN: _INVALID_DOMAIN,
    NameProblem.INVALID_DOMAIN: _INVALID_DOMAIN,
    NameProblem.EMPTY_NAME: _INVALID_NAME,
    NameProblem.INVALID_NAME: _INVALID_NAME,
}


def _check_threads(node: NodeShape, source: str, key: str) -> None:
    """SMT threads per core: at least 1, and each NUMA node's CPUs whole cores of them."""
    threads = node.threads_per_core
    if threads < 1 or any(len(cpus) % threads for cpus in node.numa_cpus):
        raise ScenarioError(
            source,
            f"{key}.threads_per_core",
            f"expected a count (at least 1) that divides each NUMA node's CPUs, got {threads}",
        )


def check_node(node: NodeShape, source: str, key: str) -> None:
    """Check a node; ScenarioError names ``source`` and the key under ``key``."""
    if not node.numa_cpus:
        raise ScenarioError(source, f"{key}.numa_nodes", "a node needs at least one NUMA node")
    seen: dict[int, int] = {}
    for n, cpus in enumerate(node.numa_cpus):
        if not cpus:
            raise ScenarioError(source, f"{key}.numa_cpus[{n}]", "NUMA node has no CPUs")
        for c in cpus:
            if c in seen:
                raise ScenarioError(
                    source, f"{key}.numa_cpus[{n}]", f"CPU {c} is also on NUMA node {seen[c]}"
                )
            seen[c] = n
    for name in ("reserved_cpus", "offline_cpus"):
        unknown = sorted(set(getattr(node, name)) - set(seen))
        if unknown:
            raise ScenarioError(source, f"{key}.{name}", f"CPUs not on the node: {unknown}")
    if node.cpu_policy not in get_args(CpuPolicy):
        raise ScenarioError(
            source, f"{key}.cpu_policy", f"expected static|none, got {node.cpu_policy!r}"
        )
    if node.memory_policy not in get_args(MemoryPolicy):
        raise ScenarioError(
            source, f"{key}.memory_policy", f"expected static|none, got {node.memory_policy!r}"
        )
    _check_threads(node, source, key)
    for mtype, sizes in node.memory.items():
        if mtype != MEMORY_TYPE and not is_hugepages_name(mtype):
            raise ScenarioError(
                source, f"{key}.memory.{mtype}", "memory types are memory or hugepages-<size>"
            )
        if len(sizes) != node.numa_nodes:
            raise ScenarioError(
                source,
                f"{key}.memory.{mtype}",
                f"expected one size per NUMA node ({node.numa_nodes}), got {len(sizes)}",
            )
    ids: set[tuple[str, str]] = set()
    for i, dev in enumerate(node.devices):
        where = f"{key}.devices[{i}]"
        if not dev.resource or "/" not in dev.resource:
            raise ScenarioError(
                source, f"{where}.resource", f"expected domain/name, got {dev.resource!r}"
            )
        if not dev.id:
            raise ScenarioError(source, f"{where}.id", "empty device id")
        if (dev.resource, dev.id) in ids:
            raise ScenarioError(
                source, f"{where}.id", f"duplicate device {dev.id!r} of {dev.resource}"
            )
        ids.add((dev.resource, dev.id))
        if dev.numa is not None:
            if not dev.numa or list(dev.numa) != sorted(set(dev.numa)):
                raise ScenarioError(source, f"{where}.numa", "expected sorted, unique NUMA ids")
            bad = [n for n in dev.numa if not 0 <= n < node.numa_nodes]
            if bad:
                raise ScenarioError(source, f"{where}.numa", f"no such NUMA node: {bad}")


def check_scenario(scenario: ScenarioShape, source: str) -> None:
    """Check what the node alone does not: churn, plugin resources and the pods."""
    node = scenario.node
    if scenario.churn_interval_s < 0:
        raise ScenarioError(source, "churn.interval_s", "must not be negative")
    both = sorted(set(scenario.plugin_resources) & set(node.resources))
    if both:
        raise ScenarioError(
            source, "device_plugins.resources", f"also in node.devices: {', '.join(both)}"
        )
    exact: set[tuple[str, str]] = set()
    for i, pod in enumerate(scenario.pods):
        where = f"pods[{i}]"
        if not pod.namespace:
            raise ScenarioError(source, f"{where}.namespace", "empty namespace")
        if not pod.name:
            raise ScenarioError(source, f"{where}.name", "empty name")
        if pod.replicas < 1:
            raise ScenarioError(source, f"{where}.replicas", "must be at least 1")
        if pod.naming not in get_args(Naming):
            raise ScenarioError(source, f"{where}.naming", f"unknown naming {pod.naming!r}")
        if pod.naming in ("exact", "static") and pod.replicas != 1:
            raise ScenarioError(
                source, f"{where}.replicas", f"naming {pod.naming!r} allows one replica only"
            )
        if pod.qos is not None and pod.qos not in get_args(QoS):
            raise ScenarioError(source, f"{where}.qos", f"unknown QoS class {pod.qos!r}")
        if pod.cpu_m < 0 or pod.memory < 0:
            raise ScenarioError(source, where, "negative pod-level request")
        if pod.cpu_m and sum(c.cpu_m for c in pod.containers if c.listed) > pod.cpu_m:
            raise ScenarioError(
                source, f"{where}.cpu", "the containers ask for more CPU than the pod-level cpu"
            )
        if pod.naming in ("exact", "static"):
            name = pod.name if pod.naming == "exact" else f"{pod.name}-{node.name}"
            if (pod.namespace, name) in exact:
                raise ScenarioError(
                    source, f"{where}.name", f"duplicate pod {pod.namespace}/{name}"
                )
            exact.add((pod.namespace, name))
        names: set[str] = set()
        for j, c in enumerate(pod.containers):
            cw = f"{where}.containers[{j}]"
            if not c.name:
                raise ScenarioError(source, f"{cw}.name", "empty container name")
            if c.name in names:
                raise ScenarioError(source, f"{cw}.name", f"duplicate container {c.name!r}")
            names.add(c.name)
            if c.kind not in get_args(ContainerKind):
                raise ScenarioError(source, f"{cw}.kind", f"unknown kind {c.kind!r}")
            if c.cpu_m < 0 or c.memory < 0:
                raise ScenarioError(source, cw, "negative request")
            for mtype in c.hugepages:
                if not is_hugepages_name(mtype):
                    raise ScenarioError(source, f"{cw}.{mtype}", "expected hugepages-<size>")
            for res, count in c.devices.items():
                if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                    raise ScenarioError(source, f"{cw}.devices.{res}", "expected a device count")
                if "/" not in res:
                    raise ScenarioError(source, f"{cw}.devices.{res}", "expected domain/name")


def check_kubelet(kubelet: object) -> None:
    """Check the kubelet's behaviour knobs; ValueError ``kubelet.<knob>: <problem>``."""
    for name, allowed in (
        ("api", ApiMode),
        ("get_allocatable", RpcMode),
        ("get", RpcMode),
        ("device_grouping", DeviceGrouping),
    ):
        value = getattr(kubelet, name)
        if value not in get_args(allowed):
            choices = "|".join(get_args(allowed))
            raise ValueError(f"kubelet.{name}: expected {choices}, got {value!r}")
    for name in (
        "rate_limit",
        "list_rejected",
        "list_active_only",
        "pod_level_resources",
        "dra_share_ids",
        "pods_api",
    ):
        if not isinstance(getattr(kubelet, name), bool):
            raise ValueError(f"kubelet.{name}: expected true or false")


def check_device_plugins(spec: PluginsShape) -> None:
    """Check ``[device_plugins]``; ValueError ``device_plugins.<key>: <problem>``."""
    seen: set[str] = set()
    for r in spec.resources:
        if not isinstance(r, str):
            raise ValueError(f"device_plugins.resources: expected strings, got {r!r}")
        problem = extended_resource_problem(r)
        if problem is not None:
            raise ValueError(
                f"device_plugins.resources: {r!r} is not an extended resource name: "
                f"{_NAME_PROBLEMS[problem]}"
            )
        if r in seen:
            raise ValueError(f"device_plugins.resources: {r!r} is listed twice")
        seen.add(r)
    if not isinstance(spec.directory, str) or not spec.directory:
        raise ValueError("device_plugins.directory: expected a non-empty path")
    grace = spec.resource_grace_s
    if isinstance(grace, bool) or not isinstance(grace, int | float) or grace < 0:
        raise ValueError(f"device_plugins.resource_grace_s: expected seconds >= 0, got {grace!r}")
    if not isinstance(spec.retry_pending, bool):
        raise ValueError("device_plugins.retry_pending: expected true or false")
