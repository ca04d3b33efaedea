"""Scenarios from TOML: a file (``read_scenario``), text (``parse_scenario``) or data
already parsed (``scenario_from_dict``). The built-ins and the references that name a
scenario are ``scenario.builtin``'s.

The TOML schema (every key but ``node`` optional; unknown keys are errors)::

    name = "demo"                      # defaults to the file's stem
    description = "..."
    seed = 42                          # RNG seed: names, churn, List order

    [kubelet]                          # behaviour knobs, see KubeletBehaviour
    api = "v1"                         # "v1" (serves v1 + v1alpha1) | "v1alpha1"
    get_allocatable = "served"         # | "disabled" | "unimplemented"
    get = "disabled"                   # | "served" | "unimplemented"
    rate_limit = true                  # 100 qps, burst 10, shared by all methods
    device_grouping = "per_device"     # | "per_resource" (kubelet ~1.20)
    list_rejected = true               # List shows pods rejected at admission
    list_active_only = true            # 1.34+: finished pods not listed (false: before 1.34)
    pod_level_resources = false        # PodLevelResourceManagers (1.36+): pod-level cpu_ids, memory
    dra_share_ids = true               # 1.35+: ClaimResource.share_id sent
    pods_api = false                   # PodsAPI (1.36 opt-in, 1.37 on): the Pods API socket

    [churn]
    interval_s = 5.0                   # 0: no churn

    [device_plugins]                   # resources served by device plugins, see DevicePluginsSpec
    resources = ["example.com/vf"]     # their devices come from the plugins, not node.devices
    directory = "device-plugins"       # relative: beside the pod-resources socket
    resource_grace_s = 300.0           # a resource whose plugin went away is dropped after it
    retry_pending = true               # re-admit pods rejected for want of a plugin resource

    [node]
    name = "gpu-node-a1"
    numa_nodes = 2
    cpus_per_numa_node = 24            # node N holds CPUs N*24 .. N*24+23, or:
    # numa_cpus = ["0-11,24-35", "12-23,36-47"]
    reserved_cpus = "0,1,24,25"        # kernel range list, or an array of ints
    offline_cpus = []                  # present but offline: not allocatable, not in sysfs
    cpu_policy = "static"              # | "none"
    memory_policy = "static"           # | "none"
    threads_per_core = 2               # SMT: consecutive CPUs of a NUMA node share a core
    topology_policy = "restricted"     # | "none" | "best-effort" | "single-numa-node";
                                       # unset: the simple allocator, no Topology Manager
    topology_scope = "container"       # | "pod"

    [node.memory]                      # per NUMA node: one quantity for all, or one each
    memory = "120Gi"
    hugepages-1Gi = ["32Gi", "32Gi"]

    [[node.devices]]
    resource = "nvidia.com/gpu"
    ids = ["GPU-...", "GPU-..."]       # or id = "..."
    numa = 0                           # int, array (device spans nodes), absent: no topology
    healthy = true

    [[pods]]
    namespace = "ml-training"
    name = "llm-pretrain"
    naming = "statefulset"             # exact | deployment | generated | statefulset | static
    replicas = 2
    churn = false                      # step() may delete it and admit a replacement
    qos = "Guaranteed"                 # optional; derived from the requests otherwise
    cpu = 4                            # pod-level resources (Topology Manager scope pod):
    memory = "8Gi"                     #   the pod's exclusive budget and private shared pool
    finished = false                   # ran and finished: resources given back, listed by
                                       #   kubelets before 1.34 (list_active_only = false)
    owner = ""                         # controller kind ("Job"); "": from naming; "none"
    labels = { team = "research" }     # pod labels, as the Pods API shows them

    [[pods.containers]]
    name = "trainer"
    kind = "app"                       # | "sidecar" (restartable init) | "init" (not listed)
    cpu = 8                            # cores: 8, 1.5, "500m"
    memory = "64Gi"
    hugepages-1Gi = "8Gi"
    devices = { "nvidia.com/gpu" = 2 }

    [[pods.containers.claims]]         # DRA claim, carried through to List
    name = "{pod}-gpu"                 # "{pod}" becomes the pod's name
    driver = "gpu.example.com"         # one device inline, or [[...claims.devices]]
    pool = "gpu-node-a1"
    device = "gpu-0"
    cdi_devices = ["k8s.gpu.example.com/gpu=gpu-0"]
    share_id = "..."                   # consumable capacity: claims with one id share one device

A file that is not UTF-8 or not TOML, a value of the wrong type, an unknown key, or a
size past what any node has (more than 8192 CPUs or 1024 NUMA nodes, 100,000 replicas,
churn rarer than hourly) is a ScenarioError naming the file and the key.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast, get_args

from podres_exporter.core.cpulist import parse_cpulist
from podres_exporter.core.errors import ScenarioError
from podres_exporter.core.kube import is_hugepages_name, parse_bytes, parse_millicpu
from podres_sim.scenario.kinds import (
    ContainerKind,
    CpuPolicy,
    MemoryPolicy,
    Naming,
    QoS,
    TopologyPolicyName,
    TopologyScope,
)
from podres_sim.scenario.records import (
    ClaimDeviceSpec,
    ClaimSpec,
    ContainerSpec,
    DevicePluginsSpec,
    DeviceSpec,
    KubeletBehaviour,
    NodeSpec,
    PodSpec,
    Scenario,
)

# The largest node a scenario may describe: the kernel's largest NR_CPUS and MAX_NUMNODES.
MAX_CPUS = 8192
MAX_NUMA_NODES = 1024
# A node runs a few hundred pods; the load tests use 20,000 (synthetic scenarios).
MAX_REPLICAS = 100_000
# Churn rarer than hourly is no churn to watch; a plugin resource's grace, a day at most.
MAX_CHURN_INTERVAL_S = 3600.0
MAX_RESOURCE_GRACE_S = 86400.0

__all__ = ["parse_scenario", "read_scenario", "scenario_from_dict"]


def read_scenario(path: str | Path) -> Scenario:
    """Load a scenario from a TOML file; raise ScenarioError naming the file and key."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(str(p), "", f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            str(p), "", f"not UTF-8 text (byte {exc.start}): save it as UTF-8, as TOML requires"
        ) from exc
    return parse_scenario(text, source=str(p), default_name=p.stem)


