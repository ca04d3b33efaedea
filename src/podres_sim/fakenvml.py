"""A hand-made fake of the ``pynvml`` module, for tests and the demo.

:class:`FakeNvml` answers the pynvml functions that
:class:`~podres_exporter.sources.gpu.NvmlBackend` calls, with the real
signatures, the real result structures where they can hold the fake's handles
(``c_nvmlUtilization_t``, ``c_nvmlMemory_t``, ``nvmlPciInfo_t``, process infos and
samples) and the real errors: ``pynvml.NVMLError(code)``, which pynvml turns into
its ``NVMLError_*`` subclasses with the same ``.value``. Every ``NVML_*``
constant, clock-event and event-type bit and error class is copied from the real
module, so none can drift. A conformance test holds the fake to the real API.

State is plain, mutable dataclasses in NVML's units (percent, mW, mJ, MHz, KB/s)::

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
GPUs (those :meth:`FakeNvml.from_devices` makes) one seeded random-walk step and
every GPU's energy counter by power x time; with a ``clock`` the fake steps
itself, once per ``step_s`` (1 s) of that clock, before answering a query.
"""

# The fake mirrors pynvml's names: camelCase functions and parameters.
# ruff: noqa: N802, N803

from __future__ import annotations

import hashlib
import random
import re
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pynvml

from podres_exporter.core.ids import Kind, normalize_pci, resolve, split_replica

__all__ = [
    "FakeEventData",
    "FakeGpu",
    "FakeMigDevice",
    "FakeNvml",
    "FakeProcess",
    "FakeSample",
]

_GIB: Final = 1 << 30
_MIB: Final = 1 << 20
_NO_INSTANCE: Final = 0xFFFFFFFF  # NVML's gpuInstanceId/computeInstanceId outside MIG
_SAMPLE_BUFFER: Final = 128  # NVML keeps a short ring of process samples per device
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


def _derived_uuid(prefix: str, text: str) -> str:
    h = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _indexed_gpu_uuid(index: int | None) -> str:
    """The UUID of the GPU GKE names ``nvidia<index>``."""
    return _derived_uuid("GPU", f"nvidia{index}")


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


# ------------------------------------------------------------------------- state


@dataclass(eq=False)
class FakeProcess:
    """A compute process on a device; ``used_memory`` None: NVML cannot say (WDDM, MIG)."""

    pid: int
    used_memory: int | None = None


@dataclass(frozen=True)
class FakeSample:
    """One per-process utilisation sample (percent), at ``time_stamp`` microseconds."""

    pid: int
    time_stamp: int
    sm_util: int
    mem_util: int


@dataclass(eq=False)
class FakeMigDevice:
    """A MIG device of a MIG-enabled :class:`FakeGpu`; it is its own NVML handle."""

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    memory_total: int
    parent: FakeGpu = field(repr=False)
    name: str = ""
    memory_used: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    samples: list[FakeSample] = field(default_factory=list)
    load: float = 0.0  # animation: the mean utilisation it drifts around (0..1)


