"""The identity of a physical device, named the same way on every family. Pure.

One GPU (or MIG device) is ``uuid`` (its NVML UUID, ``MIG-...`` for a MIG device),
``gpu`` (its NVML index; a MIG device's is its parent GPU's) and, for a MIG device,
``gpu_instance`` and ``compute_instance``. A PCI function is ``address``
(``0000:af:06.1``), a DRM card ``card`` (``card0``, with the card's ``address``).
A field that does not apply is empty: its label is then not set.

What telemetry read about the device wins; without it (no NVML on the node, a device no
source reads) the identity is what the kubelet's id itself says
(:func:`of_resolved`): a UUID, an index, a PCI address, a card.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from podres_exporter.core.ids import Kind, Resolved
from podres_exporter.core.telemetry import GpuReading

# The labels of a GPU or MIG device, on every family that speaks of one.
GPU_LABELS = ("uuid", "gpu", "gpu_instance", "compute_instance")
# Those, and the labels of a PCI function and a DRM card.
LABELS = (*GPU_LABELS, "address", "card")


def _text(n: int | None) -> str:
    return "" if n is None else str(n)


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """A physical device's identity labels' values (empty where they do not apply)."""

    uuid: str = ""
    gpu: str = ""
    gpu_instance: str = ""
    compute_instance: str = ""
    address: str = ""
    card: str = ""

    def gpu_values(self) -> list[str]:
        """The values of :data:`GPU_LABELS`, in order."""
        return [self.uuid, self.gpu, self.gpu_instance, self.compute_instance]

    def values(self) -> list[str]:
        """The values of :data:`LABELS`, in order."""
        return [*self.gpu_values(), self.address, self.card]

    def over(self, base: DeviceIdentity) -> DeviceIdentity:
        """This identity, with ``base``'s values where this one has none."""
        return DeviceIdentity(
            *(getattr(self, f.name) or getattr(base, f.name) for f in fields(self))
        )


NONE = DeviceIdentity()


def of_gpu(g: GpuReading) -> DeviceIdentity:
    """A GPU or MIG device as NVML read it."""
    return DeviceIdentity(
        uuid=g.uuid,
        gpu=str(g.index),
        gpu_instance=_text(g.gpu_instance_id),
        compute_instance=_text(g.compute_instance_id),
    )


def gpu_values(g: GpuReading) -> list[str]:
    """The values of :data:`GPU_LABELS` of a GPU or MIG device as NVML read it."""
    return of_gpu(g).gpu_values()


def of_resolved(r: Resolved) -> DeviceIdentity:
    """What a kubelet device id alone says of the device it names."""
    if r.kind is Kind.GPU or (r.kind is Kind.MIG and r.parent_uuid is None):
        return DeviceIdentity(uuid=r.key)
    if r.kind is Kind.MIG:  # MIG-GPU-<parent>/<gi>/<ci>: the MIG device's own UUID unknown
        return DeviceIdentity(
            gpu_instance=_text(r.gpu_instance), compute_instance=_text(r.compute_instance)
        )
    if r.kind in (Kind.GPU_INDEX, Kind.MIG_INDEX):
        return DeviceIdentity(gpu=_text(r.gpu_index), gpu_instance=_text(r.gpu_instance))
    if r.kind is Kind.PCI:
        return DeviceIdentity(address=r.key)
    if r.kind is Kind.DRM:
        return DeviceIdentity(card=r.key)
    return NONE
