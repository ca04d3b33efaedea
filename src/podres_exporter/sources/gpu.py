"""NVIDIA GPU telemetry through NVML (the ``pynvml`` module of ``nvidia-ml-py``).

:class:`NvmlBackend` is given the NVML module object: production passes the real
``pynvml`` (see :func:`open_nvml_backend`), tests pass a
:class:`~podres_sim.nvml.FakeNvml`. Only the public pynvml API is
used: module functions, ``NVML_*`` constants, ``NVMLError`` and its ``.value`` code.

What one :meth:`NvmlBackend.read` returns, and the rules it follows:

* No NVML library, no kernel driver, or no permission to open it at ``nvmlInit``:
  ``GpuInventory(available=False)``, "no data" rather than an error. Init is
  retried at most every ``init_retry_s`` seconds, so a driver that loads later is
  picked up. Any other init failure is the same with ``error`` set.
* Every query is guarded on its own. ``NOT_SUPPORTED``, ``NO_PERMISSION``,
  ``FUNCTION_NOT_FOUND`` (an older driver), ``NOT_FOUND``, ``NO_DATA``: that field
  is None. ``GPU_IS_LOST``, ``TIMEOUT``, ``UNKNOWN``, ``RESET_REQUIRED``,
  ``IRQ_ISSUE``, or no handle for the index: that GPU (and its MIG instances) is
  reported ``healthy=False`` with ``error`` set and no metric fields; the other
  GPUs keep flowing, and the GPU is healthy again on the first read that works.
* ``UNINITIALIZED``, ``DRIVER_NOT_LOADED`` or a library/driver version mismatch in
  the middle of a read: NVML is shut down and the read returns
  ``available=False`` with ``error`` set; init is retried as above.
* :meth:`NvmlBackend.read` never raises: anything unexpected becomes
  ``GpuInventory(error=...)``.

Units: utilisation as ratios (NVML: percent); power in W (mW); energy in J (mJ,
a counter since the driver loaded); clocks in Hz (MHz); PCIe throughput in bytes
per second (NVML: KB/s, 1 KB = 1024 bytes, as NVML counts its other sizes);
temperature of the GPU sensor in degrees Celsius. The power limit is the
enforced one (``nvmlDeviceGetEnforcedPowerLimit``): the one the GPU obeys.
ECC totals are the AGGREGATE counters (lifetime of the board, kept in the
infoROM), not the VOLATILE ones (since the last driver load), so they survive
reboots and driver reloads and a rise always means a new error. ECC, remapped
rows and MIG mode are None on boards that do not have them.

XID errors: one NVML event set, registered for ``nvmlEventTypeXidCriticalError``
on every GPU at init (and on any GPU that could not be registered then, at the
next read that reaches it), drained without blocking (timeout 0) at each read.
Counts accumulate per GPU (a MIG instance's XIDs count on its parent) and per
XID code for the life of the backend.

Processes: ``nvmlDeviceGetComputeRunningProcesses`` (pid, memory) merged with
``nvmlDeviceGetProcessUtilization`` (SM and memory-controller shares); for each
device the newest sample per pid since the previous read is used, and the
newest timestamp seen is kept per device. A pid with a sample but no compute
context (a graphics client) is listed with its shares only.

MIG: a GPU with MIG mode enabled is reported with its board-level fields (power,
energy, temperature, clocks, ECC, PCIe, XIDs) and no processes; each MIG device
becomes its own reading with ``parent_uuid``, the GPU- and compute-instance ids,
its memory, utilisation when NVML gives it (it usually answers NOT_SUPPORTED on
MIG devices) and its processes. Board-level fields are not asked of MIG devices,
so per-pod sums of power or energy cannot count a board twice.

``nvmlDeviceGetPcieThroughput`` samples for about 20 ms in the driver, twice per
GPU, so a read of 8 GPUs takes a few hundred milliseconds. It and the fields that
rarely change (ECC totals, remapped rows, the enforced power limit: infoROM and
firmware queries) are read per GPU at most every ``slow_interval_s``
(``--source-interval.gpu-slow``); reads between serve their last values.

Topology (:meth:`NvmlBackend.topology`, asked separately from ``read``, e.g. by the
device plugin to place multi-GPU allocations): for each pair of whole GPUs, NVML's
common-ancestor level (``nvmlDeviceGetTopologyCommonAncestor``: INTERNAL 0, SINGLE
10, MULTIPLE 20, HOSTBRIDGE 30, NODE 40, SYSTEM 50; lower is closer), replaced by
minus the number of active NVLinks between them where there are any
(``nvmlDeviceGetNvLinkState`` and ``nvmlDeviceGetNvLinkRemotePciInfo`` per link),
so an NVLink pair is closer than any PCIe path and more links are closer still.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final, Protocol

import structlog

from podres_exporter.core.errors import SourceError
from podres_exporter.core.ids import normalize_pci
from podres_exporter.core.telemetry import CLOCK_EVENT_REASONS, GpuInventory, GpuProcess, GpuReading

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

log = structlog.get_logger(__name__)

DEFAULT_INIT_RETRY_S: Final = 60.0
# How long close waits for a read in progress before it gives up on NVML's shutdown.
DEFAULT_CLOSE_WAIT_S: Final = 1.0
# At most this many events are taken off the event set per read, so a flood of
# events cannot stall a read.
_MAX_EVENTS_PER_READ: Final = 4096

# The NVML bit of each of CLOCK_EVENT_REASONS, in its order: (event constant, older
# throttle constant). pynvml renamed "ClocksThrottleReason" to "ClocksEventReason"; both
# carry the same bits.
_CLOCK_EVENT_REASONS: Final[tuple[tuple[str, str, str], ...]] = tuple(
    (event, throttle, short)
    for short, (event, throttle) in zip(
        CLOCK_EVENT_REASONS,
        (
            ("nvmlClocksEventReasonGpuIdle", "nvmlClocksThrottleReasonGpuIdle"),
            (
                "nvmlClocksEventReasonApplicationsClocksSetting",
                "nvmlClocksThrottleReasonApplicationsClocksSetting",
            ),
            ("nvmlClocksEventReasonSwPowerCap", "nvmlClocksThrottleReasonSwPowerCap"),
            ("nvmlClocksEventReasonHwSlowdown", "nvmlClocksThrottleReasonHwSlowdown"),
            ("nvmlClocksEventReasonSyncBoost", "nvmlClocksThrottleReasonSyncBoost"),
            ("nvmlClocksEventReasonSwThermalSlowdown", "nvmlClocksThrottleReasonSwThermalSlowdown"),
            ("nvmlClocksEventReasonHwThermalSlowdown", "nvmlClocksThrottleReasonHwThermalSlowdown"),
            (
                "nvmlClocksEventReasonHwPowerBrakeSlowdown",
                "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
            ),
            (
                "nvmlClocksEventReasonDisplayClockSetting",
                "nvmlClocksThrottleReasonDisplayClockSetting",
            ),
        ),
        strict=True,
    )
)


# --------------------------------------------------------------- NVML structures
# The fields of the NVML result objects this module reads. Results are assigned to
# variables of these types, so mypy rejects a read of any other field, and the
# conformance test checks every field here against the real pynvml structure
# named in NVML_STRUCTS.


class _Utilization(Protocol):
    gpu: int
    memory: int


class _Memory(Protocol):
    total: int
    used: int


class _PciInfo(Protocol):
    busId: str | bytes  # noqa: N815 - NVML's field name


class _ProcessInfo(Protocol):
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - NVML's field name


class _ProcessSample(Protocol):
    pid: int
    timeStamp: int  # noqa: N815 - NVML's field name
    smUtil: int  # noqa: N815 - NVML's field name
    memUtil: int  # noqa: N815 - NVML's field name


class _EventData(Protocol):
    device: Any
    eventType: int  # noqa: N815 - NVML's field name
    eventData: int  # noqa: N815 - NVML's field name


NVML_STRUCTS: Final[Mapping[type, str]] = MappingProxyType(
    {
        _Utilization: "c_nvmlUtilization_t",
        _Memory: "c_nvmlMemory_t",
        _PciInfo: "nvmlPciInfo_t",
        _ProcessInfo: "c_nvmlProcessInfo_t",
        _ProcessSample: "c_nvmlProcessUtilizationSample_t",
        _EventData: "c_nvmlEventData_t",
    }
)
"""Each protocol above and the name of the real pynvml ctypes structure it reads."""


# ------------------------------------------------------------------------ public

GpuTopology = Mapping[tuple[str, str], int]
"""``{(uuid_a, uuid_b): distance}`` for GPU pairs, both orders; lower is closer (see above)."""


class GpuBackend(Protocol):
    """A source of GPU readings. ``read`` never raises; ``close`` frees the source."""

    def read(self) -> GpuInventory: ...

    def close(self) -> None: ...


def pci_bus_id_from_nvml(bus_id: str | bytes) -> str | None:
    """NVML's ``"00000000:17:00.0"`` -> ``"0000:17:00.0"``; None if it is not a bus id."""
    text = bus_id.decode(errors="replace") if isinstance(bus_id, bytes) else bus_id
    return normalize_pci(text.strip("\x00 \n"))


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


