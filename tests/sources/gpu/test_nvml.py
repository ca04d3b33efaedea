"""The NVML backend's life cycle (``sources/gpu/nvml.py``): no driver is no data, init
retried, NVML lost and found again, reads that never raise, close; and the real pynvml.
"""

from __future__ import annotations

import ctypes
import threading

import pynvml
import pytest
from structlog.testing import capture_logs

from podres_exporter.core.telemetry import GpuInventory
from podres_exporter.sources.gpu import NvmlBackend, open_nvml_backend
from podres_sim.nvml import FakeNvml
from tests.sources.gpu.support import (
    GPU_A,
    Clock,
    two_gpus,
)


def test_driver_missing_is_no_data_and_retried_later() -> None:
    """No driver: available=False without error; init is retried every init_retry_s."""
    clock = Clock()
    fake = FakeNvml(driver_missing=True)
    fake.add_gpu(GPU_A)
    backend = NvmlBackend(fake, init_retry_s=60, clock=clock)
    assert backend.read() == GpuInventory(available=False)
    fake.load_driver()
    clock.now += 30
    assert backend.read() == GpuInventory(available=False)
    assert fake.calls["nvmlInit"] == 1
    clock.now += 30
    inv = backend.read()
    assert fake.calls["nvmlInit"] == 2
    assert inv.available
    assert [g.uuid for g in inv.gpus] == [GPU_A]
    fake.emit_xid(GPU_A, 79)
    assert backend.read().gpus[0].xid_errors_total == {79: 1}


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_NO_PERMISSION]
)
def test_driver_not_loaded_or_no_permission_is_no_data(code: int) -> None:
    """DRIVER_NOT_LOADED and NO_PERMISSION at init mean no data, not an error."""
    inv = NvmlBackend(FakeNvml(init_error=code)).read()
    assert inv == GpuInventory(available=False)


def test_other_init_failure_is_reported() -> None:
    """Any other init failure: available=False with the error."""
    inv = NvmlBackend(FakeNvml(init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)).read()
    assert not inv.available
    assert inv.error is not None
    assert inv.error.startswith("nvmlInit: ")


def test_nvml_lost_mid_run_shuts_down_and_reinitialises() -> None:
    """NVML uninitialised under a read: no data with the error, then init again later."""
    clock = Clock()
    fake = two_gpus()
    backend = NvmlBackend(fake, init_retry_s=10, clock=clock)
    assert backend.read().available
    fake.set_error("nvmlDeviceGetCount", pynvml.NVML_ERROR_UNINITIALIZED)
    inv = backend.read()
    assert not inv.available
    assert inv.error is not None
    assert "nvmlDeviceGetCount" in inv.error
    assert fake.init_count == 0  # shut down
    fake.clear_error("nvmlDeviceGetCount")
    assert backend.read() == GpuInventory(available=False)  # not retried yet
    clock.now += 10
    assert len(backend.read().gpus) == 2
    assert fake.calls["nvmlInit"] == 2


def test_read_never_raises() -> None:
    """Anything unexpected under a read becomes an inventory error."""

    class ExplodingNvml(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise RuntimeError("boom")

    fake = ExplodingNvml(driver_version="550.1")
    inv = NvmlBackend(fake).read()
    assert inv == GpuInventory(available=True, driver_version="550.1", error="RuntimeError: boom")


def test_close_frees_the_event_set_and_shuts_down() -> None:
    """close() frees the event set and calls nvmlShutdown; later reads give no data."""
    fake = two_gpus()
    backend = NvmlBackend(fake)
    backend.read()
    backend.close()
    assert fake.calls["nvmlEventSetFree"] == 1
    assert fake.calls["nvmlShutdown"] == 1
    assert fake.init_count == 0
    inv = backend.read()
    assert not inv.available
    assert fake.calls["nvmlInit"] == 1
    backend.close()
    assert fake.calls["nvmlShutdown"] == 1


def test_close_gives_up_on_a_read_stuck_in_nvml() -> None:
    """A read stuck in a wedged driver: close() returns after close_wait_s, logs so, and
    the read, once NVML answers, finds the backend closed; nothing is shut down twice."""
    fake = two_gpus()
    backend = NvmlBackend(fake, close_wait_s=0.05)
    fake.hang()
    results: list[GpuInventory] = []
    reader = threading.Thread(target=lambda: results.append(backend.read()))
    reader.start()
    while not fake.blocked:  # the read is in: it waits at its first NVML call
        reader.join(0.01)
    with capture_logs() as logs:
        backend.close()
    assert reader.is_alive(), "the read is still stuck"
    assert [e["event"] for e in logs] == ["nvml_close_abandoned"]
    fake.release()
    reader.join(5)
    assert len(results) == 1
    assert not backend.read().available  # closed
    assert fake.calls["nvmlShutdown"] == 0


def test_close_without_driver_does_nothing() -> None:
    """close() on a backend that never initialised calls nothing."""
    fake = FakeNvml(driver_missing=True)
    NvmlBackend(fake).close()
    assert fake.calls["nvmlShutdown"] == 0


def _nvml_library_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_real_pynvml_without_a_driver_is_no_data() -> None:
    """On a machine without the NVML library, the real pynvml gives available=False."""
    backend = open_nvml_backend()
    try:
        inv = backend.read()
    finally:
        backend.close()
    if _nvml_library_present():
        assert inv.error is None or inv.available is False
    else:
        assert inv == GpuInventory(available=False)


def test_real_pynvml_module_injected_directly() -> None:
    """NvmlBackend(pynvml).read() does not raise, GPU or not."""
    backend = NvmlBackend(pynvml)
    inv = backend.read()
    backend.close()
    assert isinstance(inv, GpuInventory)
    if not _nvml_library_present():
        assert not inv.available
