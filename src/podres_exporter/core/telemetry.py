"""Frozen telemetry readings: what the hardware sources return. Pure data, no I/O.

Every field that a source may not be able to read is Optional: ``None`` means
"not available on this device / driver", never zero. Counters are cumulative
since an arbitrary origin (driver load, boot) and only ever grow, except across
a reset of their source.

PCI addresses are always the full, lower-case form ``0000:af:02.1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from podres_exporter.core.kubeletfiles import DeviceCheckpoint, KubeletConfig
from podres_exporter.core.model import Holder


def _empty() -> Mapping[str, int]:
    return MappingProxyType({})


# ------------------------------------------------------------------------- GPUs

# Every clock-event (throttle) reason by short name, in NVML's bit order.
CLOCK_EVENT_REASONS: Final[tuple[str, ...]] = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks_setting",
)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process seen on a GPU (or MIG instance) by the driver.

    ``sm_ratio`` / ``memory_ratio``: the process's share of the device's SM and
    memory-controller time over the last sample window (0..1), when the driver
    gives per-process samples; ``used_memory_bytes`` when it gives memory.
    """

    pid: int
    used_memory_bytes: int | None = None
    sm_ratio: float | None = None
    memory_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU, or one MIG instance of a GPU (``parent_uuid`` set).

    ``uuid`` is the NVML UUID: ``GPU-...`` for a GPU, ``MIG-...`` for a MIG
    instance. ``healthy`` is False when the device failed to answer (lost, timed
    out); then ``error`` says why and the metric fields are None.
    """

    uuid: str
    index: int  # NVML index of the GPU (of the parent GPU for a MIG instance)
    name: str = ""
    pci_bus_id: str | None = None  # "0000:17:00.0"
    numa_node: int | None = None
    parent_uuid: str | None = None  # for a MIG instance
    gpu_instance_id: int | None = None  # for a MIG instance
    compute_instance_id: int | None = None  # for a MIG instance
    mig_enabled: bool | None = None  # for a GPU: current MIG mode
    healthy: bool = True
    error: str | None = None
    utilization_gpu_ratio: float | None = None
    utilization_memory_ratio: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules_total: float | None = None
    temperature_celsius: float | None = None
    sm_clock_hz: float | None = None
    memory_clock_hz: float | None = None
    # Active clock-event (throttle) reasons by short name, those of CLOCK_EVENT_REASONS
    # in its order.
    clock_event_reasons: tuple[str, ...] | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    # XID errors seen since the exporter started, by XID code (cumulative).
    xid_errors_total: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """Everything one read of the GPU backend returned.

    ``available`` is False when there is no driver / no GPU: "no data", not an
    error, and ``gpus`` is empty. ``error`` is set when the backend as a whole failed.
    """

    available: bool
    driver_version: str | None = None
    gpus: tuple[GpuReading, ...] = ()
    error: str | None = None


# ------------------------------------------------------------------------- sysfs


@dataclass(frozen=True, slots=True)
class PciReading:
    """One PCI function under ``bus/pci/devices``.

    ``aer_*``: AER error counters by name (``aer_dev_correctable`` etc. fields,
    e.g. ``{"RxErr": 0, "BadTLP": 1, "TOTAL_ERR_COR": 1}``); empty when the kernel
    has no AER for the device.
    """

    address: str
    numa_node: int | None = None  # None when sysfs says -1 (no affinity)
    vendor_id: str = ""  # "0x10de"
    device_id: str = ""  # "0x2330"
    class_id: str = ""  # "0x030200"
    driver: str | None = None
    physfn: str | None = None  # the PF's address when this is an SR-IOV VF
    link_speed_gts: float | None = None  # current_link_speed, GT/s
    link_width: int | None = None  # current_link_width, lanes
    max_link_speed_gts: float | None = None
    max_link_width: int | None = None
    aer_correctable: Mapping[str, int] = field(default_factory=_empty)
    aer_nonfatal: Mapping[str, int] = field(default_factory=_empty)
    aer_fatal: Mapping[str, int] = field(default_factory=_empty)
    temperature_celsius: float | None = None  # hwmon temp1_input
    power_watts: float | None = None  # hwmon power1_average or power1_input
    net_interfaces: tuple[str, ...] = ()  # names under net/
    infiniband_devices: tuple[str, ...] = ()  # names under infiniband/
    drm_cards: tuple[str, ...] = ()  # "card0" under drm/


@dataclass(frozen=True, slots=True)
class NetReading:
    """One network interface under ``class/net`` (statistics are counters)."""

    interface: str
    pci_address: str | None = None
    operstate: str = "unknown"  # "up", "down", "lowerlayerdown", ...
    carrier: bool | None = None
    speed_mbps: int | None = None
    rx_bytes: int | None = None
    tx_bytes: int | None = None
    rx_packets: int | None = None
    tx_packets: int | None = None
    rx_errors: int | None = None
    tx_errors: int | None = None
    rx_dropped: int | None = None
    tx_dropped: int | None = None


@dataclass(frozen=True, slots=True)
class IbPortReading:
    """One InfiniBand / RDMA port under ``class/infiniband/<dev>/ports/<n>``.

    ``counters``: every file of ``counters/`` and ``hw_counters/`` that holds an
    integer (``port_rcv_data``, ``port_xmit_data`` (in 4-byte words, as the kernel
    reports them), ``symbol_error``, ``link_downed`` ...).
    """

    device: str  # "mlx5_0"
    port: int
    pci_address: str | None = None
    state: str = ""  # "ACTIVE", "DOWN" ... (the word after "N: " in ports/N/state)
    rate: str = ""  # "200 Gb/sec (4X HDR)"
    counters: Mapping[str, int] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class DrmCardReading:
    """One DRM card (AMD or Intel GPU) under ``class/drm/cardN``."""

    card: str  # "card0"
    pci_address: str | None = None
    driver: str | None = None  # "amdgpu", "i915", "xe"
    busy_ratio: float | None = None  # amdgpu gpu_busy_percent / 100
    vram_used_bytes: int | None = None  # amdgpu mem_info_vram_used
    vram_total_bytes: int | None = None  # amdgpu mem_info_vram_total
    frequency_hz: float | None = None  # Intel gt_act_freq_mhz (or gt_cur_freq_mhz) * 1e6
    power_watts: float | None = None  # hwmon power1_average / power1_input
    energy_joules_total: float | None = None  # hwmon energy1_input
    temperature_celsius: float | None = None  # hwmon temp1_input


@dataclass(frozen=True, slots=True)
class SysfsDevices:
    """One read of the device telemetry under ``--path.sysfs``."""

    pci: tuple[PciReading, ...] = ()
    net: tuple[NetReading, ...] = ()
    infiniband: tuple[IbPortReading, ...] = ()
    drm: tuple[DrmCardReading, ...] = ()


# ------------------------------------------------------------------------- CPUs


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Cumulative time per CPU id since boot, from ``/proc/stat``, in seconds.

    ``busy`` is everything but idle and iowait; ``total`` includes them. Keyed by
    the kernel's CPU id (``cpu5`` -> 5), so offline CPUs are simply absent.
    """

    busy: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    total: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))


