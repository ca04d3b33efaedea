"""The device manager's checkpoint: ``kubelet_internal_checkpoint`` in the
device-plugins directory, with the allocations and the registered resources.

The format is this simulator's own (JSON, ``podres-sim-devicemanager/1``): nobody else
is to parse it, just as nobody is to parse a real kubelet's. A kubelet start keeps the
file; a new manager on the same directory reads it back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import structlog

from podres_sim.kubelet.devicemanager.records import (
    AllocationResult,
    ContainerMount,
    DeviceNodeSpec,
)

__all__ = [
    "CHECKPOINT",
    "allocation_from_json",
    "allocation_to_json",
    "read_checkpoint",
    "write_checkpoint",
]

log = structlog.get_logger("podres_sim")

CHECKPOINT = "kubelet_internal_checkpoint"
_FORMAT = "podres-sim-devicemanager/1"


def allocation_to_json(a: AllocationResult) -> dict[str, Any]:
    """An allocation as a JSON-able dict (the checkpoint's entry)."""
    return {
        "pod": a.pod,
        "container": a.container,
        "resource": a.resource,
        "devices": [
            {"id": i, "numa": None if (n := a.topology.get(i)) is None else list(n)}
            for i in a.device_ids
        ],
        "envs": dict(a.envs),
        "mounts": [[m.container_path, m.host_path, m.read_only] for m in a.mounts],
        "device_specs": [[d.container_path, d.host_path, d.permissions] for d in a.devices],
        "annotations": dict(a.annotations),
        "cdi_devices": list(a.cdi_devices),
    }


def allocation_from_json(data: Mapping[str, Any]) -> AllocationResult:
    """The inverse of ``allocation_to_json``."""
    devices = data.get("devices", [])
    return AllocationResult(
        pod=str(data["pod"]),
        container=str(data["container"]),
        resource=str(data["resource"]),
        device_ids=tuple(str(d["id"]) for d in devices),
        topology=MappingProxyType(
            {str(d["id"]): None if d.get("numa") is None else tuple(d["numa"]) for d in devices}
        ),
        envs=MappingProxyType(dict(data.get("envs", {}))),
        mounts=tuple(ContainerMount(str(a), str(b), bool(c)) for a, b, c in data.get("mounts", [])),
        devices=tuple(
            DeviceNodeSpec(str(a), str(b), str(c)) for a, b, c in data.get("device_specs", [])
        ),
        annotations=MappingProxyType(dict(data.get("annotations", {}))),
        cdi_devices=tuple(str(n) for n in data.get("cdi_devices", [])),
    )


def write_checkpoint(
    directory: Path,
    allocations: Iterable[AllocationResult],
    registered: Mapping[str, Iterable[str]],
) -> None:
    """Write the allocations and each registered resource's device ids; nothing when the
    directory is gone (a warning when it goes away while writing)."""
    data = {
        "format": _FORMAT,
        "allocations": [allocation_to_json(a) for a in allocations],
        "registered": {n: sorted(ids) for n, ids in registered.items()},
    }
    if not directory.is_dir():
        return
    tmp = directory / f".{CHECKPOINT}.tmp"
    try:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(directory / CHECKPOINT)
    except OSError as exc:  # the directory went away under us
        log.warning("sim_device_manager_checkpoint_failed", error=str(exc))


def read_checkpoint(directory: Path) -> tuple[list[AllocationResult], list[str]] | None:
    """The allocations and registered resource names of our own checkpoint in
    ``directory``; None when there is none, or it is not ours or unreadable."""
    path = directory / CHECKPOINT
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        return None
    try:
        allocs = [allocation_from_json(a) for a in data.get("allocations", [])]
        registered = [str(n) for n in data.get("registered", {})]
    except (KeyError, TypeError, ValueError):
        log.warning("sim_device_manager_checkpoint_unreadable", path=str(path))
        return None
    return allocs, registered