# ----------------------------------------------------------------------- private


@dataclass(frozen=True, slots=True)
class _Slow:
    """A GPU's fields read at most every ``slow_interval_s``."""

    power_limit_watts: float | None
    pcie_tx_bytes_per_second: float | None
    pcie_rx_bytes_per_second: float | None
    ecc_corrected_total: int | None
    ecc_uncorrected_total: int | None
    remapped_rows: Sequence[int] | None


class _DeviceFailed(Exception):
    """A query said the device is gone or hung: the device is reported unhealthy."""


class _LibraryGone(Exception):
    """A query said NVML itself is unusable (uninitialised, driver unloaded)."""


@dataclass(frozen=True, slots=True)
class _Identity:
    """What stays true of a GPU while the driver is loaded; kept to name a lost GPU."""

    uuid: str
    name: str = ""
    pci_bus_id: str | None = None
    numa_node: int | None = None


@dataclass(frozen=True, slots=True)
class _MigIdentity:
    uuid: str
    name: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(slots=True)
class _Codes:
    """NVML return codes by what they mean to this backend."""

    absent: frozenset[int] = field(default_factory=frozenset)
    device_fatal: frozenset[int] = field(default_factory=frozenset)
    library_gone: frozenset[int] = field(default_factory=frozenset)
    absent_at_init: frozenset[int] = field(default_factory=frozenset)


