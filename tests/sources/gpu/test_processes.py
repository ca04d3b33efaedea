"""Processes on a GPU (``sources/gpu/processes.py``): memory and utilisation samples
merged, samples only since the last read.
"""

from __future__ import annotations

from podres_exporter.core.telemetry import GpuProcess
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim.nvml import FakeNvml
from tests.sources.gpu.support import (
    GIB,
    GPU_A,
    GPU_B,
    by_uuid,
)


def test_processes_merge_memory_and_samples() -> None:
    """Compute processes and utilisation samples are merged per pid."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A)
    fake.add_process(GPU_A, 300, 2 * GIB)
    fake.add_process(GPU_A, 100, GIB)
    fake.add_process(GPU_A, 200, None)
    fake.add_sample(GPU_A, 100, sm_util=10, mem_util=5)
    fake.add_sample(GPU_A, 100, sm_util=60, mem_util=25)  # the newest sample wins
    fake.add_sample(GPU_A, 300, sm_util=30, mem_util=12)
    fake.add_sample(GPU_A, 999, sm_util=4, mem_util=1)  # a sample without a compute context
    (gpu,) = NvmlBackend(fake).read().gpus
    assert gpu.processes == (
        GpuProcess(pid=100, used_memory_bytes=GIB, sm_ratio=0.6, memory_ratio=0.25),
        GpuProcess(pid=200),
        GpuProcess(pid=300, used_memory_bytes=2 * GIB, sm_ratio=0.3, memory_ratio=0.12),
        GpuProcess(pid=999, sm_ratio=0.04, memory_ratio=0.01),
    )


def test_process_samples_only_since_the_last_read() -> None:
    """The newest sample timestamp is kept per device: old samples are not reused."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A)
    fake.add_gpu(GPU_B)
    fake.add_process(GPU_A, 100, GIB)
    fake.add_sample(GPU_A, 100, sm_util=50, mem_util=20)
    backend = NvmlBackend(fake)
    first = by_uuid(backend.read())[GPU_A].processes
    assert first == (GpuProcess(pid=100, used_memory_bytes=GIB, sm_ratio=0.5, memory_ratio=0.2),)
    second = by_uuid(backend.read())[GPU_A].processes
    assert second == (GpuProcess(pid=100, used_memory_bytes=GIB),)
    fake.add_sample(GPU_B, 7, sm_util=99, mem_util=99)  # another device's clock moves on
    fake.add_sample(GPU_A, 100, sm_util=70, mem_util=30)
    third = by_uuid(backend.read())
    assert third[GPU_A].processes == (
        GpuProcess(pid=100, used_memory_bytes=GIB, sm_ratio=0.7, memory_ratio=0.3),
    )
    assert third[GPU_B].processes == (GpuProcess(pid=7, sm_ratio=0.99, memory_ratio=0.99),)