def parse_scenario(
    text: str, *, source: str = "<string>", default_name: str = "scenario"
) -> Scenario:
    """Load a scenario from TOML text; ``source`` names it in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(source, "", f"invalid TOML: {exc}") from exc
    return scenario_from_dict(data, source=source, default_name=default_name)


def scenario_from_dict(
    data: Mapping[str, Any], *, source: str = "<dict>", default_name: str = "scenario"
) -> Scenario:
    """Build a scenario from parsed TOML data (see the module docstring for the schema)."""
    try:
        return _Parser(source).scenario(data, default_name)
    except ScenarioError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:  # a check below missed a bad value
        raise ScenarioError(source, "", f"invalid scenario: {exc}") from exc


# --------------------------------------------------------------------------- TOML parsing


def _cpu_ids(value: object) -> tuple[int, ...]:
    """A CPU list value: a kernel CPU list string or an array of ints; sorted, unique."""
    if isinstance(value, list | tuple):
        cpus: set[int] = set()
        for item in value:
            if not isinstance(item, int) or isinstance(item, bool) or item < 0:
                raise ValueError(f"expected CPU ids (non-negative ints), got {item!r}")
            if item >= MAX_CPUS:
                raise ValueError(f"CPU ids are below {MAX_CPUS}, got {item}")
            cpus.add(item)
        return tuple(sorted(cpus))
    if isinstance(value, str):
        if any(int(n) >= MAX_CPUS for n in re.findall(r"\d+", value)):
            raise ValueError(f"CPU ids are below {MAX_CPUS}, got {value!r}")
        return tuple(sorted(parse_cpulist(value)))
    raise ValueError(f"expected a CPU list string or an array of ints, got {value!r}")


_TOP_KEYS = {"name", "description", "seed", "kubelet", "churn", "device_plugins", "node", "pods"}
_NODE_KEYS = {
    "name",
    "numa_nodes",
    "cpus_per_numa_node",
    "numa_cpus",
    "reserved_cpus",
    "offline_cpus",
    "cpu_policy",
    "memory_policy",
    "memory",
    "devices",
    "threads_per_core",
    "topology_policy",
    "topology_scope",
}
_DEVICE_KEYS = {"resource", "id", "ids", "numa", "healthy"}
_POD_KEYS = {
    "namespace",
    "name",
    "replicas",
    "naming",
    "churn",
    "qos",
    "containers",
    "cpu",
    "memory",
    "finished",
    "labels",
    "owner",
}
_CONTAINER_KEYS = {"name", "kind", "cpu", "memory", "devices", "claims"}
_CLAIM_KEYS = {
    "name",
    "namespace",
    "devices",
    "driver",
    "pool",
    "device",
    "cdi_devices",
    "share_id",
}
_CLAIM_DEVICE_KEYS = {"driver", "pool", "device", "cdi_devices", "share_id"}


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, problem: str) -> ScenarioError:
        return ScenarioError(self.source, key, problem)

    def table(self, value: object, key: str, allowed: set[str] | None) -> Mapping[str, Any]:
        """Check that ``value`` is a table whose keys are all in ``allowed`` (None: any)."""
        if not isinstance(value, Mapping):
            raise self.fail(key, f"expected a table, got {type(value).__name__}")
        for k in value:
            if allowed is not None and k not in allowed:
                raise self.fail(f"{key}.{k}" if key else k, "unknown key")
        return cast("Mapping[str, Any]", value)

    def string(
        self, data: Mapping[str, Any], key: str, where: str, default: str | None = None
    ) -> str:
        value = data.get(key, default)
        if value is None:
            raise self.fail(f"{where}.{key}" if where else key, "required key is missing")
        if not isinstance(value, str):
            raise self.fail(f"{where}.{key}" if where else key, f"expected a string, got {value!r}")
        return value

    def integer(self, data: Mapping[str, Any], key: str, where: str, default: int) -> int:
        value = data.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(
                f"{where}.{key}" if where else key, f"expected an integer, got {value!r}"
            )
        return value

    def boolean(self, data: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(
                f"{where}.{key}" if where else key, f"expected true or false, got {value!r}"
            )
        return value

    def choice(
        self, data: Mapping[str, Any], key: str, where: str, default: str, allowed: object
    ) -> Any:
        value = self.string(data, key, where, default)
        choices = get_args(allowed)
        if value not in choices:
            raise self.fail(f"{where}.{key}", f"expected {'|'.join(choices)}, got {value!r}")
        return value

    def guarded(self, key: str, fn: Any, value: object) -> Any:
        try:
            return fn(value)
        except (ValueError, TypeError, OverflowError) as exc:
            raise self.fail(key, str(exc)) from exc

    def bounded(self, value: int, key: str, low: int, high: int) -> int:
        if not low <= value <= high:
            raise self.fail(key, f"expected {low} to {high}, got {value}")
        return value

    # ---- sections

    def scenario(self, data: Mapping[str, Any], default_name: str) -> Scenario:
        data = self.table(data, "", _TOP_KEYS)
        if "node" not in data:
            raise self.fail("node", "required table is missing")
        kubelet = self.kubelet(data.get("kubelet", {}))
        churn = self.table(data.get("churn", {}), "churn", {"interval_s"})
        interval = churn.get("interval_s", 0.0)
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not 0 <= interval <= MAX_CHURN_INTERVAL_S
        ):
            raise self.fail(
                "churn.interval_s",
                f"expected seconds from 0 to {MAX_CHURN_INTERVAL_S:g}, got {interval!r}",
            )
        node = self.node(data["node"])
        pods_data = data.get("pods", [])
        if not isinstance(pods_data, list):
            raise self.fail("pods", "expected an array of tables ([[pods]])")
        pods = tuple(self.pod(p, f"pods[{i}]") for i, p in enumerate(pods_data))
        return Scenario(
            node=node,
            pods=pods,
            kubelet=kubelet,
            seed=self.integer(data, "seed", "", 0),
            churn_interval_s=float(interval),
            name=self.string(data, "name", "", default_name),
            description=self.string(data, "description", "", ""),
            source=self.source,
            device_plugins=(
                self.device_plugins(data["device_plugins"]) if "device_plugins" in data else None
            ),
        )

    def device_plugins(self, value: object) -> DevicePluginsSpec:
        fields = set(DevicePluginsSpec.__dataclass_fields__)
        data = dict(self.table(value, "device_plugins", fields))
        resources = data.get("resources", [])
        if not isinstance(resources, list):
            raise self.fail("device_plugins.resources", "expected an array of resource names")
        data["resources"] = tuple(resources)
        grace = data.get("resource_grace_s", 0.0)
        number = isinstance(grace, int | float) and not isinstance(grace, bool)
        if number and not grace <= MAX_RESOURCE_GRACE_S:  # NaN too
            raise self.fail(
                "device_plugins.resource_grace_s",
                f"expected at most {MAX_RESOURCE_GRACE_S:g} seconds, got {grace!r}",
            )
        try:
            return DevicePluginsSpec(**data)
        except ValueError as exc:
            key, _, problem = str(exc).partition(": ")
            raise self.fail(key, problem) from exc

    def kubelet(self, value: object) -> KubeletBehaviour:
        fields = set(KubeletBehaviour.__dataclass_fields__)
        data = self.table(value, "kubelet", fields)
        try:
            return KubeletBehaviour(**data)
        except (TypeError, ValueError) as exc:
            text = str(exc)
            key = text.split(":", 1)[0] if text.startswith("kubelet.") else "kubelet"
            raise self.fail(key, text.split(": ", 1)[-1]) from exc

    def node(self, value: object) -> NodeSpec:
        data = self.table(value, "node", _NODE_KEYS)
        if "numa_cpus" in data:
            if "cpus_per_numa_node" in data or "numa_nodes" in data:
                raise self.fail("node.numa_cpus", "give numa_cpus OR numa_nodes/cpus_per_numa_node")
            raw = data["numa_cpus"]
            if not isinstance(raw, list) or not raw:
                raise self.fail(
                    "node.numa_cpus", "expected an array with one CPU list per NUMA node"
                )
            numa_cpus = tuple(
                self.guarded(f"node.numa_cpus[{i}]", _cpu_ids, v) for i, v in enumerate(raw)
            )
        else:
            n = self.integer(data, "numa_nodes", "node", 1)
            if n < 1:
                raise self.fail("node.numa_nodes", "must be at least 1")
            self.bounded(n, "node.numa_nodes", 1, MAX_NUMA_NODES)
            if "cpus_per_numa_node" not in data:
                raise self.fail("node.cpus_per_numa_node", "required key is missing")
            k = self.integer(data, "cpus_per_numa_node", "node", 0)
            if k < 1:
                raise self.fail("node.cpus_per_numa_node", "must be at least 1")
            self.bounded(k, "node.cpus_per_numa_node", 1, MAX_CPUS // n)
            numa_cpus = tuple(tuple(range(i * k, (i + 1) * k)) for i in range(n))
        numa_nodes = len(numa_cpus)
        memory: dict[str, tuple[int, ...]] = {}
        for mtype, q in self.table(data.get("memory", {}), "node.memory", None).items():
            key = f"node.memory.{mtype}"
            if isinstance(q, list):
                memory[mtype] = tuple(
                    self.guarded(f"{key}[{i}]", parse_bytes, v) for i, v in enumerate(q)
                )
            else:
                memory[mtype] = (self.guarded(key, parse_bytes, q),) * numa_nodes
        devices_data = data.get("devices", [])
        if not isinstance(devices_data, list):
            raise self.fail("node.devices", "expected an array of tables ([[node.devices]])")
        devices: list[DeviceSpec] = []
        seen: set[tuple[str, str]] = set()
        for i, d in enumerate(devices_data):
            where = f"node.devices[{i}]"
            for dev in self.devices(d, where, numa_nodes):
                if (dev.resource, dev.id) in seen:
                    key = f"{where}.{'ids' if 'ids' in d else 'id'}"
                    raise self.fail(key, f"duplicate device {dev.id!r} of {dev.resource}")
                seen.add((dev.resource, dev.id))
                devices.append(dev)
        try:
            return NodeSpec(
                numa_cpus=numa_cpus,
                name=self.string(data, "name", "node", "sim-node"),
                reserved_cpus=self.guarded(
                    "node.reserved_cpus", _cpu_ids, data.get("reserved_cpus", [])
                ),
                offline_cpus=self.guarded(
                    "node.offline_cpus", _cpu_ids, data.get("offline_cpus", [])
                ),
                cpu_policy=self.choice(data, "cpu_policy", "node", "static", CpuPolicy),
                memory_policy=self.choice(data, "memory_policy", "node", "none", MemoryPolicy),
                memory=memory,
                devices=tuple(devices),
                threads_per_core=self.integer(data, "threads_per_core", "node", 1),
                topology_policy=(
                    self.choice(data, "topology_policy", "node", "none", TopologyPolicyName)
                    if "topology_policy" in data
                    else None
                ),
                topology_scope=self.choice(
                    data, "topology_scope", "node", "container", TopologyScope
                ),
            )
        except ScenarioError as exc:
            if exc.source != "<python>":
                raise
            raise self.fail(exc.key, exc.problem) from None

    def devices(self, value: object, where: str, numa_nodes: int) -> list[DeviceSpec]:
        data = self.table(value, where, _DEVICE_KEYS)
        resource = self.string(data, "resource", where)
        if "/" not in resource:
            raise self.fail(f"{where}.resource", f"expected domain/name, got {resource!r}")
        if ("id" in data) == ("ids" in data):
            raise self.fail(f"{where}.id", "give exactly one of id or ids")
        ids = data.get("ids", [data.get("id")])
        if not isinstance(ids, list) or not all(isinstance(x, str) and x for x in ids):
            raise self.fail(f"{where}.ids", "expected non-empty device id strings")
        numa: tuple[int, ...] | None = None
        if "numa" in data:
            raw = data["numa"]
            items = raw if isinstance(raw, list) else [raw]
            if not items or not all(isinstance(x, int) and not isinstance(x, bool) for x in items):
                raise self.fail(
                    f"{where}.numa", f"expected a NUMA node id or an array of them, got {raw!r}"
                )
            numa = tuple(sorted(set(items)))
            bad = [n for n in numa if not 0 <= n < numa_nodes]
            if bad:
                raise self.fail(f"{where}.numa", f"no such NUMA node: {bad}")
        healthy = self.boolean(data, "healthy", where, True)
        return [DeviceSpec(resource, i, numa, healthy) for i in ids]

    def pod(self, value: object, where: str) -> PodSpec:
        data = self.table(value, where, _POD_KEYS)
        replicas = self.integer(data, "replicas", where, 1)
        if replicas > MAX_REPLICAS:
            raise self.fail(f"{where}.replicas", f"expected at most {MAX_REPLICAS}, got {replicas}")
        churn = self.boolean(data, "churn", where, False)
        default_naming = "deployment" if replicas > 1 or churn else "exact"
        naming = self.choice(data, "naming", where, default_naming, Naming)
        qos = self.choice(data, "qos", where, "", QoS) if "qos" in data else None
        containers_data = data.get("containers", [])
        if not isinstance(containers_data, list):
            raise self.fail(f"{where}.containers", "expected an array of tables")
        containers = tuple(
            self.container(c, f"{where}.containers[{j}]") for j, c in enumerate(containers_data)
        )
        return PodSpec(
            namespace=self.string(data, "namespace", where),
            name=self.string(data, "name", where),
            containers=containers,
            replicas=replicas,
            naming=naming,
            churn=churn,
            qos=qos,
            cpu_m=self.guarded(f"{where}.cpu", parse_millicpu, data.get("cpu", 0)),
            memory=self.guarded(f"{where}.memory", parse_bytes, data.get("memory", 0)),
            finished=self.boolean(data, "finished", where, False),
            labels=self.labels(data, where),
            owner=self.string(data, "owner", where, ""),
        )

    def labels(self, data: Mapping[str, Any], where: str) -> dict[str, str]:
        table = self.table(data.get("labels", {}), f"{where}.labels", None)
        for key, value in table.items():
            if not isinstance(value, str):
                raise self.fail(f"{where}.labels.{key}", f"expected a string, got {value!r}")
        return dict(table)

    def container(self, value: object, where: str) -> ContainerSpec:
        if isinstance(value, Mapping):
            extra = [k for k in value if k not in _CONTAINER_KEYS and not is_hugepages_name(str(k))]
            if extra:
                raise self.fail(f"{where}.{extra[0]}", "unknown key")
        data = self.table(value, where, None)
        devices_raw = self.table(data.get("devices", {}), f"{where}.devices", None)
        devices: dict[str, int] = {}
        for res, count in devices_raw.items():
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise self.fail(f"{where}.devices.{res}", f"expected a device count, got {count!r}")
            devices[res] = count
        claims_data = data.get("claims", [])
        if not isinstance(claims_data, list):
            raise self.fail(f"{where}.claims", "expected an array of tables")
        return ContainerSpec(
            name=self.string(data, "name", where),
            kind=self.choice(data, "kind", where, "app", ContainerKind),
            cpu_m=self.guarded(f"{where}.cpu", parse_millicpu, data.get("cpu", 0)),
            memory=self.guarded(f"{where}.memory", parse_bytes, data.get("memory", 0)),
            hugepages={
                k: self.guarded(f"{where}.{k}", parse_bytes, v)
                for k, v in data.items()
                if is_hugepages_name(k)
            },
            devices=devices,
            claims=tuple(self.claim(c, f"{where}.claims[{k}]") for k, c in enumerate(claims_data)),
        )

    def claim(self, value: object, where: str) -> ClaimSpec:
        data = self.table(value, where, _CLAIM_KEYS)
        inline = {k: v for k, v in data.items() if k in _CLAIM_DEVICE_KEYS}
        if inline and "devices" in data:
            raise self.fail(f"{where}.devices", "give devices OR one inline driver/pool/device")
        raw_devices = data.get("devices", [inline] if inline else [])
        if not isinstance(raw_devices, list):
            raise self.fail(f"{where}.devices", "expected an array of tables")
        devices = tuple(
            self.claim_device(d, f"{where}.devices[{i}]" if "devices" in data else where)
            for i, d in enumerate(raw_devices)
        )
        namespace = data.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise self.fail(f"{where}.namespace", f"expected a string, got {namespace!r}")
        return ClaimSpec(
            name=self.string(data, "name", where), devices=devices, namespace=namespace
        )

    def claim_device(self, value: object, where: str) -> ClaimDeviceSpec:
        data = self.table(value, where, _CLAIM_DEVICE_KEYS)
        cdi = data.get("cdi_devices", [])
        if not isinstance(cdi, list) or not all(isinstance(x, str) and "=" in x for x in cdi):
            raise self.fail(
                f"{where}.cdi_devices", "expected CDI names such as vendor.com/class=name"
            )
        share = data.get("share_id")
        if share is not None and not isinstance(share, str):
            raise self.fail(f"{where}.share_id", f"expected a string, got {share!r}")
        return ClaimDeviceSpec(
            driver=self.string(data, "driver", where),
            pool=self.string(data, "pool", where),
            device=self.string(data, "device", where),
            cdi_devices=tuple(cdi),
            share_id=share,
        )
