"""Synthetic scenarios, for load and size tests and the benchmark. Pure.

``synthetic_scenario``: a node of any size. ``bench_scenario``: the benchmark's three
nodes (``BENCH_SCENARIOS``), always the same for the same name:

- ``small``: 16 CPUs, one GPU, 20 pods;
- ``large``: 256 CPUs over 4 NUMA nodes; 8 GPUs (4 whole, 2 in MIG mode with seven
  1g.10gb instances each, 2 time-sliced four ways); 128 SR-IOV VFs (one PF of 32 per
  NUMA node); 500 pods of 3 containers, 200 of them with exclusive CPUs;
- ``huge``: ``fleet_scenario(5000)``, whose List answer is over 4 MiB;
- ``identity``: ``identity_scenario(5000)``: ``huge`` with the Pods API on, every pod a
  Deployment's with 10 labels.

``fleet_scenario(pods)`` is one pod shape at any count, for the benchmark's linearity
rows.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from podres_sim.scenario.records import (
    ContainerSpec,
    DeviceSpec,
    KubeletBehaviour,
    NodeSpec,
    PodSpec,
    Scenario,
)

__all__ = [
    "BENCH_SCENARIOS",
    "bench_scenario",
    "fleet_scenario",
    "identity_scenario",
    "synthetic_scenario",
]

BENCH_SCENARIOS = ("small", "large", "huge", "identity")


def synthetic_scenario(
    pods: int = 20000,
    *,
    devices_per_pod: int = 2,
    sidecars: int = 2,
    numa_nodes: int = 2,
    cpus_per_numa_node: int = 64,
    resource: str = "example.com/synthetic-accelerator",
    exclusive_every: int = 0,
    seed: int = 0,
    kubelet: KubeletBehaviour | None = None,
) -> Scenario:
    """A big node for load and size tests.

    ``pods`` pods, each with an app container holding ``devices_per_pod`` devices
    of ``resource`` (the node has exactly enough, spread over the NUMA nodes, with
    GPU-UUID-like ids) and ``sidecars`` shared-pool containers. With
    ``exclusive_every`` N > 0, every Nth pod is Guaranteed and asks one exclusive
    CPU. With the defaults, 20000 pods make a List response of about 5 MiB, over a
    client's default 4 MiB receive limit.
    """
    total = pods * devices_per_pod
    devices = tuple(
        DeviceSpec(resource, _synthetic_uuid(i), (i % numa_nodes,)) for i in range(total)
    )
    node = NodeSpec.uniform(
        numa_nodes,
        cpus_per_numa_node,
        name="synthetic-node",
        reserved_cpus=(0,),
        devices=devices,
    )
    helpers = tuple(
        ContainerSpec.of(f"sidecar-proxy-{k}", cpu="100m", memory="64Mi", kind="app")
        for k in range(sidecars)
    )
    want = {resource: devices_per_pod} if devices_per_pod else {}
    pinned = pods // exclusive_every if exclusive_every else 0
    specs = [
        PodSpec.of(
            "synthetic-load",
            "inference-fleet",
            ContainerSpec.of("inference-server", cpu="500m", devices=want),
            *helpers,
            replicas=pods - pinned,
            naming="deployment",
        )
    ]
    if pinned:
        specs.append(
            PodSpec.of(
                "synthetic-load",
                "pinned-fleet",
                ContainerSpec.of("inference-server", cpu=1, memory="1Gi", devices=want),
                *helpers,
                replicas=pinned,
                naming="deployment",
                qos="Guaranteed",
            )
        )
    return Scenario(
        node=node,
        pods=tuple(s for s in specs if s.replicas > 0),
        kubelet=kubelet or KubeletBehaviour(),
        seed=seed,
        name=f"synthetic-{pods}",
        description=f"{pods} synthetic pods",
    )


def bench_scenario(name: str) -> Scenario:
    """One of the benchmark's nodes by name (``BENCH_SCENARIOS``); ValueError otherwise."""
    if name == "small":
        return small_scenario()
    if name == "large":
        return large_scenario()
    if name == "huge":
        return fleet_scenario(5000, name="huge")
    if name == "identity":
        return identity_scenario(5000)
    raise ValueError(f"no benchmark scenario {name!r}; have {', '.join(BENCH_SCENARIOS)}")


def small_scenario() -> Scenario:
    """16 CPUs on one NUMA node (CPU 0 reserved), one GPU, 20 pods."""
    gpu = DeviceSpec("nvidia.com/gpu", _synthetic_uuid(1, "small"), (0,))
    node = NodeSpec.uniform(1, 16, name="small-node", reserved_cpus=(0,), devices=(gpu,))
    pods = (
        PodSpec.of(
            "ml",
            "trainer",
            ContainerSpec.of("trainer", cpu=4, memory="16Gi", devices={gpu.resource: 1}),
            ContainerSpec.of("log-shipper", kind="sidecar", cpu="100m", memory="128Mi"),
            qos="Guaranteed",
        ),
        PodSpec.of(
            "data",
            "redis",
            ContainerSpec.of("redis", cpu=2, memory="4Gi"),
            replicas=3,
            qos="Guaranteed",
        ),
        PodSpec.of(
            "kube-system",
            "kube-proxy",
            ContainerSpec.of("kube-proxy", cpu="100m"),
            naming="generated",
        ),
        PodSpec.of(
            "web",
            "frontend",
            ContainerSpec.of("istio-proxy", kind="sidecar", cpu="100m", memory="128Mi"),
            ContainerSpec.of("app", cpu="500m"),
            replicas=15,
        ),
    )
    return Scenario(
        node=node, pods=pods, seed=16, name="small", description="16 CPUs, 1 GPU, 20 pods"
    )


