"""What real drivers answer that the fake did not model before, and the backend's answer.

Each case comes from NVML's API reference (no real driver was run): the memory query's
version 1 counts the driver's reserved memory as used, the device count includes GPUs
the process may not talk to (their handle lookup answers NO_PERMISSION), and older or
consumer boards answer NOT_SUPPORTED for whole families of queries.
"""

from __future__ import annotations

import pynvml
import pytest

from podres_exporter.sources.gpu import NvmlBackend
from podres_sim.nvml import FakeNvml
from tests.sources.gpu.support import GIB, GPU_A, GPU_B, GPU_M, MIG_1, by_uuid, mig_fake, two_gpus

MIB = 1 << 20


def test_memory_used_leaves_out_what_the_driver_reserves() -> None:
    """Memory used is the allocated memory (version 2), as nvidia-smi shows it, not the
    driver's reservation counted in."""
    fake = two_gpus()
    gpu = fake.gpu(GPU_A)
    gpu.memory_used, gpu.memory_reserved = 1 * GIB, 512 * MIB
    got = by_uuid(NvmlBackend(fake).read())[GPU_A]
    assert got.memory_used_bytes == 1 * GIB
    assert got.memory_total_bytes == gpu.memory_total


def test_memory_used_of_a_mig_device_leaves_out_the_reservation() -> None:
    """A MIG device's memory is read with version 2 too."""
    fake = mig_fake()
    fake.mig(MIG_1).memory_reserved = 64 * MIB
    got = by_uuid(NvmlBackend(fake).read())[MIG_1]
    assert got.memory_used_bytes == 3 * GIB


def test_a_driver_without_version_2_still_gives_memory() -> None:
    """An older driver (no nvmlDeviceGetMemoryInfo_v2): version 1's answer, reservation
    included, rather than no memory at all."""
    fake = two_gpus()
    fake.memory_info_v2 = False
    gpu = fake.gpu(GPU_A)
    gpu.memory_used, gpu.memory_reserved = 1 * GIB, 512 * MIB
    got = by_uuid(NvmlBackend(fake).read())[GPU_A]
    assert got.memory_used_bytes == 1 * GIB + 512 * MIB


def test_a_gpu_this_process_may_not_talk_to_is_left_out() -> None:
    """NVML counts a GPU whose handle lookup answers NO_PERMISSION: it is left out, not
    reported as a failed GPU, and the others are read."""
    fake = two_gpus()
    fake.break_gpu(GPU_B, pynvml.NVML_ERROR_NO_PERMISSION, handle=True)
    inventory = NvmlBackend(fake).read()
    assert [(g.uuid, g.healthy) for g in inventory.gpus] == [(GPU_A, True)]
    assert inventory.available and inventory.error is None


def test_a_gpu_permitted_again_is_read_again() -> None:
    """The same GPU, once its handle answers, is read as any other."""
    fake = two_gpus()
    fake.break_gpu(GPU_B, pynvml.NVML_ERROR_NO_PERMISSION, handle=True)
    backend = NvmlBackend(fake)
    backend.read()
    fake.heal_gpu(GPU_B)
    assert set(by_uuid(backend.read())) == {GPU_A, GPU_B}


@pytest.mark.parametrize(
    ("board", "absent"),
    [
        ("Tesla T4", {"remapped_rows_correctable", "mig_enabled"}),
        ("NVIDIA GeForce RTX 3090", {"ecc_corrected_total", "remapped_rows_pending"}),
        ("Tesla K80", {"energy_joules_total", "remapped_rows_failure"}),
    ],
)
def test_a_board_without_a_feature_gives_none_for_it(board: str, absent: set[str]) -> None:
    """The fake's older and consumer boards answer NOT_SUPPORTED where NVML documents it;
    the backend reads those fields as absent and the rest as usual."""
    fake = FakeNvml()
    fake.add_gpu(GPU_A, name=board)
    got = by_uuid(NvmlBackend(fake).read())[GPU_A]
    assert got.healthy
    for name in absent:
        assert getattr(got, name) is None, name
    assert got.power_watts is not None and got.temperature_celsius is not None


def test_an_unprivileged_reader_has_no_memory_of_a_mig_enabled_gpu() -> None:
    """NVML gives a MIG-enabled GPU's own memory only to a privileged caller: otherwise
    its memory is absent (not 0), and its MIG devices' memory is still read."""
    fake = mig_fake()
    fake.privileged = False
    got = by_uuid(NvmlBackend(fake).read())
    assert got[GPU_M].healthy
    assert got[GPU_M].memory_used_bytes is None and got[GPU_M].memory_total_bytes is None
    assert got[MIG_1].memory_used_bytes == 3 * GIB


def test_a_pynvml_whose_memory_query_takes_no_version_gives_version_1() -> None:
    """A pynvml that has the version constant but not the parameter: version 1's answer."""
    fake = two_gpus()
    fake.gpu(GPU_A).memory_used = 1 * GIB
    plain = fake.nvmlDeviceGetMemoryInfo

    def without_version(handle: object) -> object:
        return plain(handle)

    fake.nvmlDeviceGetMemoryInfo = without_version  # type: ignore[method-assign,assignment]
    assert by_uuid(NvmlBackend(fake).read())[GPU_A].memory_used_bytes == 1 * GIB
