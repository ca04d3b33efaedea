"""Device-id rules: what physical device a kubelet device id names. Pure.

Device plugins name devices in a handful of ways (see docs/metrics.md):

| id | kind | physical key |
|---|---|---|
| ``GPU-8a7f...`` (NVIDIA GPU UUID) | ``gpu`` | ``GPU-8a7f...`` |
| ``MIG-3c1e...`` (MIG device UUID) | ``mig`` | ``MIG-3c1e...`` |
| ``MIG-GPU-8a7f.../3/0`` (older MIG id) | ``mig`` | ``GPU-8a7f.../gi3/ci0`` |
| ``nvidia0`` (GKE) | ``gpu_index`` | ``nvidia0`` |
| ``nvidia0/vgpu2`` (GKE time-sharing) | ``gpu_index`` | ``nvidia0``, replica 2 |
| ``nvidia0/gi1`` (GKE MIG) | ``mig_index`` | ``nvidia0/gi1`` |
| ``0000:af:06.1`` / ``af:06.1`` (PCI function) | ``pci`` | ``0000:af:06.1`` |
| ``card0-1`` (Intel GPU, share 1) | ``drm`` | ``card0``, replica 1 |
| ``<any of the above>::3`` (time-slicing, MPS) | as the underlying id | replica 3 |

An id that matches no rule resolves to kind ``unknown``: it is still exported
as an allocation, never dropped, and counted.

Which resources are GPU resources is configurable (glob patterns); for them an
id of GPU shape is read as a GPU. Every other resource is matched by id shape
alone, so a PCI address of an SR-IOV pool or an AMD GPU resolves either way.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase

DEFAULT_GPU_RESOURCES: tuple[str, ...] = ("nvidia.com/*", "amd.com/gpu", "gpu.intel.com/*")

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_GPU = re.compile(rf"^GPU-({_UUID})$", re.IGNORECASE)
_MIG = re.compile(rf"^MIG-({_UUID})$", re.IGNORECASE)
_MIG_LEGACY = re.compile(rf"^MIG-GPU-({_UUID})/(\d+)/(\d+)$", re.IGNORECASE)
_GKE = re.compile(r"^nvidia(\d+)(?:/(vgpu|gi)(\d+))?$")
# Domain (4 hex digits; 5 on VMD domains; NVML prints 8), bus, device (0-0x1f), function.
_PCI = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([01][0-9a-fA-F])\.([0-7])$")
_DRM = re.compile(r"^(card\d+)(?:-(\d+))?$")
_REPLICA = re.compile(r"^(.+)::(\d+)$")


class Kind(StrEnum):
    """What a device id names."""

    GPU = "gpu"  # an NVIDIA GPU by UUID
    MIG = "mig"  # an NVIDIA MIG device by UUID (or parent UUID + instance ids)
    GPU_INDEX = "gpu_index"  # an NVIDIA GPU by index (GKE)
    MIG_INDEX = "mig_index"  # a MIG instance by GPU index and GPU-instance id (GKE)
    PCI = "pci"  # a PCI function
    DRM = "drm"  # a DRM card (Intel GPUs)
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Resolved:
    """A device id resolved to a physical device.

    ``key`` is canonical (upper-case ``GPU-``/``MIG-`` prefix with lower-case hex,
    lower-case PCI address with a 4-digit domain) so ids from different plugins of
    the same device compare equal. ``replica`` is set for shared ids
    (``::n``, ``/vgpuN``, ``cardN-M``); ``gpu_index``/``gpu_instance``/
    ``compute_instance`` locate index-named and older MIG devices.
    """

    kind: Kind
    key: str
    replica: int | None = None
    gpu_index: int | None = None
    parent_uuid: str | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None


def normalize_pci(address: str) -> str | None:
    """``"AF:06.1"`` or ``"00000000:af:06.1"`` -> ``"0000:af:06.1"``; None if not PCI."""
    m = _PCI.match(address.strip())
    if not m:
        return None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def _uuid(prefix: str, hexpart: str) -> str:
    return f"{prefix}-{hexpart.lower()}"


def is_gpu_resource(resource: str, patterns: Iterable[str] = DEFAULT_GPU_RESOURCES) -> bool:
    """Whether ``resource`` is a GPU resource by the configured glob patterns."""
    return _is_gpu(resource, tuple(patterns))


@functools.lru_cache(maxsize=1024)
def _is_gpu(resource: str, patterns: tuple[str, ...]) -> bool:
    # A node has a handful of resource names, asked about once per device id.
    return any(fnmatchcase(resource, p) for p in patterns)


def replica_id(base: str, replica: int) -> str:
    """``("GPU-8a7f...", 3)`` -> ``"GPU-8a7f...::3"``: replica ``replica`` of the device
    ``base`` names (time-slicing, MPS); :func:`split_replica` takes it apart."""
    return f"{base}::{replica}"


def split_replica(device_id: str) -> tuple[str, int | None]:
    """``"GPU-8a7f...::3"`` -> ``("GPU-8a7f...", 3)``; an id without ``::n`` -> ``(id, None)``.

    The ``::n`` suffix (time-slicing, MPS) shares the device the rest of the id names,
    whatever its shape.
    """
    if m := _REPLICA.match(device_id):
        return m.group(1), int(m.group(2))
    return device_id, None


def _by_shape(device_id: str, gpu: bool) -> Resolved | None:  # noqa: PLR0911 - one return per shape
    if m := _GPU.match(device_id):
        return Resolved(Kind.GPU, _uuid("GPU", m.group(1)))
    if m := _MIG_LEGACY.match(device_id):
        parent = _uuid("GPU", m.group(1))
        gi, ci = int(m.group(2)), int(m.group(3))
        return Resolved(
            Kind.MIG,
            f"{parent}/gi{gi}/ci{ci}",
            parent_uuid=parent,
            gpu_instance=gi,
            compute_instance=ci,
        )
    if m := _MIG.match(device_id):
        return Resolved(Kind.MIG, _uuid("MIG", m.group(1)))
    if (address := normalize_pci(device_id)) is not None:
        return Resolved(Kind.PCI, address)
    if gpu and (m := _GKE.match(device_id)):
        index = int(m.group(1))
        if m.group(2) == "gi":
            gi = int(m.group(3))
            return Resolved(
                Kind.MIG_INDEX, f"nvidia{index}/gi{gi}", gpu_index=index, gpu_instance=gi
            )
        replica = int(m.group(3)) if m.group(2) == "vgpu" else None
        return Resolved(Kind.GPU_INDEX, f"nvidia{index}", replica=replica, gpu_index=index)
    if gpu and (m := _DRM.match(device_id)):
        return Resolved(Kind.DRM, m.group(1), replica=int(m.group(2)) if m.group(2) else None)
    return None


def resolve(
    resource: str, device_id: str, gpu_resources: Iterable[str] = DEFAULT_GPU_RESOURCES
) -> Resolved:
    """Resolve one kubelet device id of ``resource``; kind UNKNOWN when nothing matches."""
    gpu = is_gpu_resource(resource, gpu_resources)
    base, replica = split_replica(device_id)
    found = _by_shape(base, gpu)
    if found is None:
        return Resolved(Kind.UNKNOWN, device_id)
    if replica is not None:
        return Resolved(
            found.kind,
            found.key,
            replica=replica,
            gpu_index=found.gpu_index,
            parent_uuid=found.parent_uuid,
            gpu_instance=found.gpu_instance,
            compute_instance=found.compute_instance,
        )
    return found
