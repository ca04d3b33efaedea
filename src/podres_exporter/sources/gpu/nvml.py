"""The NVML backend: NVML's life cycle around one reading per poll.

:class:`NvmlBackend` is given the NVML module object: production passes the real
``pynvml`` (see :func:`open_nvml_backend`), tests pass a
:class:`~podres_sim.nvml.FakeNvml`. Only the public pynvml API is used: module
functions, ``NVML_*`` constants, ``NVMLError`` and its ``.value`` code.

The rules of :meth:`NvmlBackend.read`:

* No NVML library, no kernel driver, or no permission to open it at ``nvmlInit``:
  ``GpuInventory(available=False)``, "no data" rather than an error. Init is retried
  at most every ``init_retry_s`` seconds, so a driver that loads later is picked up.
  Any other init failure is the same with ``error`` set.
* Each GPU is read by :class:`~.reading.GpuReader`: a field NVML does not give is
  None, a GPU that fails is reported unhealthy while the others keep flowing.
* ``UNINITIALIZED``, ``DRIVER_NOT_LOADED`` or a library/driver version mismatch in the
  middle of a read: NVML is shut down and the read returns ``available=False`` with
  ``error`` set; init is retried as above.
* :meth:`NvmlBackend.read` never raises: anything unexpected becomes
  ``GpuInventory(error=...)``.

The rooms of the rest: :mod:`.calls` (what each NVML code means), :mod:`.fields`
(units and the slow fields), :mod:`.processes`, :mod:`.mig`, :mod:`.events` (XIDs) and
:mod:`.topology` (asked separately from ``read``, by the device plugin).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Final

import structlog

from podres_exporter.core.errors import SourceError
from podres_exporter.core.telemetry import GpuInventory
from podres_exporter.sources.gpu.calls import DeviceFailed, LibraryGone, Nvml, text
from podres_exporter.sources.gpu.protocol import GpuTopology
from podres_exporter.sources.gpu.reading import GpuReader
from podres_exporter.sources.gpu.topology import read_topology

__all__ = ["DEFAULT_CLOSE_WAIT_S", "DEFAULT_INIT_RETRY_S", "NvmlBackend", "open_nvml_backend"]

log = structlog.get_logger(__name__)

DEFAULT_INIT_RETRY_S: Final = 60.0
# How long close waits for a read in progress before it gives up on NVML's shutdown.
DEFAULT_CLOSE_WAIT_S: Final = 1.0


def open_nvml_backend(
    *,
    init_retry_s: float = DEFAULT_INIT_RETRY_S,
    clock: Callable[[], float] = time.monotonic,
    slow_interval_s: float = 0.0,
) -> NvmlBackend:
    """An :class:`NvmlBackend` on the real ``pynvml``, imported only now.

    Never fails for a missing driver (the backend reports ``available=False``);
    raises SourceError only when the ``nvidia-ml-py`` package is not installed.
    """
    try:
        import pynvml
    except ImportError as err:
        raise SourceError(f"cannot import pynvml (package nvidia-ml-py): {err}") from err
    return NvmlBackend(
        pynvml, init_retry_s=init_retry_s, clock=clock, slow_interval_s=slow_interval_s
    )


class NvmlBackend:
    """GPU readings from NVML; see the module docstring for the rules.

    ``nvml`` is the pynvml module (or a fake of it). ``init_retry_s`` is the least
    time between two ``nvmlInit`` attempts while NVML is unavailable; ``clock`` a
    monotonic clock in seconds; ``close_wait_s`` how long :meth:`close` waits for a
    read in progress; ``slow_interval_s`` the least time between two readings of a
    GPU's slow fields (0: every read). Init is first tried here; nothing here raises.
    Safe to call from several threads (reads are serialised).
    """

    def __init__(
        self,
        nvml: Any,
        *,
        init_retry_s: float = DEFAULT_INIT_RETRY_S,
        clock: Callable[[], float] = time.monotonic,
        close_wait_s: float = DEFAULT_CLOSE_WAIT_S,
        slow_interval_s: float = 0.0,
    ) -> None:
        self._nvml = Nvml(nvml)
        self._gpus = GpuReader(self._nvml, slow_interval_s, clock)
        self._close_wait_s = close_wait_s
        self._init_retry_s = init_retry_s
        self._clock = clock
        self._lock = threading.Lock()
        self._ready = False
        self._closed = False
        self._last_init: float | None = None
        self._init_error: str | None = None
        self._init_logged: str | None = None
        self._driver_version: str | None = None
        with self._lock:
            try:
                self._try_init()
            except Exception as err:  # noqa: BLE001 - constructing never fails; read() retries
                log.error("nvml_init_failed", error=repr(err))

    # ------------------------------------------------------------------ public

    def read(self) -> GpuInventory:
        """One reading of every GPU; never raises."""
        with self._lock:
            try:
                return self._read()
            except Exception as err:  # noqa: BLE001 - read() must never raise; it reports instead
                log.error("gpu_read_failed", error=repr(err))
                return GpuInventory(
                    available=self._ready,
                    driver_version=self._driver_version,
                    error=f"{type(err).__name__}: {err}",
                )

    def close(self) -> None:
        """Free the event set and shut NVML down; later reads return no data.

        A read stuck in NVML (a wedged driver) holds the backend: after ``close_wait_s``
        close gives up on shutting NVML down, logs so and returns, so that the process
        can still stop on time."""
        self._closed = True
        if not self._lock.acquire(timeout=self._close_wait_s):
            log.warning(
                "nvml_close_abandoned",
                reason="an NVML call is still running",
                waited_s=self._close_wait_s,
            )
            return
        try:
            self._teardown()
        finally:
            self._lock.release()

    def topology(self) -> GpuTopology:
        """How close each pair of whole GPUs is (see :mod:`.topology`); never raises.

        Empty when NVML is unavailable; a pair NVML cannot place is left out.
        """
        with self._lock:
            try:
                if self._closed or not self._try_init():
                    return MappingProxyType({})
                return read_topology(self._nvml)
            except Exception as err:  # noqa: BLE001 - like read(): report, never raise
                log.warning("gpu_topology_failed", error=repr(err))
                return MappingProxyType({})

    # ----------------------------------------------------------- init and teardown

    def _try_init(self) -> bool:
        """Initialise NVML unless tried less than ``init_retry_s`` ago; True when ready."""
        if self._ready:
            return True
        now = self._clock()
        if self._last_init is not None and now - self._last_init < self._init_retry_s:
            return False
        self._last_init = now
        nvml = self._nvml
        try:
            nvml.lib.nvmlInit()
        except nvml.error as err:
            code = getattr(err, "value", None)
            message = f"nvmlInit: {err}"
            absent = code in nvml.codes.absent_at_init
            self._init_error = None if absent else message
            if message != self._init_logged:  # once per distinct cause, not every retry
                self._init_logged = message
                report = log.info if absent else log.warning
                report("nvml_unavailable", error=message, retry_s=self._init_retry_s)
            return False
        self._init_logged = None
        self._ready = True
        self._init_error = None
        try:
            self._driver_version = text(nvml.lib.nvmlSystemGetDriverVersion())
        except nvml.error:
            self._driver_version = None
        self._gpus.tracking.events.open(nvml)
        log.info("nvml_initialised", driver_version=self._driver_version)
        return True

    def _teardown(self) -> None:
        """Free the event set and shut NVML down, ignoring errors (it may be gone)."""
        self._gpus.slow.clear()
        nvml = self._nvml
        events, processes = self._gpus.tracking
        if self._ready:
            events.free(nvml)
            try:
                nvml.lib.nvmlShutdown()
            except nvml.error as err:
                log.debug("nvml_shutdown_failed", error=str(err))
        self._ready = False
        events.forget()
        processes.clear()

    # -------------------------------------------------------------------- reading

    def _read(self) -> GpuInventory:
        if self._closed:
            return GpuInventory(available=False, error="the GPU backend is closed")
        if not self._try_init():
            return GpuInventory(available=False, error=self._init_error)
        try:
            return self._gpus.read(self._driver_version)
        except LibraryGone as err:
            log.warning("nvml_lost", error=str(err))
            self._teardown()
            self._last_init = self._clock()
            return GpuInventory(available=False, error=str(err))
        except DeviceFailed as err:  # from a query that is not about one GPU
            return GpuInventory(available=True, driver_version=self._driver_version, error=str(err))
