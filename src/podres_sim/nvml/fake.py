"""A hand-made fake of the ``pynvml`` module, for tests and the demo.

:class:`FakeNvml` answers the pynvml functions that
:class:`~podres_exporter.sources.gpu.NvmlBackend` calls, with the real
signatures, the real result structures where they can hold the fake's handles
(``c_nvmlUtilization_t``, ``c_nvmlMemory_t``, ``nvmlPciInfo_t``, process infos and
samples) and the real errors: ``pynvml.NVMLError(code)``, which pynvml turns into
its ``NVMLError_*`` subclasses with the same ``.value``. Every ``NVML_*``
constant, clock-event and event-type bit and error class is copied from the real
module, so none can drift. A conformance test holds the fake to the real API.

State is plain, mutable dataclasses (``nvml.board``) in NVML's units (percent, mW,
mJ, MHz, KB/s)::

    fake = FakeNvml()
    gpu = fake.add_gpu("GPU-0f0e...", pci_bus_id="0000:17:00.0", numa_node=0)
    gpu.power_usage_mw = 312_000
    fake.add_process("GPU-0f0e...", pid=4242, used_memory=2 << 30)
    fake.add_sample("GPU-0f0e...", pid=4242, sm_util=80, mem_util=35)
    fake.add_mig_gpu("GPU-77aa...", instances=[("MIG-1b2c...", 7, 0, 10 << 30)])
    fake.emit_xid("GPU-0f0e...", 79)
    fake.break_gpu("GPU-0f0e...")  # every query on it: NVML_ERROR_GPU_IS_LOST
    fake.set_unsupported("nvmlDeviceGetPcieThroughput")  # on every GPU
    fake.hang()  # every call blocks, as in a wedged driver, until fake.release()
    fake.connect_nvlink("GPU-0f0e...", "GPU-77aa...", links=4)  # 4 active NVLinks
    fake.set_topology("GPU-0f0e...", "GPU-77aa...", pynvml.NVML_TOPOLOGY_HOSTBRIDGE)

Nothing is random unless asked: :meth:`FakeNvml.step` moves the "animated"
GPUs (those ``nvml.planner.nvml_for_devices`` makes) one seeded random-walk step
(``nvml.animation``) and every GPU's energy counter by power x time; with a ``clock`` the fake steps
itself, once per ``step_s`` (1 s) of that clock, before answering a query.
"""

# The fake mirrors pynvml's names: camelCase functions and parameters.
# ruff: noqa: N802, N803

from __future__ import annotations

import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Final

import pynvml

from podres_exporter.core.ids import normalize_pci
from podres_sim.nvml.animation import animate
from podres_sim.nvml.board import (
    DEFAULT_MODEL,
    MIB,
    MODELS,
    NO_INSTANCE,
    SAMPLE_BUFFER,
    EventSet,
    FakeEventData,
    FakeGpu,
    FakeMigDevice,
    FakeProcess,
    FakeSample,
    derived_uuid,
    hgx_bus,
)

__all__ = ["FakeNvml"]

_MAX_CATCH_UP_STEPS: Final = 60


# What NVML answers on a MIG device handle; everything else is NOT_SUPPORTED there.
_MIG_FUNCTIONS: Final = frozenset(
    {
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceRegisterEvents",
    }
)
# What a GPU in MIG mode no longer answers for the whole board.
_NOT_IN_MIG_MODE: Final = frozenset(
    {"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetProcessUtilization"}
)


def _err(code: int) -> Exception:
    """The real pynvml error for ``code`` (an ``NVMLError_*`` subclass)."""
    error: Exception = pynvml.NVMLError(code)
    return error


def _nvml_bus_id(address: str) -> str:
    """``"0000:17:00.0"`` (any case, 4 or 8 domain digits) -> NVML's ``"00000000:17:00.0"``."""
    canonical = normalize_pci(address)
    if canonical is None:
        raise ValueError(f"not a PCI address: {address!r}")
    domain, rest = canonical.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def _absent(name: str) -> property:
    """An attribute that is not there: reading it raises AttributeError, as pynvml would."""

    def missing(fake: object) -> Any:
        raise AttributeError(f"module 'pynvml' has no attribute {name!r}")

    return property(missing)


