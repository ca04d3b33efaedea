"""NVIDIA GPU telemetry through NVML (the ``pynvml`` module of ``nvidia-ml-py``).

The public face: the narrow contract the package reads GPUs by (:class:`GpuBackend`,
:data:`GpuTopology`, in :mod:`.protocol`), the NVML backend that implements it
(:class:`NvmlBackend`, :func:`open_nvml_backend`, in :mod:`.nvml`, whose docstring
gives its rules and the rooms of the rest), and the NVML structure fields it reads
(:data:`NVML_STRUCTS`, in :mod:`.structs`), which the simulator's fake is checked
against.
"""

from __future__ import annotations

from podres_exporter.sources.gpu.nvml import (
    DEFAULT_CLOSE_WAIT_S,
    DEFAULT_INIT_RETRY_S,
    NvmlBackend,
    open_nvml_backend,
)
from podres_exporter.sources.gpu.protocol import GpuBackend, GpuTopology
from podres_exporter.sources.gpu.structs import NVML_STRUCTS, pci_bus_id_from_nvml

__all__ = [
    "DEFAULT_CLOSE_WAIT_S",
    "DEFAULT_INIT_RETRY_S",
    "NVML_STRUCTS",
    "GpuBackend",
    "GpuTopology",
    "NvmlBackend",
    "open_nvml_backend",
    "pci_bus_id_from_nvml",
]
