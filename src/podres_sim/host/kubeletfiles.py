"""The simulated node's kubelet files: its configuration and its device-manager checkpoint.

What the exporter reads beside the pod-resources API (``--kubelet-config``,
``--kubelet-device-checkpoint``), in the real kubelet's formats:

- ``config.yaml``: a ``KubeletConfiguration`` with the scenario's CPU manager policy
  (``static`` | ``none``), memory manager policy (``Static`` | ``None``), reserved CPUs
  and Topology Manager policy and scope;
- ``device-plugins/kubelet_internal_checkpoint``: JSON as upstream
  ``pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go`` writes it, with every device
  of the scenario registered (healthy or not; the device plugins' too) and the devices
  the running pods hold, keyed by NUMA node (``-1``: no topology).

The simulated kubelet's own device manager keeps a checkpoint of its own format beside
its sockets; these files are the host's, for the exporter alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from podres_exporter.core.cpulist import format_cpulist
from podres_sim.kubelet import PodState
from podres_sim.scenario import Scenario

__all__ = ["kubelet_config_text", "write_device_checkpoint", "write_kubelet_config"]

_NO_TOPOLOGY = -1


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)  # readers never see a half-written file


def kubelet_config_text(scenario: Scenario) -> str:
    """The scenario node's ``KubeletConfiguration`` as YAML."""
    node = scenario.node
    lines = [
        "apiVersion: kubelet.config.k8s.io/v1beta1",
        "kind: KubeletConfiguration",
        f"cpuManagerPolicy: {node.cpu_policy}",
        f"memoryManagerPolicy: {'Static' if node.memory_policy == 'static' else 'None'}",
        f"topologyManagerPolicy: {node.topology_policy or 'none'}",
        f"topologyManagerScope: {node.topology_scope}",
    ]
    if node.reserved_cpus:
        lines.append(f'reservedSystemCPUs: "{format_cpulist(node.reserved_cpus)}"')
    return "\n".join(lines) + "\n"


def write_kubelet_config(scenario: Scenario, path: Path) -> Path:
    """Write :func:`kubelet_config_text` to ``path``; return it."""
    _replace(path, kubelet_config_text(scenario))
    return path


def write_device_checkpoint(
    path: Path,
    registered: Mapping[str, Sequence[str]],
    pods: Iterable[PodState],
    uid: Callable[[str, str], str],
) -> Path:
    """Write the checkpoint: ``registered`` (resource -> ids) and the devices the active
    ``pods`` hold; ``uid(namespace, name)`` gives a pod's UID."""
    entries = []
    for pod in pods:
        if not pod.active:
            continue
        for c in pod.containers:
            by_resource: dict[str, dict[str, list[str]]] = {}
            for d in c.devices:
                nodes = d.numa if d.numa is not None else (_NO_TOPOLOGY,)
                per_numa = by_resource.setdefault(d.resource, {})
                for n in nodes:
                    per_numa.setdefault(str(n), []).append(d.device_id)
            for resource, per_numa in sorted(by_resource.items()):
                entries.append(
                    {
                        "PodUID": uid(pod.namespace, pod.name),
                        "ContainerName": c.name,
                        "ResourceName": resource,
                        "DeviceIDs": per_numa,
                        "AllocResp": "",
                    }
                )
    data = {
        "Data": {
            "PodDeviceEntries": entries,
            "RegisteredDevices": {r: list(ids) for r, ids in sorted(registered.items())},
        },
        "Checksum": 0,
    }
    _replace(path, json.dumps(data, indent=1) + "\n")
    return path