def _codes(nvml: Any) -> _Codes:
    return _Codes(
        absent=frozenset(
            {
                nvml.NVML_SUCCESS,  # pynvml raises it when a sample query finds nothing
                nvml.NVML_ERROR_NOT_SUPPORTED,
                nvml.NVML_ERROR_NO_PERMISSION,
                nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                nvml.NVML_ERROR_NOT_FOUND,
                nvml.NVML_ERROR_NO_DATA,
            }
        ),
        device_fatal=frozenset(
            {
                nvml.NVML_ERROR_GPU_IS_LOST,
                nvml.NVML_ERROR_TIMEOUT,
                nvml.NVML_ERROR_UNKNOWN,
                nvml.NVML_ERROR_RESET_REQUIRED,
                nvml.NVML_ERROR_IRQ_ISSUE,
            }
        ),
        library_gone=frozenset(
            {
                nvml.NVML_ERROR_UNINITIALIZED,
                nvml.NVML_ERROR_DRIVER_NOT_LOADED,
                nvml.NVML_ERROR_LIBRARY_NOT_FOUND,
                nvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
            }
        ),
        absent_at_init=frozenset(
            {
                nvml.NVML_ERROR_LIBRARY_NOT_FOUND,
                nvml.NVML_ERROR_DRIVER_NOT_LOADED,
                nvml.NVML_ERROR_NO_PERMISSION,
            }
        ),
    )


def _handle_key(handle: Any) -> Hashable:
    """A key equal for two handles of the same device (ctypes pointers compare by address)."""
    if isinstance(handle, ctypes._Pointer):
        return ("nvml-device", ctypes.cast(handle, ctypes.c_void_p).value)
    if isinstance(handle, Hashable):
        return handle
    return ("object", id(handle))


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _ratio(percent: int | None) -> float | None:
    return None if percent is None else percent / 100.0


