"""A synthetic scenario of any size, for load and size tests. Pure."""

from __future__ import annotations

import hashlib

from podres_exporter.sim.scenario import (
    ContainerSpec,
    DeviceSpec,
    KubeletBehaviour,
    NodeSpec,
    PodSpec,
    Scenario,
)

__all__ = ["synthetic_scenario"]


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


def _synthetic_uuid(i: int) -> str:
    h = hashlib.blake2b(i.to_bytes(8, "big"), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
