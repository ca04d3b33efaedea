"""The fake NVML's hardware: GPUs, MIG devices, processes, samples and events, as
plain mutable dataclasses in NVML's units (percent, mW, mJ, MHz, KB/s), and the
models and PCI buses a new GPU takes its defaults from.

Each GPU and MIG device is its own NVML handle. ``nvml.fake`` answers the pynvml
functions from these; tests mutate them freely.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import pynvml

__all__ = [
    "DEFAULT_MODEL",
    "GIB",
    "MIB",
    "MODELS",
    "NO_INSTANCE",
    "SAMPLE_BUFFER",
    "EventSet",
    "FakeEventData",
    "FakeGpu",
    "FakeMigDevice",
    "FakeProcess",
    "FakeSample",
    "GpuModel",
    "derived_uuid",
    "hgx_bus",
]

GIB: Final = 1 << 30
MIB: Final = 1 << 20
NO_INSTANCE: Final = 0xFFFFFFFF  # NVML's gpuInstanceId/computeInstanceId outside MIG
SAMPLE_BUFFER: Final = 128  # NVML keeps a short ring of process samples per device


def derived_uuid(prefix: str, text: str) -> str:
    """A UUID-shaped id (``prefix``-8-4-4-4-12 hex) derived from ``text``."""
    h = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


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
    memory_reserved: int = 0  # set aside by the driver: "used" to version 1 only
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
    memory_total: int = 81559 * MIB
    memory_used: int = 0  # allocated
    # Set aside by the driver and firmware: nvmlDeviceGetMemoryInfo version 1 counts it in
    # "used", version 2 answers it apart (as real drivers do).
    memory_reserved: int = 0
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
        memory_total: int = 10 * GIB,
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
    gpuInstanceId: int = NO_INSTANCE  # noqa: N815 - NVML's field name
    computeInstanceId: int = NO_INSTANCE  # noqa: N815 - NVML's field name


class EventSet:
    """An NVML event set: registrations and the queue of pending events."""

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # id(FakeGpu) -> event type mask
        self.pending: deque[FakeEventData] = deque()
        self.freed = False


@dataclass(frozen=True)
class GpuModel:
    """A GPU model's defaults: memory, power limit and clocks, and the functions that
    answer NOT_SUPPORTED on such a board (``unsupported``)."""

    memory_total: int
    power_limit_mw: int
    max_sm_clock_mhz: int
    memory_clock_mhz: int
    unsupported: frozenset[str] = frozenset()


# What NVML's reference says older and consumer boards lack: MIG (Ampere data-centre
# boards and later), row remapping (Ampere and later), the energy counter (Volta and
# later), ECC (data-centre boards), and MIG handles.
_NO_MIG: Final = frozenset({"nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount"})
_NO_REMAPPING: Final = frozenset({"nvmlDeviceGetRemappedRows"})
_NO_ECC: Final = frozenset({"nvmlDeviceGetTotalEccErrors"})

MODELS: Final[Mapping[str, GpuModel]] = {
    "NVIDIA H100 80GB HBM3": GpuModel(81559 * MIB, 700_000, 1980, 2619),
    "NVIDIA A100-SXM4-80GB": GpuModel(81920 * MIB, 400_000, 1410, 1593),
    "NVIDIA A100-SXM4-40GB": GpuModel(40960 * MIB, 400_000, 1410, 1215),
    "NVIDIA L40S": GpuModel(46068 * MIB, 350_000, 2520, 9001, _NO_MIG),
    # Turing: no MIG, no row remapping (it retires pages instead).
    "Tesla T4": GpuModel(15360 * MIB, 70_000, 1590, 5001, _NO_MIG | _NO_REMAPPING),
    # Volta: the same.
    "Tesla V100-SXM2-32GB": GpuModel(32768 * MIB, 300_000, 1530, 877, _NO_MIG | _NO_REMAPPING),
    # A consumer board: no ECC, no MIG, no row remapping.
    "NVIDIA GeForce RTX 3090": GpuModel(
        24576 * MIB, 350_000, 1995, 9751, _NO_MIG | _NO_REMAPPING | _NO_ECC
    ),
    # Kepler: no energy counter either.
    "Tesla K80": GpuModel(
        11441 * MIB,
        149_000,
        875,
        2505,
        _NO_MIG | _NO_REMAPPING | {"nvmlDeviceGetTotalEnergyConsumption"},
    ),
}
DEFAULT_MODEL: Final = MODELS["NVIDIA H100 80GB HBM3"]
# PCI buses of the eight GPUs of a typical HGX board, lowest first.
HGX_BUSES: Final = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def hgx_bus(position: int) -> int:
    """The PCI bus of the GPU at ``position``: an HGX board's, then buses below them."""
    if position < len(HGX_BUSES):
        return HGX_BUSES[position]
    return 0x01 + position  # below the HGX buses, never one of them