@dataclass(eq=False)
class FakeGpu:
    """One fake GPU, in NVML's units; it is its own NVML handle. Mutate freely.

    ``mig_mode`` None: a board without MIG (``nvmlDeviceGetMigMode`` NOT_SUPPORTED).
    ``mig_devices`` has one entry per MIG slot, None when the slot is empty.
    ``error``: when set, every query on the GPU (and on its MIG devices) raises it;
    with ``handle_error`` the handle lookup by index raises it too.
    ``animated``: :meth:`FakeNvml.step` moves its values around ``load``.
    """

    uuid: str
    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str = "00000000:17:00.0"  # NVML's form; add_gpu takes either form
    numa_node: int | None = None
    memory_total: int = 81559 * _MIB
    memory_used: int = 0
    utilization_gpu: int = 0  # percent
    utilization_memory: int = 0  # percent
    power_usage_mw: int = 70_000
    power_limit_mw: int = 700_000
    energy_mj: int = 0
    temperature_c: int = 32
    sm_clock_mhz: int = 1980
    memory_clock_mhz: int = 2619
    clock_event_reasons: int = 0  # bitmask of nvmlClocksEventReason*
    pcie_tx_kbps: int = 0
    pcie_rx_kbps: int = 0
    ecc_corrected: int = 0  # aggregate (lifetime) counters
    ecc_uncorrected: int = 0
    ecc_corrected_volatile: int = 0  # since the driver loaded
    ecc_uncorrected_volatile: int = 0
    # (correctable, uncorrectable, pending, failure), as nvmlDeviceGetRemappedRows
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    mig_mode: int | None = pynvml.NVML_DEVICE_MIG_DISABLE
    max_mig_devices: int = 7
    mig_devices: list[FakeMigDevice | None] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    samples: list[FakeSample] = field(default_factory=list)
    error: int | None = None
    handle_error: bool = False
    animated: bool = False
    load: float = 0.0
    max_sm_clock_mhz: int = 1980
    # One entry per NVLink of the board: the remote end's PCI bus id in NVML's form,
    # None for an inactive link. Empty: a board without NVLink (NOT_SUPPORTED).
    nvlinks: list[str | None] = field(default_factory=list)

    def add_mig(
        self,
        uuid: str,
        gpu_instance_id: int,
        compute_instance_id: int = 0,
        memory_total: int = 10 * _GIB,
        *,
        name: str | None = None,
        memory_used: int = 0,
    ) -> FakeMigDevice:
        """Create a MIG device in the first free slot (enables MIG mode)."""
        mig = FakeMigDevice(
            uuid=uuid,
            gpu_instance_id=gpu_instance_id,
            compute_instance_id=compute_instance_id,
            memory_total=memory_total,
            parent=self,
            name=name if name is not None else f"{self.name} MIG",
            memory_used=memory_used,
        )
        self.mig_mode = pynvml.NVML_DEVICE_MIG_ENABLE
        for slot, existing in enumerate(self.mig_devices):
            if existing is None:
                self.mig_devices[slot] = mig
                return mig
        if len(self.mig_devices) >= self.max_mig_devices:
            raise ValueError(f"{self.uuid} has no free MIG slot")
        self.mig_devices.append(mig)
        return mig

    def remove_mig(self, uuid: str) -> None:
        """Destroy a MIG device: its slot becomes empty."""
        for slot, existing in enumerate(self.mig_devices):
            if existing is not None and existing.uuid == uuid:
                self.mig_devices[slot] = None
                return
        raise KeyError(uuid)


@dataclass(frozen=True)
class FakeEventData:
    """What ``nvmlEventSetWait`` returns (the fields of ``c_nvmlEventData_t``)."""

    device: object
    eventType: int  # noqa: N815 - NVML's field name
    eventData: int  # noqa: N815 - NVML's field name
    gpuInstanceId: int = _NO_INSTANCE  # noqa: N815 - NVML's field name
    computeInstanceId: int = _NO_INSTANCE  # noqa: N815 - NVML's field name


class _EventSet:
    """An NVML event set: registrations and the queue of pending events."""

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # id(FakeGpu) -> event type mask
        self.pending: deque[FakeEventData] = deque()
        self.freed = False


@dataclass(frozen=True)
class _Model:
    memory_total: int
    power_limit_mw: int
    max_sm_clock_mhz: int
    memory_clock_mhz: int


_MODELS: Final[Mapping[str, _Model]] = {
    "NVIDIA H100 80GB HBM3": _Model(81559 * _MIB, 700_000, 1980, 2619),
    "NVIDIA A100-SXM4-80GB": _Model(81920 * _MIB, 400_000, 1410, 1593),
    "NVIDIA A100-SXM4-40GB": _Model(40960 * _MIB, 400_000, 1410, 1215),
    "NVIDIA L40S": _Model(46068 * _MIB, 350_000, 2520, 9001),
}
_DEFAULT_MODEL: Final = _MODELS["NVIDIA H100 80GB HBM3"]
# PCI buses of the eight GPUs of a typical HGX board, lowest first.
_HGX_BUSES: Final = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)

