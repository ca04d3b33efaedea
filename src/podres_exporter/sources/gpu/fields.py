"""A GPU's fields in our units, and the slow ones read at most every so often.

Units: utilisation as ratios (NVML: percent); power in W (mW); energy in J (mJ, a
counter since the driver loaded); clocks in Hz (MHz); PCIe throughput in bytes per
second (NVML: KB/s, 1 KB = 1024 bytes, as NVML counts its other sizes); temperature of
the GPU sensor in degrees Celsius. Memory used is the memory allocated on the device,
without what the driver and firmware reserve for themselves (``nvmlDeviceGetMemoryInfo``
version 2, what ``nvidia-smi`` shows as Used; version 1, which counts the reserved memory
as used, only from a driver without version 2: :func:`memory_info`). The power limit is
the enforced one (``nvmlDeviceGetEnforcedPowerLimit``): the one the GPU obeys. ECC totals are the
AGGREGATE counters (lifetime of the board, kept in the infoROM), not the VOLATILE ones
(since the last driver load), so they survive reboots and driver reloads and a rise
always means a new error. ECC, remapped rows and MIG mode are None on boards that do
not have them.

``nvmlDeviceGetPcieThroughput`` samples for about 20 ms in the driver, twice per GPU,
so a read of 8 GPUs takes a few hundred milliseconds. It and the fields that rarely
change (ECC totals, remapped rows, the enforced power limit: infoROM and firmware
queries) are read per GPU at most every ``slow_interval_s``
(``--source-interval.gpu-slow``, :class:`SlowFields`); reads between serve their last
values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from podres_exporter.core.telemetry import CLOCK_EVENT_REASONS
from podres_exporter.sources.gpu.calls import Nvml
from podres_exporter.sources.gpu.structs import Memory

__all__ = [
    "Identity",
    "MigIdentity",
    "Slow",
    "SlowFields",
    "clock_event_reasons",
    "memory_info",
    "milli",
    "ratio",
    "scaled",
]

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


@dataclass(frozen=True, slots=True)
class Identity:
    """What stays true of a GPU while the driver is loaded; kept to name a lost GPU."""

    uuid: str
    name: str = ""
    pci_bus_id: str | None = None
    numa_node: int | None = None


@dataclass(frozen=True, slots=True)
class MigIdentity:
    """What a MIG device is: its own ids inside its parent GPU."""

    uuid: str
    name: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


def ratio(percent: int | None) -> float | None:
    return None if percent is None else percent / 100.0


def scaled(value: int | None, factor: float) -> float | None:
    return None if value is None else value * factor


def milli(value: int | None) -> float | None:
    """mW -> W, mJ -> J (a division, so 1500 mW is exactly 1.5 W)."""
    return None if value is None else value / 1000


def memory_info(nvml: Nvml, handle: Any) -> Memory | None:
    """The device's memory, ``used`` without the memory the driver reserves (version 2 of
    the result), or version 1's answer from a driver (or pynvml) without version 2."""
    lib = nvml.lib
    version = getattr(lib, "nvmlMemory_v2", None)
    if version is not None:
        try:
            mem: Memory | None = nvml.get(lib.nvmlDeviceGetMemoryInfo, handle, version)
        except TypeError:  # a pynvml whose function takes no version
            mem = None
        if mem is not None:
            return mem
    return nvml.get(lib.nvmlDeviceGetMemoryInfo, handle)  # type: ignore[no-any-return]


def clock_event_reasons(nvml: Nvml, handle: Any) -> tuple[str, ...] | None:
    """The reasons the GPU's clocks are held down, by their short names."""
    lib = nvml.lib
    fn = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
    mask = None if fn is None else nvml.get_int(fn, handle)
    if mask is None:
        fallback = getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        mask = None if fallback is None else nvml.get_int(fallback, handle)
    if mask is None:
        return None
    names: list[str] = []
    for event_name, throttle_name, short in _CLOCK_EVENT_REASONS:
        bit = getattr(lib, event_name, None)
        if bit is None:  # a pynvml from before the rename
            bit = getattr(lib, throttle_name, 0)
        if mask & int(bit or 0):
            names.append(short)
    return tuple(names)


@dataclass(frozen=True, slots=True)
class Slow:
    """A GPU's fields read at most every ``slow_interval_s``."""

    power_limit_watts: float | None
    pcie_tx_bytes_per_second: float | None
    pcie_rx_bytes_per_second: float | None
    ecc_corrected_total: int | None
    ecc_uncorrected_total: int | None
    remapped_rows: Sequence[int] | None


class SlowFields:
    """Each GPU's slow fields and when they were read (``clock``: monotonic seconds)."""

    def __init__(self, interval_s: float, clock: Callable[[], float]) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[str, tuple[float, Slow]] = {}  # uuid -> (when read, slow fields)

    def clear(self) -> None:
        self._last.clear()

    def read(self, nvml: Nvml, handle: Any, uuid: str) -> Slow:
        """The GPU's slow fields, read again only when ``interval_s`` has passed."""
        now = self._clock()
        last = self._last.get(uuid)
        if last is not None and now - last[0] < self._interval_s:
            return last[1]
        lib = nvml.lib
        ecc = (lib.NVML_MEMORY_ERROR_TYPE_CORRECTED, lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        ecc_corrected, ecc_uncorrected = (
            nvml.get_int(lib.nvmlDeviceGetTotalEccErrors, handle, t, lib.NVML_AGGREGATE_ECC)
            for t in ecc
        )
        pcie = (lib.NVML_PCIE_UTIL_TX_BYTES, lib.NVML_PCIE_UTIL_RX_BYTES)
        tx, rx = (
            scaled(nvml.get_int(lib.nvmlDeviceGetPcieThroughput, handle, d), 1024.0) for d in pcie
        )
        slow = Slow(
            power_limit_watts=milli(nvml.get_int(lib.nvmlDeviceGetEnforcedPowerLimit, handle)),
            pcie_tx_bytes_per_second=tx,
            pcie_rx_bytes_per_second=rx,
            ecc_corrected_total=ecc_corrected,
            ecc_uncorrected_total=ecc_uncorrected,
            remapped_rows=nvml.get(lib.nvmlDeviceGetRemappedRows, handle),
        )
        self._last[uuid] = (now, slow)
        return slow