def large_scenario() -> Scenario:
    """256 CPUs on 4 NUMA nodes, 8 GPUs (whole, MIG, time-sliced), 128 SR-IOV VFs and
    500 pods of 3 containers, 200 of them with exclusive CPUs (see the module doc)."""
    numa = 4
    devices: list[DeviceSpec] = []
    for n in range(numa):  # one whole GPU per NUMA node
        devices.append(DeviceSpec("nvidia.com/gpu", _synthetic_uuid(n, "large"), (n,)))
    for n in (1, 2):  # two A100s in MIG mode, seven 1g.10gb instances each
        devices += [
            DeviceSpec(
                "nvidia.com/mig-1g.10gb", "MIG" + _synthetic_uuid(10 * n + k, "mig")[3:], (n,)
            )
            for k in range(7)
        ]
    for n in (0, 3):  # two GPUs time-sliced four ways
        sliced = _synthetic_uuid(100 + n, "large")
        devices += [DeviceSpec("nvidia.com/gpu.shared", f"{sliced}::{k}", (n,)) for k in range(4)]
    for n, bus in enumerate((0x17, 0x4B, 0x98, 0xCA)):  # a PF per NUMA node, 32 VFs each
        devices += [
            DeviceSpec(
                "intel.com/sriov_netdevice", f"0000:{bus:02x}:{2 + f // 8:02x}.{f % 8}", (n,)
            )
            for f in range(32)
        ]
    node = NodeSpec.uniform(
        numa,
        64,
        name="large-node",
        reserved_cpus=(0, 64, 128, 192),
        memory_policy="static",
        memory={"memory": "480Gi", "hugepages-1Gi": "64Gi"},
        devices=devices,
    )

    def pinned(ns: str, name: str, replicas: int, cpu: int, devices: dict[str, int]) -> PodSpec:
        return PodSpec.of(
            ns,
            name,
            ContainerSpec.of("main", cpu=cpu, memory="4Gi", devices=devices),
            ContainerSpec.of("log-shipper", kind="sidecar", cpu="100m", memory="128Mi"),
            ContainerSpec.of("metrics-agent", cpu="50m", memory="64Mi"),
            replicas=replicas,
            naming="deployment",
            qos="Guaranteed",
        )

    def shared(ns: str, name: str, replicas: int, devices: dict[str, int]) -> PodSpec:
        return PodSpec.of(
            ns,
            name,
            ContainerSpec.of("istio-proxy", kind="sidecar", cpu="100m", memory="128Mi"),
            ContainerSpec.of("app", cpu="250m", devices=devices),
            ContainerSpec.of("config-reloader", cpu="10m"),
            replicas=replicas,
            qos="Burstable",
        )

    pods = (
        # 200 pods with exclusive CPUs: 4 x 4 + 196 x 1 = 212 of the 252 allocatable.
        pinned("ml-training", "llm-pretrain", 4, 4, {"nvidia.com/gpu": 1}),
        pinned("ml-inference", "triton", 14, 1, {"nvidia.com/mig-1g.10gb": 1}),
        pinned("net-func", "upf-dataplane", 128, 1, {"intel.com/sriov_netdevice": 1}),
        pinned("data", "kafka", 54, 1, {}),
        # 300 in the shared pool.
        shared("research", "notebook", 8, {"nvidia.com/gpu.shared": 1}),
        shared("web", "storefront", 292, {}),
    )
    return Scenario(
        node=node,
        pods=pods,
        seed=256,
        name="large",
        description="256 CPUs, 8 GPUs (MIG, time-sliced), 128 SR-IOV VFs, 500 pods",
    )


def fleet_scenario(pods: int, *, name: str | None = None) -> Scenario:
    """``pods`` pods of one shape on a 512-CPU node with 8 NUMA nodes: each pod holds 10
    devices in its app container beside 2 shared-pool sidecars; one pod in 20 has an
    exclusive CPU. About 1 KB of List answer per pod."""
    scenario = synthetic_scenario(
        pods,
        devices_per_pod=10,
        numa_nodes=8,
        cpus_per_numa_node=64,
        exclusive_every=20,
        seed=pods,
    )
    if name is None:
        return scenario
    return replace(scenario, name=name, description=f"{pods} pods of 10 devices, 512 CPUs")


def identity_scenario(pods: int = 5000) -> Scenario:
    """:func:`fleet_scenario` with the kubelet's Pods API on, each pod a Deployment's
    (owned by its ReplicaSet, with ``pod-template-hash``) carrying 10 labels of its own:
    the pod-identity path at scale."""
    base = fleet_scenario(pods, name=f"identity-{pods}")
    specs = tuple(
        replace(
            spec,
            naming="deployment",
            labels={
                "app.kubernetes.io/name": spec.name,
                "app.kubernetes.io/instance": f"{spec.name}-prod",
                "app.kubernetes.io/version": f"1.{i % 7}.{i % 3}",
                "app.kubernetes.io/component": ("server", "worker", "cache")[i % 3],
                "app.kubernetes.io/part-of": f"platform-{i % 12}",
                "app.kubernetes.io/managed-by": "helm",
                "team": f"team-{i % 25}",
                "cost-center": f"cc-{i % 40:03d}",
                "environment": ("prod", "staging")[i % 2],
                "tier": ("gold", "silver", "bronze")[i % 3],
            },
        )
        for i, spec in enumerate(base.pods)
    )
    return replace(
        base, pods=specs, kubelet=replace(base.kubelet, pods_api=True),
        description=f"{pods} Deployment pods of 10 devices and 10 labels, the Pods API on",
    )  # fmt: skip


def _synthetic_uuid(i: int, salt: str = "") -> str:
    h = hashlib.blake2b(i.to_bytes(8, "big") + salt.encode(), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
