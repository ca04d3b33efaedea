"""Container rows: CPUs, NUMA alignment, devices, memory and GPU columns."""

from __future__ import annotations

import pytest

from podres_exporter.top.rows import build
from tests.top.rows.support import row
from tests.top.samples import DEVICES, GPU_A, GPUS, NODE, TRAINER, VLLM_A, VLLM_B, reading, s


def test_container_row_cpus_numa_alignment_devices_and_memory() -> None:
    """A container's exclusive CPUs as ranges, its NUMA nodes, alignment, devices, memory."""
    data = build(
        reading(
            *NODE,
            s("podres_container_device_info", 1, resource="nvidia.com/gpu", device_id=GPU_A,
              numa_node="0", **TRAINER),
            s("podres_container_memory_bytes", 2**30, numa_node="0", memory_type="memory",
              **TRAINER),
            s("podres_container_memory_bytes", 2**30, numa_node="0", memory_type="hugepages-1Gi",
              **TRAINER),
            s("podres_container_numa_aligned", 0, **TRAINER),
        )
    )  # fmt: skip
    r = row(data, "train-0", "trainer")
    assert r.cpulist == "4-7,12" and r.cpus == (4, 5, 6, 7, 12)
    assert r.numa_nodes == ("0", "1") and r.aligned is False
    assert r.device_counts() == (("nvidia.com/gpu", 1),)
    assert dict(r.memory) == {"memory": 2**30, "hugepages-1Gi": 2**30}
    assert r.busy is None, "one reading: no busy share"


@pytest.mark.parametrize(
    ("holder", "util", "used", "total", "shared"),
    [
        # Whole GPU (its own series, not the holder share) plus a MIG instance (memory only).
        (TRAINER, 0.4, 35 * 2**30, 90 * 2**30, False),
        # Shares of a shared GPU: SM share and memory of its processes, the GPU's total.
        (VLLM_A, 0.07, 18 * 2**30, 80 * 2**30, True),
        (VLLM_B, None, 14 * 2**30, 80 * 2**30, True),
    ],
)
def test_gpu_columns_whole_shared_and_mig(
    holder: dict[str, str], util: float | None, used: float, total: float, shared: bool
) -> None:
    """GPU% and GPU MEM: holder-labelled series, or the holder's share of a shared GPU."""
    r = row(build(reading(*GPUS, *DEVICES)), holder["pod"], holder["container"])
    assert (r.gpu_util, r.gpu_mem_used, r.gpu_mem_total, r.gpu_shared) == (
        util, used, total, shared,
    )  # fmt: skip