# The MIG profile in a resource name: nvidia.com/mig-<slices>g.<GB>gb.
_MIG_PROFILE = re.compile(r"^mig-(\d+)g\.(\d+)gb")

NumaHint = int | Sequence[int] | None


@dataclass
class _PlannedGpu:
    uuid: str
    numa: int | None
    name: str
    replicas: int = 0  # time-slicing / MPS shares seen
    # (mig uuid, gpu instance id or None to number by slot, compute instance id, profile)
    migs: list[tuple[str, int | None, int, str]] = field(default_factory=list)


# -------------------------------------------------------------------------- fake


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
        self.gpus: list[FakeGpu] = []
        self.now_us = 1_000_000  # the driver's timestamp clock, microseconds
        self._errors: dict[tuple[str, str | None], int] = {}
        self._topology: dict[frozenset[str], int] = {}  # GPU uuid pair -> NVML_TOPOLOGY_*
        self._hidden: set[str] = set()
        self._event_sets: list[_EventSet] = []
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
                _derived_uuid("GPU", f"{seed}:{i}"),
                pci_bus_id=f"0000:{_bus(i):02x}:00.0",
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
        """Add a GPU at the next NVML index; model defaults come from ``name``.

        ``pci_bus_id`` in either form (``0000:17:00.0`` or ``00000000:17:00.0``);
        by default the next HGX bus.
        """
        if any(g.uuid == uuid for g in self.gpus):
            raise ValueError(f"duplicate GPU {uuid}")
        model = _MODELS.get(name, _DEFAULT_MODEL)
        index = len(self.gpus)
        gpu = FakeGpu(
            uuid=uuid,
            index=index,
            name=name,
            pci_bus_id=_nvml_bus_id(pci_bus_id or f"0000:{_bus(index):02x}:00.0"),
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
            mig_mode=mig_mode,
            max_sm_clock_mhz=model.max_sm_clock_mhz,
        )
        self.gpus.append(gpu)
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
            label = f"{slices}g.{round(memory_total / (1000 * _MIB))}gb"
            gpu.add_mig(mig_uuid, gi, ci, memory_total, name=f"{name} MIG {label}")
        return gpu

    @classmethod
    def from_devices(
        cls,
        resources: Mapping[str, Sequence[tuple[str, NumaHint]]],
        *,
        seed: int = 0,
        clock: Callable[[], float] | None = None,
        gpu_name: str = "NVIDIA H100 80GB HBM3",
        mig_parent_name: str = "NVIDIA A100-SXM4-80GB",
        driver_version: str = "550.54.15",
    ) -> FakeNvml:
        """A plausible, animated fake for the GPU device ids a kubelet reports.

        ``resources`` maps a resource name to its ``(device id, NUMA node(s))``.
        Only ``nvidia.com/*`` resources are used: ``GPU-<uuid>`` ids are whole GPUs;
        ``GPU-<uuid>::<n>`` (time-slicing, MPS) the GPU ``GPU-<uuid>``, once;
        ``MIG-<uuid>`` ids MIG devices, packed seven slices to a MIG-enabled parent
        GPU (per NUMA node, sized by the ``mig-<g>g.<m>gb`` profile in the resource
        name); ``MIG-GPU-<uuid>/<gi>/<ci>`` a MIG device of ``GPU-<uuid>``; GKE's
        ``nvidia<N>``, ``nvidia<N>/vgpu<k>``, ``nvidia<N>/gi<k>`` likewise; other ids
        a GPU with a UUID derived from the id. GPUs get HGX PCI buses in NUMA order,
        NVML indexes in PCI order, a synthetic process per device (one per share
        on a shared GPU, none on the few left idle) and values that drift with
        :meth:`step`, seeded by ``seed``. With ``clock`` (e.g. ``time.monotonic``)
        the fake steps itself once per second of it; energy only grows.
        """
        fake = cls(seed=seed, clock=clock, driver_version=driver_version)
        rng = random.Random(seed)
        next_pid = 2000 + rng.randrange(1000)
        for position, plan in enumerate(_plan_devices(resources, gpu_name, mig_parent_name)):
            gpu = fake.add_gpu(
                plan.uuid,
                name=plan.name,
                pci_bus_id=f"0000:{_bus(position):02x}:00.0",
                numa_node=plan.numa,
                energy_mj=rng.randrange(10**9, 10**10),
                ecc_corrected=rng.choice((0, 0, 0, 1, 3)),
            )
            gpu.animated = True
            next_pid = _populate(gpu, plan, rng, next_pid)
        fake._rng = random.Random(seed + 1)
        fake.step()
        return fake

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
        del samples[:-_SAMPLE_BUFFER]
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
                device.gpu_instance_id if isinstance(device, FakeMigDevice) else _NO_INSTANCE
            ),
            computeInstanceId=(
                device.compute_instance_id if isinstance(device, FakeMigDevice) else _NO_INSTANCE
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
                self._animate(gpu, dt)
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

    def _animate(self, gpu: FakeGpu, dt: float) -> None:
        rng = self._rng
        limit = gpu.power_limit_mw
        if gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE:
            migs = [m for m in gpu.mig_devices if m is not None]
            for mig in migs:
                _walk_processes(mig.processes, mig.memory_total, rng)
                mig.memory_used = sum(p.used_memory or 0 for p in mig.processes)
            gpu.memory_used = sum(m.memory_used for m in migs) + 600 * _MIB
            load = sum(m.load for m in migs) / max(1, len(migs))
        else:
            load = gpu.load
            _walk_processes(gpu.processes, gpu.memory_total, rng)
            used = sum(p.used_memory or 0 for p in gpu.processes)
            gpu.memory_used = min(gpu.memory_total, used + 600 * _MIB)
        if load <= 0 or not (gpu.processes or gpu.mig_devices):
            util = 0.0
        else:
            util = gpu.utilization_gpu + 0.35 * (load * 100 - gpu.utilization_gpu)
            util = _clamp(util + rng.gauss(0, 6), 1, 100)
        gpu.utilization_gpu = round(util)
        gpu.utilization_memory = round(_clamp(util * 0.55 + rng.gauss(0, 3), 0, 100)) if util else 0
        idle = 0.1 * limit
        power = idle + (0.85 * limit - idle) * util / 100 + rng.gauss(0, 0.01 * limit)
        gpu.power_usage_mw = round(_clamp(power, 0.08 * limit, limit))
        target = 28 + 50 * gpu.power_usage_mw / limit
        gpu.temperature_c = round(gpu.temperature_c + 0.3 * (target - gpu.temperature_c))
        capped = gpu.power_usage_mw > 0.95 * limit
        if util == 0:
            gpu.sm_clock_mhz = 345
            gpu.clock_event_reasons = pynvml.nvmlClocksEventReasonGpuIdle
        else:
            gpu.sm_clock_mhz = gpu.max_sm_clock_mhz - (150 if capped else 0)
            gpu.clock_event_reasons = pynvml.nvmlClocksEventReasonSwPowerCap if capped else 0
        gpu.pcie_tx_kbps = round(util / 100 * rng.uniform(0.5e6, 4e6))
        gpu.pcie_rx_kbps = round(util / 100 * rng.uniform(0.5e6, 8e6))
        # NVML samples only processes that used the GPU in the window: none when idle.
        if gpu.mig_mode != pynvml.NVML_DEVICE_MIG_ENABLE and gpu.processes and util > 0:
            share = util / len(gpu.processes)
            for proc in gpu.processes:
                sm = round(_clamp(share + rng.gauss(0, 3), 0, 100))
                gpu.samples.append(
                    FakeSample(proc.pid, self.now_us, sm, round(_clamp(sm * 0.5, 0, 100)))
                )
            del gpu.samples[:-_SAMPLE_BUFFER]

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

    def _event_set(self, function: str, event_set: object, *, enter: bool = True) -> _EventSet:
        if enter:
            self._enter(function)
        if not isinstance(event_set, _EventSet) or event_set.freed:
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
        total, used = device.memory_total, device.memory_used
        if not version:
            return pynvml.c_nvmlMemory_t(total=total, free=total - used, used=used)
        return pynvml.c_nvmlMemory_v2_t(
            version=version, total=total, reserved=0, free=total - used, used=used
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
                    gpuInstanceId=_NO_INSTANCE if mig is None else mig.gpu_instance_id,
                    computeInstanceId=_NO_INSTANCE if mig is None else mig.compute_instance_id,
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
        event_set = _EventSet()
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
# NVMLError, its NVMLError_* subclasses and NVMLLibraryMismatchError.
_COPIED = re.compile(
    r"^(NVML_[A-Z0-9_]+|nvmlClocks(Event|Throttle)Reason\w+|nvmlEventType\w+|NVMLError\w*"
    r"|NVMLLibraryMismatchError)$"
)
for _name in dir(pynvml):
    if _COPIED.match(_name) and not hasattr(FakeNvml, _name):
        setattr(FakeNvml, _name, getattr(pynvml, _name))
del _name


# --------------------------------------------------------------------- helpers


def _bus(position: int) -> int:
    if position < len(_HGX_BUSES):
        return _HGX_BUSES[position]
    return 0x01 + position  # below the HGX buses, never one of them


def _first_numa(hint: NumaHint) -> int | None:
    if hint is None or isinstance(hint, int):
        return hint
    return hint[0] if len(hint) else None


def _mig_memory(profile: str, board_memory: int) -> int:
    """Memory of a MIG device of ``profile`` (``mig-1g.10gb``) on a board."""
    m = _MIG_PROFILE.match(profile)
    if m is None:
        return board_memory // 8
    return min(board_memory, int(m.group(2)) * 1000 * _MIB - 256 * _MIB)


def _mig_slices(profile: str) -> int:
    m = _MIG_PROFILE.match(profile)
    return 1 if m is None else max(1, min(7, int(m.group(1))))


def _pack_migs(
    pooled: list[tuple[str, int | None, str]],
    plans: dict[str, _PlannedGpu],
    parent_name: str,
) -> None:
    """Put MIG devices known only by UUID on parents: seven slices a GPU, per NUMA node."""
    by_numa: dict[int | None, list[tuple[str, str]]] = {}
    for mig_uuid, numa, profile in pooled:
        by_numa.setdefault(numa, []).append((mig_uuid, profile))
    for numa, migs in by_numa.items():
        current: _PlannedGpu | None = None
        used = 0
        for mig_uuid, profile in migs:
            slices = _mig_slices(profile)
            if current is None or used + slices > 7:
                uuid = _derived_uuid("GPU", f"mig-parent:{mig_uuid}")
                current = _PlannedGpu(uuid=uuid, numa=numa, name=parent_name)
                plans[uuid] = current
                used = 0
            current.migs.append((mig_uuid, None, 0, profile))
            used += slices


def _plan_devices(
    resources: Mapping[str, Sequence[tuple[str, NumaHint]]], gpu_name: str, mig_parent_name: str
) -> list[_PlannedGpu]:
    """The physical GPUs behind the kubelet's device ids, in NUMA order."""
    plans: dict[str, _PlannedGpu] = {}
    pooled: list[tuple[str, int | None, str]] = []  # (mig uuid, numa, profile)

    def planned(uuid: str, numa: int | None, name: str) -> _PlannedGpu:
        if uuid not in plans:
            plans[uuid] = _PlannedGpu(uuid=uuid, numa=numa, name=name)
        return plans[uuid]

    for resource, devices in resources.items():
        if not resource.startswith("nvidia.com/"):
            continue
        profile = resource.removeprefix("nvidia.com/")
        for device_id, numa_hint in devices:
            numa = _first_numa(numa_hint)
            base, replica = split_replica(device_id)
            found = resolve(resource, base)
            if found.kind is Kind.MIG and found.parent_uuid is not None:  # MIG-GPU-<uuid>/gi/ci
                plan = planned(found.parent_uuid, numa, mig_parent_name)
                if all(x[0] != base for x in plan.migs):
                    ci = found.compute_instance or 0
                    plan.migs.append((base, found.gpu_instance, ci, profile))
            elif found.kind is Kind.MIG:
                if all(x[0] != found.key for x in pooled):
                    pooled.append((found.key, numa, profile))
            elif found.kind is Kind.MIG_INDEX:
                plan = planned(_indexed_gpu_uuid(found.gpu_index), numa, mig_parent_name)
                mig_uuid = _derived_uuid("MIG", found.key)
                if all(x[0] != mig_uuid for x in plan.migs):
                    plan.migs.append((mig_uuid, found.gpu_instance, 0, profile))
            else:
                if found.kind is Kind.GPU_INDEX:
                    uuid = _indexed_gpu_uuid(found.gpu_index)
                    replica = found.replica if replica is None else replica  # nvidia<N>/vgpu<k>
                elif found.kind is Kind.GPU:
                    uuid = found.key
                else:  # an id NVML would not know: a GPU named after it
                    uuid = _derived_uuid("GPU", base)
                plan = planned(uuid, numa, gpu_name)
                if replica is not None:
                    plan.replicas += 1
    _pack_migs(pooled, plans, mig_parent_name)
    return sorted(plans.values(), key=lambda p: -1 if p.numa is None else p.numa)


def _populate(gpu: FakeGpu, plan: _PlannedGpu, rng: random.Random, next_pid: int) -> int:
    """Give a planned GPU its MIG devices, load and processes; returns the next free pid."""
    if plan.migs:
        for slot, (mig_uuid, gi, ci, profile) in enumerate(plan.migs):
            size = _mig_memory(profile, gpu.memory_total)
            mig = gpu.add_mig(
                mig_uuid,
                slot + 1 if gi is None else gi,
                ci,
                size,
                name=f"{gpu.name} MIG {_mig_label(profile, size)}",
            )
            mig.load = rng.uniform(0.2, 0.9)
            mig.processes.append(FakeProcess(next_pid, int(size * rng.uniform(0.3, 0.8))))
            next_pid += rng.randrange(3, 400)
        gpu.load = sum(m.load for m in gpu.mig_devices if m is not None) / len(plan.migs)
        return next_pid
    if plan.replicas == 0 and rng.random() < 1 / 6:
        gpu.load = 0.0  # allocated but idle: no process
        return next_pid
    gpu.load = rng.uniform(0.3, 0.95)
    sharers = max(1, plan.replicas)
    for _ in range(sharers):
        share = gpu.memory_total * rng.uniform(0.2, 0.8) / sharers
        gpu.processes.append(FakeProcess(next_pid, int(share)))
        next_pid += rng.randrange(3, 400)
    return next_pid


def _mig_label(profile: str, memory: int) -> str:
    """``1g.10gb`` from the resource name's profile, or from the memory."""
    if _MIG_PROFILE.match(profile):
        return profile.removeprefix("mig-")
    return f"{_mig_slices(profile)}g.{round(memory / (1000 * _MIB))}gb"


def _walk_processes(processes: Sequence[FakeProcess], capacity: int, rng: random.Random) -> None:
    """Drift each process's memory by a few percent, within the device."""
    if not processes:
        return
    limit = capacity * 0.95 / len(processes)
    for proc in processes:
        if proc.used_memory is not None:
            drifted = proc.used_memory * (1 + rng.gauss(0, 0.02))
            proc.used_memory = int(_clamp(drifted, 64 * _MIB, limit))
