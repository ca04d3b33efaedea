"""The fields of the NVML result objects the backend reads.

Results are assigned to variables of these types, so mypy rejects a read of any other
field, and the conformance test checks every field here against the real pynvml
structure named in :data:`NVML_STRUCTS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Protocol

from podres_exporter.core.ids import normalize_pci

__all__ = [
    "NVML_STRUCTS",
    "EventData",
    "Memory",
    "PciInfo",
    "ProcessInfo",
    "ProcessSample",
    "Utilization",
    "pci_bus_id_from_nvml",
]


class Utilization(Protocol):
    gpu: int
    memory: int


class Memory(Protocol):
    total: int
    used: int


class PciInfo(Protocol):
    busId: str | bytes  # noqa: N815 - NVML's field name


class ProcessInfo(Protocol):
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - NVML's field name


class ProcessSample(Protocol):
    pid: int
    timeStamp: int  # noqa: N815 - NVML's field name
    smUtil: int  # noqa: N815 - NVML's field name
    memUtil: int  # noqa: N815 - NVML's field name


class EventData(Protocol):
    device: Any
    eventType: int  # noqa: N815 - NVML's field name
    eventData: int  # noqa: N815 - NVML's field name


NVML_STRUCTS: Final[Mapping[type, str]] = MappingProxyType(
    {
        Utilization: "c_nvmlUtilization_t",
        Memory: "c_nvmlMemory_t",
        PciInfo: "nvmlPciInfo_t",
        ProcessInfo: "c_nvmlProcessInfo_t",
        ProcessSample: "c_nvmlProcessUtilizationSample_t",
        EventData: "c_nvmlEventData_t",
    }
)
"""Each protocol above and the name of the real pynvml ctypes structure it reads."""


def pci_bus_id_from_nvml(bus_id: str | bytes) -> str | None:
    """NVML's ``"00000000:17:00.0"`` -> ``"0000:17:00.0"``; None if it is not a bus id."""
    text = bus_id.decode(errors="replace") if isinstance(bus_id, bytes) else bus_id
    return normalize_pci(text.strip("\x00 \n"))
