"""The narrow contract the rest of the package holds a GPU source by.

:class:`GpuBackend` is what the exporter and the device plugin read; :data:`GpuTopology`
what the device plugin places multi-GPU allocations by. The NVML backend
(:class:`~podres_exporter.sources.gpu.nvml.NvmlBackend`) implements both; the simulator
injects a fake pynvml into it rather than another backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from podres_exporter.core.telemetry import GpuInventory

__all__ = ["GpuBackend", "GpuTopology"]

GpuTopology = Mapping[tuple[str, str], int]
"""``{(uuid_a, uuid_b): distance}`` for GPU pairs, both orders; lower is closer (see
:mod:`~podres_exporter.sources.gpu.topology`)."""


class GpuBackend(Protocol):
    """A source of GPU readings. ``read`` never raises; ``close`` frees the source."""

    def read(self) -> GpuInventory: ...

    def close(self) -> None: ...