def _scaled(value: int | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _milli(value: int | None) -> float | None:
    """mW -> W, mJ -> J (a division, so 1500 mW is exactly 1.5 W)."""
    return None if value is None else value / 1000


def _fn_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__name__", "nvml"))


def _unhealthy(index: int, ident: _Identity, error: str, xids: Mapping[int, int]) -> GpuReading:
    return GpuReading(
        uuid=ident.uuid,
        index=index,
        name=ident.name,
        pci_bus_id=ident.pci_bus_id,
        numa_node=ident.numa_node,
        healthy=False,
        error=error,
        xid_errors_total=xids,
    )


def _mig_reading(index: int, parent: _Identity, mig: _MigIdentity) -> GpuReading:
    """A MIG instance with no readings yet: its own ids, its parent GPU's index and placement."""
    return GpuReading(
        uuid=mig.uuid,
        index=index,
        name=mig.name,
        pci_bus_id=parent.pci_bus_id,
        numa_node=parent.numa_node,
        parent_uuid=parent.uuid,
        gpu_instance_id=mig.gpu_instance_id,
        compute_instance_id=mig.compute_instance_id,
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
        self._nvml = nvml
        self._slow_interval_s = slow_interval_s
        self._slow: dict[str, tuple[float, _Slow]] = {}  # uuid -> (when read, slow fields)
        self._close_wait_s = close_wait_s
        self._error: type[Exception] = nvml.NVMLError
        # pynvml raises this (not an NVMLError) from unversioned functions whose
        # newest version the driver lacks; treated like FUNCTION_NOT_FOUND.
        self._mismatch: type[Exception] = getattr(nvml, "NVMLLibraryMismatchError", self._error)
        self._codes = _codes(nvml)
        self._init_retry_s = init_retry_s
        self._clock = clock
        self._lock = threading.Lock()
        self._ready = False
        self._closed = False
        self._last_init: float | None = None
        self._init_error: str | None = None
        self._init_logged: str | None = None
        self._driver_version: str | None = None
        self._event_set: Any = None
        self._xid_registered: dict[str, bool] = {}  # uuid -> registered (False: unsupported)
        self._key_to_uuid: dict[Hashable, str] = {}  # device handle key -> GPU uuid
        self._xids: dict[str, dict[int, int]] = {}  # GPU uuid -> XID code -> count
        self._sample_ts: dict[str, int] = {}  # device uuid -> newest sample timestamp (us)
        self._by_index: dict[int, _Identity] = {}
        self._identity: dict[str, _Identity] = {}  # uuid -> complete identity
        self._migs: dict[str, tuple[_MigIdentity, ...]] = {}  # parent uuid -> its MIG devices
        self._failing: set[str] = set()  # devices reported unhealthy by the last read
        self._warned: set[tuple[str, int]] = set()
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
        """How close each pair of whole GPUs is (see the module docstring); never raises.

        Empty when NVML is unavailable; a pair NVML cannot place is left out.
        """
        with self._lock:
            try:
                if self._closed or not self._try_init():
                    return MappingProxyType({})
                return self._topology()
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
            nvml.nvmlInit()
        except self._error as err:
            code = getattr(err, "value", None)
            message = f"nvmlInit: {err}"
            absent = code in self._codes.absent_at_init
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
            self._driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        except self._error:
            self._driver_version = None
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except self._error as err:
            log.warning("nvml_event_set_unavailable", error=str(err))
            self._event_set = None
        self._register_all()
        log.info("nvml_initialised", driver_version=self._driver_version)
        return True

    def _register_all(self) -> None:
        """Register every GPU for XID events (best effort: reads retry the rest)."""
        nvml = self._nvml
        if self._event_set is None:
            return
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except self._error:
            return
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except self._error:
                continue
            self._register_xid(handle, uuid)

    def _register_xid(self, handle: Any, uuid: str) -> None:
        nvml = self._nvml
        if self._event_set is None or uuid in self._xid_registered:
            return
        try:
            nvml.nvmlDeviceRegisterEvents(
                handle, nvml.nvmlEventTypeXidCriticalError, self._event_set
            )
        except self._error as err:
            if getattr(err, "value", None) in self._codes.absent:
                self._xid_registered[uuid] = False
            return
        self._xid_registered[uuid] = True

    def _teardown(self) -> None:
        """Free the event set and shut NVML down, ignoring errors (it may be gone)."""
        self._slow.clear()
        nvml = self._nvml
        if self._ready:
            if self._event_set is not None:
                try:
                    nvml.nvmlEventSetFree(self._event_set)
                except self._error as err:
                    log.debug("nvml_event_set_free_failed", error=str(err))
            try:
                nvml.nvmlShutdown()
            except self._error as err:
                log.debug("nvml_shutdown_failed", error=str(err))
        self._ready = False
        self._event_set = None
        self._xid_registered.clear()
        self._key_to_uuid.clear()
        self._sample_ts.clear()

    # -------------------------------------------------------------------- reading

    def _read(self) -> GpuInventory:
        if self._closed:
            return GpuInventory(available=False, error="the GPU backend is closed")
        if not self._try_init():
            return GpuInventory(available=False, error=self._init_error)
        try:
            return self._read_ready()
        except _LibraryGone as err:
            log.warning("nvml_lost", error=str(err))
            self._teardown()
            self._last_init = self._clock()
            return GpuInventory(available=False, error=str(err))
        except _DeviceFailed as err:  # from a query that is not about one GPU
            return GpuInventory(available=True, driver_version=self._driver_version, error=str(err))

    def _read_ready(self) -> GpuInventory:
        count = self._get(self._nvml.nvmlDeviceGetCount)
        if count is None:
            raise _LibraryGone("nvmlDeviceGetCount answered nothing")
        self._drain_events()
        readings: list[GpuReading] = []
        failing: set[str] = set()
        for index in range(int(count)):
            gpu = self._read_gpu(index)
            readings.extend(gpu)
            failing.update(r.uuid or f"index {r.index}" for r in gpu if not r.healthy)
        for key in sorted(failing - self._failing):
            log.warning("gpu_unhealthy", device=key)
        for key in sorted(self._failing - failing):
            log.info("gpu_recovered", device=key)
        self._failing = failing
        return GpuInventory(
            available=int(count) > 0,
            driver_version=self._driver_version,
            gpus=tuple(readings),
        )

    def _topology(self) -> GpuTopology:
        nvml = self._nvml
        gpus: list[tuple[str, Any, str | None]] = []  # (uuid, handle, PCI address)
        for index in range(self._get_int(nvml.nvmlDeviceGetCount) or 0):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                pci: _PciInfo | None = self._get(nvml.nvmlDeviceGetPciInfo, handle)
            except (self._error, _DeviceFailed):
                continue  # a lost GPU has no place in the topology
            gpus.append((uuid, handle, None if pci is None else pci_bus_id_from_nvml(pci.busId)))
        by_address = {address: uuid for uuid, _, address in gpus if address is not None}
        out: dict[tuple[str, str], int] = {}
        for i, (uuid_a, handle_a, _) in enumerate(gpus):
            for uuid_b, handle_b, _ in gpus[i + 1 :]:
                try:
                    level = self._get_int(
                        nvml.nvmlDeviceGetTopologyCommonAncestor, handle_a, handle_b
                    )
                except _DeviceFailed:
                    continue
                if level is not None:
                    out[(uuid_a, uuid_b)] = out[(uuid_b, uuid_a)] = level
        for uuid_a, handle_a, _ in gpus:
            try:
                peers = self._nvlink_peers(handle_a)
            except _DeviceFailed:
                continue
            for address, links in peers.items():
                peer = by_address.get(address)
                if peer is not None and peer != uuid_a:
                    out[(uuid_a, peer)] = out[(peer, uuid_a)] = -links
        return MappingProxyType(out)

    def _nvlink_peers(self, handle: Any) -> dict[str, int]:
        """PCI address of each NVLink peer -> active links to it (empty without NVLink)."""
        nvml = self._nvml
        peers: dict[str, int] = {}
        for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
            try:
                if int(nvml.nvmlDeviceGetNvLinkState(handle, link)) != nvml.NVML_FEATURE_ENABLED:
                    continue
                remote: _PciInfo = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
            except self._error as err:
                code = getattr(err, "value", None)
                if code in self._codes.library_gone:
                    raise _LibraryGone(f"nvmlDeviceGetNvLinkState: {err}") from err
                if code in self._codes.device_fatal:
                    raise _DeviceFailed(f"nvmlDeviceGetNvLinkState: {err}") from err
                if code == nvml.NVML_ERROR_NOT_SUPPORTED:
                    break  # a board without NVLink
                continue  # INVALID_ARGUMENT: no such link on this board
            except self._mismatch:
                break
            address = pci_bus_id_from_nvml(remote.busId)
            if address is not None:
                peers[address] = peers.get(address, 0) + 1
        return peers

    def _get(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None when NVML says the value is not there.

        Raises _DeviceFailed / _LibraryGone for the codes that mean so.
        """
        try:
            return fn(*args)
        except self._error as err:
            code = getattr(err, "value", None)
            name = _fn_name(fn)
            if code in self._codes.absent:
                return None
            if code in self._codes.device_fatal:
                raise _DeviceFailed(f"{name}: {err}") from err
            if code in self._codes.library_gone:
                raise _LibraryGone(f"{name}: {err}") from err
            if isinstance(code, int) and (name, code) not in self._warned:
                self._warned.add((name, code))
                log.warning("nvml_query_failed", function=name, code=code, error=str(err))
            return None
        except self._mismatch:
            return None

    def _get_int(self, fn: Callable[..., Any], *args: Any) -> int | None:
        value = self._get(fn, *args)
        return None if value is None else int(value)

    def _drain_events(self) -> None:
        nvml = self._nvml
        if self._event_set is None:
            return
        xid_mask = int(nvml.nvmlEventTypeXidCriticalError)
        for _ in range(_MAX_EVENTS_PER_READ):
            try:
                data: _EventData = nvml.nvmlEventSetWait(self._event_set, 0)
            except self._error as err:
                code = getattr(err, "value", None)
                if code in self._codes.library_gone:
                    raise _LibraryGone(f"nvmlEventSetWait: {err}") from err
                if code != nvml.NVML_ERROR_TIMEOUT:  # TIMEOUT: no more events
                    log.debug("nvml_event_wait_failed", error=str(err))
                return
            if not int(data.eventType) & xid_mask:
                continue
            uuid = self._event_uuid(data.device)
            if uuid is None:
                log.warning("nvml_xid_unattributed", xid=int(data.eventData))
                continue
            counts = self._xids.setdefault(uuid, {})
            xid = int(data.eventData)
            counts[xid] = counts.get(xid, 0) + 1

    def _event_uuid(self, device: Any) -> str | None:
        uuid = self._key_to_uuid.get(_handle_key(device))
        if uuid is not None:
            return uuid
        try:
            uuid = _text(self._nvml.nvmlDeviceGetUUID(device))
        except self._error:
            return None
        for parent, migs in self._migs.items():
            if any(m.uuid == uuid for m in migs):
                return parent
        return uuid

    def _xids_of(self, uuid: str) -> Mapping[int, int]:
        return MappingProxyType(dict(sorted(self._xids.get(uuid, {}).items())))

    def _read_gpu(self, index: int) -> list[GpuReading]:
        """The GPU at ``index`` and its MIG devices (unhealthy readings when it fails)."""
        nvml = self._nvml
        ident = self._by_index.get(index, _Identity(uuid=""))
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except self._error as err:
            if getattr(err, "value", None) in self._codes.library_gone:
                raise _LibraryGone(f"nvmlDeviceGetHandleByIndex: {err}") from err
            return self._unhealthy_gpu(index, ident, f"nvmlDeviceGetHandleByIndex: {err}")
        try:
            uuid = self._get(nvml.nvmlDeviceGetUUID, handle)
            if uuid is None:
                raise _DeviceFailed("nvmlDeviceGetUUID answered nothing")
            ident = self._identify(handle, index, _text(uuid))
            return self._read_healthy_gpu(handle, index, ident)
        except _DeviceFailed as err:
            return self._unhealthy_gpu(index, ident, str(err))

    def _unhealthy_gpu(self, index: int, ident: _Identity, error: str) -> list[GpuReading]:
        out = [_unhealthy(index, ident, error, self._xids_of(ident.uuid))]
        for mig in self._migs.get(ident.uuid, ()) if ident.uuid else ():
            out.append(replace(_mig_reading(index, ident, mig), healthy=False, error=error))
        return out

    def _identify(self, handle: Any, index: int, uuid: str) -> _Identity:
        """The GPU's name, PCI address and NUMA node: asked once per UUID, then kept."""
        ident = self._identity.get(uuid)
        if ident is None:
            nvml = self._nvml
            name = self._get(nvml.nvmlDeviceGetName, handle)
            pci: _PciInfo | None = self._get(nvml.nvmlDeviceGetPciInfo, handle)
            numa: int | None = None
            numa_fn = getattr(nvml, "nvmlDeviceGetNumaNodeId", None)
            if numa_fn is not None:
                numa = self._get_int(numa_fn, handle)
            ident = _Identity(
                uuid=uuid,
                name="" if name is None else _text(name),
                pci_bus_id=None if pci is None else pci_bus_id_from_nvml(pci.busId),
                numa_node=numa if numa is not None and numa >= 0 else None,
            )
            self._identity[uuid] = ident
        self._by_index[index] = ident
        self._key_to_uuid[_handle_key(handle)] = uuid
        self._register_xid(handle, uuid)
        return ident

    def _read_healthy_gpu(self, handle: Any, index: int, ident: _Identity) -> list[GpuReading]:
        nvml = self._nvml
        mig_mode = self._get(nvml.nvmlDeviceGetMigMode, handle)
        mig_enabled = None if mig_mode is None else int(mig_mode[0]) == nvml.NVML_DEVICE_MIG_ENABLE
        util: _Utilization | None = self._get(nvml.nvmlDeviceGetUtilizationRates, handle)
        mem: _Memory | None = self._get(nvml.nvmlDeviceGetMemoryInfo, handle)
        slow = self._slow_fields(handle, ident.uuid)
        rows = slow.remapped_rows
        gpu = GpuReading(
            uuid=ident.uuid,
            index=index,
            name=ident.name,
            pci_bus_id=ident.pci_bus_id,
            numa_node=ident.numa_node,
            mig_enabled=mig_enabled,
            utilization_gpu_ratio=None if util is None else _ratio(util.gpu),
            utilization_memory_ratio=None if util is None else _ratio(util.memory),
            memory_used_bytes=None if mem is None else int(mem.used),
            memory_total_bytes=None if mem is None else int(mem.total),
            power_watts=_milli(self._get_int(nvml.nvmlDeviceGetPowerUsage, handle)),
            power_limit_watts=slow.power_limit_watts,
            energy_joules_total=_milli(
                self._get_int(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            ),
            temperature_celsius=_scaled(
                self._get_int(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
                1.0,
            ),
            sm_clock_hz=_scaled(
                self._get_int(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM), 1e6
            ),
            memory_clock_hz=_scaled(
                self._get_int(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM), 1e6
            ),
            clock_event_reasons=self._clock_event_reasons(handle),
            pcie_tx_bytes_per_second=slow.pcie_tx_bytes_per_second,
            pcie_rx_bytes_per_second=slow.pcie_rx_bytes_per_second,
            ecc_corrected_total=slow.ecc_corrected_total,
            ecc_uncorrected_total=slow.ecc_uncorrected_total,
            remapped_rows_correctable=None if rows is None else int(rows[0]),
            remapped_rows_uncorrectable=None if rows is None else int(rows[1]),
            remapped_rows_pending=None if rows is None else bool(rows[2]),
            remapped_rows_failure=None if rows is None else bool(rows[3]),
            xid_errors_total=self._xids_of(ident.uuid),
            processes=() if mig_enabled else self._processes(handle, ident.uuid),
        )
        if not mig_enabled:
            self._migs.pop(ident.uuid, None)
            return [gpu]
        return [gpu, *self._read_migs(handle, index, ident)]

    def _slow_fields(self, handle: Any, uuid: str) -> _Slow:
        """The GPU's slow fields, read again only when ``slow_interval_s`` has passed."""
        now = self._clock()
        last = self._slow.get(uuid)
        if last is not None and now - last[0] < self._slow_interval_s:
            return last[1]
        nvml = self._nvml
        ecc = (nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        ecc_corrected, ecc_uncorrected = (
            self._get_int(nvml.nvmlDeviceGetTotalEccErrors, handle, t, nvml.NVML_AGGREGATE_ECC)
            for t in ecc
        )
        pcie = (nvml.NVML_PCIE_UTIL_TX_BYTES, nvml.NVML_PCIE_UTIL_RX_BYTES)
        tx, rx = (
            _scaled(self._get_int(nvml.nvmlDeviceGetPcieThroughput, handle, d), 1024.0)
            for d in pcie
        )
        slow = _Slow(
            power_limit_watts=_milli(self._get_int(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)),
            pcie_tx_bytes_per_second=tx,
            pcie_rx_bytes_per_second=rx,
            ecc_corrected_total=ecc_corrected,
            ecc_uncorrected_total=ecc_uncorrected,
            remapped_rows=self._get(nvml.nvmlDeviceGetRemappedRows, handle),
        )
        self._slow[uuid] = (now, slow)
        return slow

    def _clock_event_reasons(self, handle: Any) -> tuple[str, ...] | None:
        nvml = self._nvml
        fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        mask = None if fn is None else self._get_int(fn, handle)
        if mask is None:
            fallback = getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
            mask = None if fallback is None else self._get_int(fallback, handle)
        if mask is None:
            return None
        names: list[str] = []
        for event_name, throttle_name, short in _CLOCK_EVENT_REASONS:
            bit = getattr(nvml, event_name, None)
            if bit is None:  # a pynvml from before the rename
                bit = getattr(nvml, throttle_name, 0)
            if mask & int(bit or 0):
                names.append(short)
        return tuple(names)

    def _processes(self, handle: Any, uuid: str) -> tuple[GpuProcess, ...]:
        nvml = self._nvml
        running: Sequence[_ProcessInfo] = (
            self._get(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or ()
        )
        samples: Sequence[_ProcessSample] = (
            self._get(nvml.nvmlDeviceGetProcessUtilization, handle, self._sample_ts.get(uuid, 0))
            or ()
        )
        newest: dict[int, _ProcessSample] = {}
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
                    sm_ratio=None if latest is None else _ratio(int(latest.smUtil)),
                    memory_ratio=None if latest is None else _ratio(int(latest.memUtil)),
                )
            )
        return tuple(out)

    def _read_migs(self, handle: Any, index: int, parent: _Identity) -> list[GpuReading]:
        nvml = self._nvml
        out: list[GpuReading] = []
        idents: list[_MigIdentity] = []
        slots = self._get_int(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        for slot in range(slots):
            mig = self._get(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            if mig is None:
                continue  # an empty slot
            uuid = self._get(nvml.nvmlDeviceGetUUID, mig)
            if uuid is None:
                continue
            name = self._get(nvml.nvmlDeviceGetName, mig)
            ident = _MigIdentity(
                uuid=_text(uuid),
                name="" if name is None else _text(name),
                gpu_instance_id=self._get_int(nvml.nvmlDeviceGetGpuInstanceId, mig),
                compute_instance_id=self._get_int(nvml.nvmlDeviceGetComputeInstanceId, mig),
            )
            self._key_to_uuid[_handle_key(mig)] = parent.uuid
            util: _Utilization | None = self._get(nvml.nvmlDeviceGetUtilizationRates, mig)
            mem: _Memory | None = self._get(nvml.nvmlDeviceGetMemoryInfo, mig)
            idents.append(ident)
            out.append(
                replace(
                    _mig_reading(index, parent, ident),
                    utilization_gpu_ratio=None if util is None else _ratio(util.gpu),
                    utilization_memory_ratio=None if util is None else _ratio(util.memory),
                    memory_used_bytes=None if mem is None else int(mem.used),
                    memory_total_bytes=None if mem is None else int(mem.total),
                    processes=self._processes(mig, ident.uuid),
                )
            )
        self._migs[parent.uuid] = tuple(idents)
        return out
