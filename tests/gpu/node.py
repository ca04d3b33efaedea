"""The simulated node of the GPU tier: a kubelet whose one pod holds the real GPUs.

:func:`scenario_toml` writes the scenario: ``nvidia.com/gpu`` with the UUIDs of the
GPUs (those with MIG off), ``nvidia.com/mig`` with the UUIDs of the MIG devices (where
MIG is already on), and the pod :data:`POD` holding all of them. The simulated kubelet
serves it over the real pod-resources API; the exporter under test reads the real NVML,
sysfs and procfs beside it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

NAMESPACE = "gpu-tier"
POD_NAME = "holder"
CONTAINER = "main"
POD = f"{NAMESPACE}/{POD_NAME}"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE = "nvidia.com/mig"


def scenario_toml(gpus: Sequence[str], migs: Sequence[str] = ()) -> str:
    """A node whose pod :data:`POD` holds the GPUs ``gpus`` and the MIG devices ``migs``."""
    devices, wanted = [], []
    for resource, ids in ((GPU_RESOURCE, gpus), (MIG_RESOURCE, migs)):
        if ids:
            devices.append(
                f"[[node.devices]]\nresource = {json.dumps(resource)}\n"
                f"ids = {json.dumps(list(ids))}\nnuma = 0\n"
            )
            wanted.append(f"{json.dumps(resource)} = {len(ids)}")
    return "\n".join(
        [
            'name = "gpu-tier"',
            'description = "one pod holding the GPUs of the machine under test"',
            "seed = 1",
            "",
            "[node]",
            'name = "gpu-node"',
            "numa_nodes = 1",
            "cpus_per_numa_node = 4",
            'reserved_cpus = "0"',
            'cpu_policy = "none"',
            'memory_policy = "none"',
            "",
            *devices,
            "[[pods]]",
            f"namespace = {json.dumps(NAMESPACE)}",
            f"name = {json.dumps(POD_NAME)}",
            "",
            "[[pods.containers]]",
            f"name = {json.dumps(CONTAINER)}",
            'cpu = "100m"',
            'memory = "128Mi"',
            f"devices = {{ {', '.join(wanted)} }}",
            "",
        ]
    )