class FakeNvml:
    """A fake of the ``pynvml`` module: use it where the module object is expected.

    ``driver_missing``: ``nvmlInit`` raises NVML_ERROR_LIBRARY_NOT_FOUND until
    :meth:`load_driver` (``init_error`` sets any other code). ``seed`` seeds the
    random walk of :meth:`step`; ``clock`` (seconds, monotonic) makes the fake step
    itself every ``step_s`` seconds of it. ``calls`` counts calls per function.
    ``memory_info_v2`` False: a driver without version 2 of the memory query;
    ``privileged`` False: a caller NVML does not give a MIG-enabled GPU's memory.
    """

    def __init__(
        self,
        *,
        driver_version: str = "550.54.15",
        driver_missing: bool = False,
        init_error: int | None = None,
        seed: int = 0,
        clock: Callable[[], float] | None = None,
        step_s: float = 1.0,
    ) -> None:
        self.driver_version = driver_version
        self.init_error: int | None = (
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND if driver_missing else init_error
        )
        self.calls: Counter[str] = Counter()
        self.init_count = 0
        # False: a driver older than nvmlDeviceGetMemoryInfo_v2 (FUNCTION_NOT_FOUND).
        self.memory_info_v2 = True
        # False: a caller without the privilege NVML asks for a MIG-enabled GPU's own
        # memory (NO_PERMISSION there; its MIG devices still answer).
        self.privileged = True
        self.gpus: list[FakeGpu] = []
        self.now_us = 1_000_000  # the driver's timestamp clock, microseconds
        self._errors: dict[tuple[str, str | None], int] = {}
        self._topology: dict[frozenset[str], int] = {}  # GPU uuid pair -> NVML_TOPOLOGY_*
        self._hidden: set[str] = set()
        self._event_sets: list[EventSet] = []
        self._rng = random.Random(seed)
        self._clock = clock
        self._step_s = step_s
        self._synced_at = clock() if clock is not None else 0.0
        self._released = threading.Event()  # clear while calls hang (hang)
        self._released.set()
        self._blocked = 0  # calls waiting in hang
        self._blocked_lock = threading.Lock()

    # ------------------------------------------------------------------ builders

    @classmethod
    def with_gpus(cls, count: int, *, seed: int = 0, **kwargs: Any) -> FakeNvml:
        """``count`` idle GPUs with UUIDs derived from ``seed``, on HGX PCI buses."""
        fake = cls(seed=seed)
        for i in range(count):
            fake.add_gpu(
                derived_uuid("GPU", f"{seed}:{i}"),
                pci_bus_id=f"0000:{hgx_bus(i):02x}:00.0",
                numa_node=0 if i < max(1, count // 2) else 1,
                **kwargs,
            )
        return fake

    def add_gpu(
        self,
        uuid: str,
        *,
        name: str = "NVIDIA H100 80GB HBM3",
        pci_bus_id: str | None = None,
        numa_node: int | None = None,
        memory_total: int | None = None,
        memory_used: int = 0,
        utilization_gpu: int = 0,
        utilization_memory: int = 0,
        power_usage_mw: int = 70_000,
        power_limit_mw: int | None = None,
        energy_mj: int = 0,
        temperature_c: int = 32,
        sm_clock_mhz: int | None = None,
        memory_clock_mhz: int | None = None,
        clock_event_reasons: int = 0,
        pcie_tx_kbps: int = 0,
        pcie_rx_kbps: int = 0,
        ecc_corrected: int = 0,
        ecc_uncorrected: int = 0,
        remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0),
        mig_mode: int | None = pynvml.NVML_DEVICE_MIG_DISABLE,
    ) -> FakeGpu:
        """Add a GPU at the next NVML index; model defaults come from ``name``, and so
        do the functions such a board answers NOT_SUPPORTED (``board.MODELS``).

        ``pci_bus_id`` in either form (``0000:17:00.0`` or ``00000000:17:00.0``);
        by default the next HGX bus.
        """
        if any(g.uuid == uuid for g in self.gpus):
            raise ValueError(f"duplicate GPU {uuid}")
        model = MODELS.get(name, DEFAULT_MODEL)
        index = len(self.gpus)
        gpu = FakeGpu(
            uuid=uuid,
            index=index,
            name=name,
            pci_bus_id=_nvml_bus_id(pci_bus_id or f"0000:{hgx_bus(index):02x}:00.0"),
            numa_node=numa_node,
            memory_total=model.memory_total if memory_total is None else memory_total,
            memory_used=memory_used,
            utilization_gpu=utilization_gpu,
            utilization_memory=utilization_memory,
            power_usage_mw=power_usage_mw,
            power_limit_mw=model.power_limit_mw if power_limit_mw is None else power_limit_mw,
            energy_mj=energy_mj,
            temperature_c=temperature_c,
            sm_clock_mhz=model.max_sm_clock_mhz if sm_clock_mhz is None else sm_clock_mhz,
            memory_clock_mhz=(
                model.memory_clock_mhz if memory_clock_mhz is None else memory_clock_mhz
            ),
            clock_event_reasons=clock_event_reasons,
            pcie_tx_kbps=pcie_tx_kbps,
            pcie_rx_kbps=pcie_rx_kbps,
            ecc_corrected=ecc_corrected,
            ecc_uncorrected=ecc_uncorrected,
            remapped_rows=remapped_rows,
            mig_mode=None if "nvmlDeviceGetMigMode" in model.unsupported else mig_mode,
            max_sm_clock_mhz=model.max_sm_clock_mhz,
        )
        self.gpus.append(gpu)
        for function in model.unsupported:  # what such a board answers NOT_SUPPORTED
            self.set_unsupported(function, uuid)
        return gpu

    def add_mig_gpu(
        self,
        uuid: str,
        instances: Iterable[tuple[str, int, int, int]],
        *,
        name: str = "NVIDIA A100-SXM4-80GB",
        **kwargs: Any,
    ) -> FakeGpu:
        """A MIG-enabled GPU with ``(mig_uuid, gpu_instance_id, compute_instance_id,
        memory_total)`` instances; other keywords as :meth:`add_gpu`."""
        gpu = self.add_gpu(uuid, name=name, mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE, **kwargs)
        for mig_uuid, gi, ci, memory_total in instances:
            slices = max(1, min(7, round(8 * memory_total / gpu.memory_total)))
            label = f"{slices}g.{round(memory_total / (1000 * MIB))}gb"
            gpu.add_mig(mig_uuid, gi, ci, memory_total, name=f"{name} MIG {label}")
        return gpu

    # ------------------------------------------------------------------ mutators

    def gpu(self, uuid: str) -> FakeGpu:
        """The GPU with ``uuid`` (KeyError if none)."""
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise KeyError(uuid)

    def mig(self, uuid: str) -> FakeMigDevice:
        """The MIG device with ``uuid`` (KeyError if none)."""
        for gpu in self.gpus:
            for mig in gpu.mig_devices:
                if mig is not None and mig.uuid == uuid:
                    return mig
        raise KeyError(uuid)

    def _device(self, uuid: str) -> FakeGpu | FakeMigDevice:
        try:
            return self.gpu(uuid)
        except KeyError:
            return self.mig(uuid)

    def set_topology(self, uuid_a: str, uuid_b: str, level: int) -> None:
        """``nvmlDeviceGetTopologyCommonAncestor`` of the two GPUs answers ``level``
        (an ``NVML_TOPOLOGY_*``). Unset pairs: NODE on the same NUMA node, else SYSTEM."""
        for uuid in (uuid_a, uuid_b):
            self.gpu(uuid)  # KeyError for an unknown GPU
        self._topology[frozenset((uuid_a, uuid_b))] = level

    def connect_nvlink(self, uuid_a: str, uuid_b: str, links: int = 1) -> None:
        """Add ``links`` active NVLinks between two GPUs (on both ends)."""
        a, b = self.gpu(uuid_a), self.gpu(uuid_b)
        a.nvlinks.extend([b.pci_bus_id] * links)
        b.nvlinks.extend([a.pci_bus_id] * links)

    def hang(self) -> None:
        """Every NVML call from now on blocks, as in a wedged driver, until :meth:`release`
        (calls already inside the fake finish)."""
        self._released.clear()

    def release(self) -> None:
        """Undo :meth:`hang`: the blocked calls go on."""
        self._released.set()

    @property
    def hanging(self) -> bool:
        """Whether calls block (:meth:`hang`)."""
        return not self._released.is_set()

    @property
    def blocked(self) -> int:
        """How many calls are blocked by :meth:`hang` now."""
        with self._blocked_lock:
            return self._blocked

    def _wait_released(self) -> None:
        if self._released.is_set():
            return
        with self._blocked_lock:
            self._blocked += 1
        try:
            self._released.wait()
        finally:
            with self._blocked_lock:
                self._blocked -= 1

    def load_driver(self) -> None:
        """The driver is there now: the next ``nvmlInit`` succeeds."""
        self.init_error = None

    def break_gpu(
        self, uuid: str, error: int = pynvml.NVML_ERROR_GPU_IS_LOST, *, handle: bool = False
    ) -> None:
        """Every query on the GPU (and its MIG devices) raises ``error``; with
        ``handle``, ``nvmlDeviceGetHandleByIndex`` for it too."""
        gpu = self.gpu(uuid)
        gpu.error = error
        gpu.handle_error = handle

    def heal_gpu(self, uuid: str) -> None:
        """Undo :meth:`break_gpu`."""
        gpu = self.gpu(uuid)
        gpu.error = None
        gpu.handle_error = False

    def set_error(self, function: str, code: int, uuid: str | None = None) -> None:
        """``function`` raises ``code``: for the device ``uuid``, or for every call."""
        self._errors[(function, uuid)] = code

    def set_unsupported(self, function: str, uuid: str | None = None) -> None:
        """``function`` raises NVML_ERROR_NOT_SUPPORTED (for ``uuid`` or everywhere)."""
        self.set_error(function, pynvml.NVML_ERROR_NOT_SUPPORTED, uuid)

    def clear_error(self, function: str, uuid: str | None = None) -> None:
        """Undo :meth:`set_error` / :meth:`set_unsupported`."""
        self._errors.pop((function, uuid), None)

    def hide_function(self, name: str) -> None:
        """Make ``name`` absent, as in an older pynvml (``getattr`` raises AttributeError).

        This instance's class becomes a subclass of its own in which ``name`` is a
        property that raises: no hook on every other attribute, whose cost would be
        counted as the exporter's in the benchmarks."""
        self._hidden.add(name)
        base = self.__dict__.setdefault("_own_class", type(self))
        self.__class__ = type(base.__name__, (base,), {n: _absent(n) for n in self._hidden})

    def add_process(self, uuid: str, pid: int, used_memory: int | None = None) -> FakeProcess:
        """A compute process on the GPU or MIG device ``uuid``."""
        proc = FakeProcess(pid, used_memory)
        self._device(uuid).processes.append(proc)
        return proc

    def add_sample(self, uuid: str, pid: int, *, sm_util: int, mem_util: int) -> FakeSample:
        """A utilisation sample for ``pid`` on ``uuid``, 1 ms after the previous one."""
        self.now_us += 1000
        sample = FakeSample(pid, self.now_us, sm_util, mem_util)
        samples = self._device(uuid).samples
        samples.append(sample)
        del samples[:-SAMPLE_BUFFER]
        return sample

    def emit_xid(self, uuid: str, xid: int) -> None:
        """An XID error on the GPU (or MIG device) ``uuid``, to every event set that
        registered the GPU for XID events."""
        device = self._device(uuid)
        gpu = device.parent if isinstance(device, FakeMigDevice) else device
        data = FakeEventData(
            device=gpu,
            eventType=pynvml.nvmlEventTypeXidCriticalError,
            eventData=xid,
            gpuInstanceId=(
                device.gpu_instance_id if isinstance(device, FakeMigDevice) else NO_INSTANCE
            ),
            computeInstanceId=(
                device.compute_instance_id if isinstance(device, FakeMigDevice) else NO_INSTANCE
            ),
        )
        for event_set in self._event_sets:
            mask = event_set.registered.get(id(gpu), 0)
            if not event_set.freed and mask & pynvml.nvmlEventTypeXidCriticalError:
                event_set.pending.append(data)

    def step(self, seconds: float | None = None) -> None:
        """Advance the fake by ``seconds`` (default ``step_s``): energy grows by
        power x time on every GPU; animated GPUs take one random-walk step and
        record a utilisation sample per process."""
        dt = self._step_s if seconds is None else seconds
        self.now_us += int(dt * 1_000_000)
        for gpu in self.gpus:
            if gpu.animated:
                animate(gpu, dt, self._rng, self.now_us)
            gpu.energy_mj += int(gpu.power_usage_mw * dt)

    def _sync(self) -> None:
        if self._clock is None:
            return
        steps = int((self._clock() - self._synced_at) // self._step_s)
        if steps <= 0:
            return
        self._synced_at += steps * self._step_s
        taken = min(steps, _MAX_CATCH_UP_STEPS)
        for _ in range(taken):
            self.step(steps * self._step_s / taken)

    # ------------------------------------------------------------- call plumbing

    def _enter(self, function: str) -> None:
        self._wait_released()
        self.calls[function] += 1
        if self.init_count == 0:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        self._sync()
        code = self._errors.get((function, None))
        if code is not None:
            raise _err(code)

    def _resolve(self, function: str, handle: object) -> FakeGpu | FakeMigDevice:
        self._enter(function)
        if isinstance(handle, FakeMigDevice):
            gpu = handle.parent
        elif isinstance(handle, FakeGpu):
            gpu = handle
        else:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not any(g is gpu for g in self.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if gpu.error is not None:
            raise _err(gpu.error)
        code = self._errors.get((function, handle.uuid))
        if code is not None:
            raise _err(code)
        if isinstance(handle, FakeMigDevice):
            if not any(m is handle for m in gpu.mig_devices):
                raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # destroyed
            if function not in _MIG_FUNCTIONS:
                raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        elif gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE and function in _NOT_IN_MIG_MODE:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return handle

    def _gpu(self, function: str, handle: object) -> FakeGpu:
        device = self._resolve(function, handle)
        if not isinstance(device, FakeGpu):
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return device

    def _event_set(self, function: str, event_set: object, *, enter: bool = True) -> EventSet:
        if enter:
            self._enter(function)
        if not isinstance(event_set, EventSet) or event_set.freed:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return event_set

    # ------------------------------------------------------------------- library
    # Same names and parameters as the real pynvml functions (the conformance test
    # compares them); camelCase parameter names are pynvml's.

    def nvmlInit(self) -> None:
        self._wait_released()
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise _err(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._wait_released()
        self.calls["nvmlShutdown"] += 1
        if self.init_count == 0:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        if gpu.handle_error and gpu.error is not None:
            raise _err(gpu.error)
        return gpu

    # ------------------------------------------------------------------ identity

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        return self._resolve("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: object) -> str:
        return self._resolve("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetPciInfo(self, handle: object) -> Any:
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
        info = pynvml.nvmlPciInfo_t()
        domain, bus, rest = gpu.pci_bus_id.split(":")
        info.busId = gpu.pci_bus_id.encode()
        info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}".encode()
        info.domain = int(domain, 16)
        info.bus = int(bus, 16)
        info.device = int(rest.split(".")[0], 16)
        return info

    def nvmlDeviceGetNumaNodeId(self, handle: object) -> int:
        gpu = self._gpu("nvmlDeviceGetNumaNodeId", handle)
        if gpu.numa_node is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.numa_node

    def nvmlDeviceGetMigMode(self, device: object) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", device)
        if gpu.mig_mode is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [gpu.mig_mode, gpu.mig_mode]

    # ------------------------------------------------------------------ topology

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: object, device2: object) -> int:
        a = self._gpu("nvmlDeviceGetTopologyCommonAncestor", device1)
        b = self._gpu("nvmlDeviceGetTopologyCommonAncestor", device2)
        if a is b:
            return int(pynvml.NVML_TOPOLOGY_INTERNAL)
        level = self._topology.get(frozenset((a.uuid, b.uuid)))
        if level is not None:
            return level
        if a.numa_node is not None and a.numa_node == b.numa_node:
            return int(pynvml.NVML_TOPOLOGY_NODE)
        return int(pynvml.NVML_TOPOLOGY_SYSTEM)

    def nvmlDeviceGetNvLinkState(self, device: object, link: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkState", device)
        if not gpu.nvlinks:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.nvlinks):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        active = gpu.nvlinks[link] is not None
        return int(pynvml.NVML_FEATURE_ENABLED if active else pynvml.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: object, link: int) -> Any:
        gpu = self._gpu("nvmlDeviceGetNvLinkRemotePciInfo", device)
        if not gpu.nvlinks:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.nvlinks):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        remote = gpu.nvlinks[link]
        if remote is None:
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)  # an inactive link has no remote end
        info = pynvml.nvmlPciInfo_t()
        info.busId = remote.encode()
        return info

    # ------------------------------------------------------------------- metrics

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Any:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return pynvml.c_nvmlUtilization_t(gpu=gpu.utilization_gpu, memory=gpu.utilization_memory)

    def nvmlDeviceGetMemoryInfo(self, handle: object, version: int | None = None) -> Any:
        device = self._resolve("nvmlDeviceGetMemoryInfo", handle)
        if (
            not self.privileged
            and isinstance(device, FakeGpu)
            and device.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE
        ):
            raise _err(pynvml.NVML_ERROR_NO_PERMISSION)
        total, used, reserved = device.memory_total, device.memory_used, device.memory_reserved
        free = total - used - reserved
        if not version:  # version 1: the reserved memory is part of "used"
            return pynvml.c_nvmlMemory_t(total=total, free=free, used=used + reserved)
        if not self.memory_info_v2:
            raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if version != pynvml.nvmlMemory_v2:
            raise _err(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return pynvml.c_nvmlMemory_v2_t(
            version=version, total=total, reserved=reserved, free=free, used=used
        )

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_usage_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetClockInfo(self, handle: object, type: int) -> int:
        gpu = self._gpu("nvmlDeviceGetClockInfo", handle)
        if type in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
            return gpu.sm_clock_mhz
        if type == pynvml.NVML_CLOCK_MEM:
            return gpu.memory_clock_mhz
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_event_reasons

    def nvmlDeviceGetPcieThroughput(self, device: object, counter: int) -> int:
        gpu = self._gpu("nvmlDeviceGetPcieThroughput", device)
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return gpu.pcie_tx_kbps
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return gpu.pcie_rx_kbps
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetTotalEccErrors(
        self,
        handle: object,
        errorType: int,
        counterType: int,
    ) -> int:
        gpu = self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        counts = {
            (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC): gpu.ecc_corrected,
            (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC): (
                gpu.ecc_uncorrected
            ),
            (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC): (
                gpu.ecc_corrected_volatile
            ),
            (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC): (
                gpu.ecc_uncorrected_volatile
            ),
        }
        if (errorType, counterType) not in counts:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return counts[(errorType, counterType)]

    def nvmlDeviceGetRemappedRows(self, device: object) -> tuple[int, int, int, int]:
        return self._gpu("nvmlDeviceGetRemappedRows", device).remapped_rows

    # ----------------------------------------------------------------- processes

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[Any]:
        device = self._resolve("nvmlDeviceGetComputeRunningProcesses", handle)
        owners: list[FakeGpu | FakeMigDevice] = [device]
        if isinstance(device, FakeGpu):  # a MIG-mode GPU lists the processes of all its MIGs
            owners.extend(m for m in device.mig_devices if m is not None)
        out: list[Any] = []
        for owner in owners:
            mig = owner if isinstance(owner, FakeMigDevice) else None
            for proc in owner.processes:
                info = pynvml.c_nvmlProcessInfo_t(
                    pid=proc.pid,
                    usedGpuMemory=0 if proc.used_memory is None else proc.used_memory,
                    gpuInstanceId=NO_INSTANCE if mig is None else mig.gpu_instance_id,
                    computeInstanceId=NO_INSTANCE if mig is None else mig.compute_instance_id,
                )
                obj = pynvml.nvmlStructToFriendlyObject(info)
                if proc.used_memory is None:
                    obj.usedGpuMemory = None  # what pynvml does for NVML_VALUE_NOT_AVAILABLE
                out.append(obj)
        return out

    def nvmlDeviceGetProcessUtilization(
        self,
        handle: object,
        timeStamp: int,
    ) -> list[Any]:
        device = self._resolve("nvmlDeviceGetProcessUtilization", handle)
        found = [
            pynvml.c_nvmlProcessUtilizationSample_t(
                pid=s.pid, timeStamp=s.time_stamp, smUtil=s.sm_util, memUtil=s.mem_util
            )
            for s in device.samples
            if s.time_stamp > timeStamp
        ]
        if not found:
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return found

    # ----------------------------------------------------------------------- MIG

    def nvmlDeviceGetMaxMigDeviceCount(self, device: object) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxMigDeviceCount", device)
        if gpu.mig_mode is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: object, index: int) -> FakeMigDevice:
        gpu = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if gpu.mig_mode != pynvml.NVML_DEVICE_MIG_ENABLE or not 0 <= index < gpu.max_mig_devices:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        mig = gpu.mig_devices[index] if index < len(gpu.mig_devices) else None
        if mig is None:
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return mig

    def nvmlDeviceGetGpuInstanceId(self, device: object) -> int:
        mig = self._resolve("nvmlDeviceGetGpuInstanceId", device)
        if not isinstance(mig, FakeMigDevice):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: object) -> int:
        mig = self._resolve("nvmlDeviceGetComputeInstanceId", device)
        if not isinstance(mig, FakeMigDevice):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.compute_instance_id

    # -------------------------------------------------------------------- events

    def nvmlEventSetCreate(self) -> object:
        self._enter("nvmlEventSetCreate")
        event_set = EventSet()
        self._event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(
        self,
        handle: object,
        eventTypes: int,
        eventSet: object,
    ) -> None:
        device = self._resolve("nvmlDeviceRegisterEvents", handle)
        event_set = self._event_set("nvmlDeviceRegisterEvents", eventSet, enter=False)
        gpu = device.parent if isinstance(device, FakeMigDevice) else device
        event_set.registered[id(gpu)] = event_set.registered.get(id(gpu), 0) | eventTypes

    def nvmlEventSetWait(
        self,
        eventSet: object,
        timeoutms: int,
    ) -> FakeEventData:
        event_set = self._event_set("nvmlEventSetWait", eventSet)
        if not event_set.pending:
            raise _err(pynvml.NVML_ERROR_TIMEOUT)  # never blocks, whatever timeoutms says
        return event_set.pending.popleft()

    def nvmlEventSetFree(self, eventSet: object) -> None:
        event_set = self._event_set("nvmlEventSetFree", eventSet)
        event_set.freed = True
        self._event_sets.remove(event_set)


# The constants and error classes of the real module, so the fake cannot drift:
# NVML_* codes and enums, the clock-event / throttle-reason and event-type bits,
# NVMLError, its NVMLError_* subclasses and NVMLLibraryMismatchError, and the version
# numbers of the result structures the backend asks for by version.
_COPIED = re.compile(
    r"^(NVML_[A-Z0-9_]+|nvmlClocks(Event|Throttle)Reason\w+|nvmlEventType\w+|NVMLError\w*"
    r"|NVMLLibraryMismatchError|nvmlMemory_v2)$"
)
for _name in dir(pynvml):
    if _COPIED.match(_name) and not hasattr(FakeNvml, _name):
        setattr(FakeNvml, _name, getattr(pynvml, _name))
del _name
