"""The processes on a GPU or MIG device.

``nvmlDeviceGetComputeRunningProcesses`` (pid, memory) merged with
``nvmlDeviceGetProcessUtilization`` (SM and memory-controller shares); for each device
the newest sample per pid since the previous read is used, and the newest timestamp
seen is kept per device. A pid with a sample but no compute context (a graphics
client) is listed with its shares only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from podres_exporter.core.telemetry import GpuProcess
from podres_exporter.sources.gpu.calls import Nvml
from podres_exporter.sources.gpu.fields import ratio
from podres_exporter.sources.gpu.structs import ProcessInfo, ProcessSample

__all__ = ["ProcessSampler"]


class ProcessSampler:
    """Reads each device's processes, with the newest sample timestamp seen per device."""

    def __init__(self) -> None:
        self._sample_ts: dict[str, int] = {}  # device uuid -> newest sample timestamp (us)

    def clear(self) -> None:
        self._sample_ts.clear()

    def read(self, nvml: Nvml, handle: Any, uuid: str) -> tuple[GpuProcess, ...]:
        lib = nvml.lib
        running: Sequence[ProcessInfo] = (
            nvml.get(lib.nvmlDeviceGetComputeRunningProcesses, handle) or ()
        )
        samples: Sequence[ProcessSample] = (
            nvml.get(lib.nvmlDeviceGetProcessUtilization, handle, self._sample_ts.get(uuid, 0))
            or ()
        )
        newest: dict[int, ProcessSample] = {}
        for sample in samples:
            pid = int(sample.pid)
            if pid not in newest or sample.timeStamp > newest[pid].timeStamp:
                newest[pid] = sample
            self._sample_ts[uuid] = max(self._sample_ts.get(uuid, 0), int(sample.timeStamp))
        memory: dict[int, int | None] = {}
        for proc in running:  # a pid with several contexts is listed once, memory summed
            pid, used = int(proc.pid), proc.usedGpuMemory
            if used is None:
                memory.setdefault(pid, None)
            else:
                memory[pid] = (memory.get(pid) or 0) + int(used)
        out: list[GpuProcess] = []
        for pid in sorted(set(memory) | set(newest)):
            latest = newest.get(pid)
            out.append(
                GpuProcess(
                    pid=pid,
                    used_memory_bytes=memory.get(pid),
                    sm_ratio=None if latest is None else ratio(int(latest.smUtil)),
                    memory_ratio=None if latest is None else ratio(int(latest.memUtil)),
                )
            )
        return tuple(out)