# ------------------------------------------------------------------------- processes


@dataclass(frozen=True, slots=True)
class CgroupRef:
    """The pod UID (dashed form) and container ID a cgroup file names, where it does."""

    pod_uid: str | None
    container_id: str | None


@dataclass(frozen=True, slots=True)
class ContainerIndex:
    """Container ID -> holder and pod UID -> (namespace, pod), from the kubelet's log names."""

    by_container_id: Mapping[str, Holder] = field(default_factory=lambda: MappingProxyType({}))
    by_pod_uid: Mapping[str, tuple[str, str]] = field(default_factory=lambda: MappingProxyType({}))


# ------------------------------------------------------------------------- all of it


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """How the latest attempt to read one telemetry source went.

    ``stale``: the value served is from an earlier read (this one failed or is
    still running past ``--source-timeout``).
    """

    ok: bool
    duration_s: float
    stale: bool = False
    error: str | None = None
    last_success: float | None = None  # unix time


@dataclass(frozen=True, slots=True)
class Telemetry:
    """The latest value of every telemetry source, with each source's status."""

    gpus: GpuInventory | None = None
    devices: SysfsDevices | None = None
    cpu_times: CpuTimes | None = None
    pid_cgroups: Mapping[int, CgroupRef] = field(default_factory=lambda: MappingProxyType({}))
    containers: ContainerIndex | None = None
    # The kubelet's own files (sources/kubeletconfig.py, sources/devicecheckpoint.py).
    kubelet_config: KubeletConfig | None = None
    device_checkpoint: DeviceCheckpoint | None = None
    sources: Mapping[str, SourceStatus] = field(default_factory=lambda: MappingProxyType({}))
