"""One reading of every GPU (:class:`GpuReader`), on an initialised NVML.

Every query is guarded on its own (:mod:`.calls`): a value NVML does not give leaves its
field None. A GPU whose query says it is lost or hung, or that has no handle for its
index, is reported ``healthy=False`` with ``error`` set and no metric fields, under the
identity last known for its index (with its MIG instances); the other GPUs keep
flowing, and the GPU is healthy again on the first read that works.

A GPU whose handle lookup answers ``NO_PERMISSION`` is left out, logged once: NVML's
device count includes the GPUs this process may not talk to (a container given some
of the node's GPUs), and such a GPU is not ours to report, nor a failed one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from podres_exporter.core.telemetry import GpuInventory, GpuReading
from podres_exporter.sources.gpu.calls import DeviceFailed, LibraryGone, Nvml, text
from podres_exporter.sources.gpu.events import XidEvents
from podres_exporter.sources.gpu.fields import (
    Identity,
    MigIdentity,
    SlowFields,
    clock_event_reasons,
    memory_info,
    milli,
    ratio,
    scaled,
)
from podres_exporter.sources.gpu.mig import Tracking, read_migs, unhealthy
from podres_exporter.sources.gpu.processes import ProcessSampler
from podres_exporter.sources.gpu.structs import Memory, PciInfo, Utilization, pci_bus_id_from_nvml

__all__ = ["GpuReader"]

log = structlog.get_logger(__name__)


class GpuReader:
    """Reads the GPUs NVML lists, with what it keeps from read to read: each GPU's
    identity (asked once per UUID), its MIG devices, its slow fields, the XID events
    and process samples (:attr:`tracking`), and which devices were failing."""

    def __init__(self, nvml: Nvml, slow_interval_s: float, clock: Callable[[], float]) -> None:
        self._nvml = nvml
        self.slow = SlowFields(slow_interval_s, clock)
        self.tracking = Tracking(XidEvents(), ProcessSampler())
        self._by_index: dict[int, Identity] = {}
        self._identity: dict[str, Identity] = {}  # uuid -> complete identity
        self._migs: dict[str, tuple[MigIdentity, ...]] = {}  # parent uuid -> its MIG devices
        self._failing: set[str] = set()  # devices reported unhealthy by the last read
        self._not_permitted: set[int] = set()  # indices NVML says we may not talk to

    def read(self, driver_version: str | None) -> GpuInventory:
        """Every GPU, in NVML's index order. Raises LibraryGone when NVML is unusable,
        DeviceFailed from a query that is not about one GPU."""
        nvml = self._nvml
        count = nvml.get(nvml.lib.nvmlDeviceGetCount)
        if count is None:
            raise LibraryGone("nvmlDeviceGetCount answered nothing")
        self.tracking.events.drain(nvml, self._migs)
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
            driver_version=driver_version,
            gpus=tuple(readings),
        )

    def _read_gpu(self, index: int) -> list[GpuReading]:
        """The GPU at ``index`` and its MIG devices (unhealthy readings when it fails)."""
        nvml = self._nvml
        ident = self._by_index.get(index, Identity(uuid=""))
        try:
            handle = nvml.lib.nvmlDeviceGetHandleByIndex(index)
        except nvml.error as err:
            code = getattr(err, "value", None)
            if code in nvml.codes.library_gone:
                raise LibraryGone(f"nvmlDeviceGetHandleByIndex: {err}") from err
            if code == nvml.lib.NVML_ERROR_NO_PERMISSION:
                if index not in self._not_permitted:
                    self._not_permitted.add(index)
                    log.info("gpu_not_permitted", index=index, error=str(err))
                return []
            return self._unhealthy_gpu(index, ident, f"nvmlDeviceGetHandleByIndex: {err}")
        self._not_permitted.discard(index)
        try:
            uuid = nvml.get(nvml.lib.nvmlDeviceGetUUID, handle)
            if uuid is None:
                raise DeviceFailed("nvmlDeviceGetUUID answered nothing")
            ident = self._identify(handle, index, text(uuid))
            return self._read_healthy_gpu(handle, index, ident)
        except DeviceFailed as err:
            return self._unhealthy_gpu(index, ident, str(err))

    def _unhealthy_gpu(self, index: int, ident: Identity, error: str) -> list[GpuReading]:
        migs = self._migs.get(ident.uuid, ()) if ident.uuid else ()
        return unhealthy(index, ident, error, self.tracking.events.counts_of(ident.uuid), migs)

    def _identify(self, handle: Any, index: int, uuid: str) -> Identity:
        """The GPU's name, PCI address and NUMA node: asked once per UUID, then kept."""
        ident = self._identity.get(uuid)
        if ident is None:
            nvml = self._nvml
            lib = nvml.lib
            name = nvml.get(lib.nvmlDeviceGetName, handle)
            pci: PciInfo | None = nvml.get(lib.nvmlDeviceGetPciInfo, handle)
            numa: int | None = None
            numa_fn = getattr(lib, "nvmlDeviceGetNumaNodeId", None)
            if numa_fn is not None:
                numa = nvml.get_int(numa_fn, handle)
            ident = Identity(
                uuid=uuid,
                name="" if name is None else text(name),
                pci_bus_id=None if pci is None else pci_bus_id_from_nvml(pci.busId),
                numa_node=numa if numa is not None and numa >= 0 else None,
            )
            self._identity[uuid] = ident
        self._by_index[index] = ident
        events = self.tracking.events
        events.remember(handle, uuid)
        events.register(self._nvml, handle, uuid)
        return ident

    def _read_healthy_gpu(self, handle: Any, index: int, ident: Identity) -> list[GpuReading]:
        nvml = self._nvml
        lib = nvml.lib
        mig_mode = nvml.get(lib.nvmlDeviceGetMigMode, handle)
        mig_enabled = None if mig_mode is None else int(mig_mode[0]) == lib.NVML_DEVICE_MIG_ENABLE
        util: Utilization | None = nvml.get(lib.nvmlDeviceGetUtilizationRates, handle)
        mem: Memory | None = memory_info(nvml, handle)
        slow = self.slow.read(nvml, handle, ident.uuid)
        rows = slow.remapped_rows
        events, processes = self.tracking
        gpu = GpuReading(
            uuid=ident.uuid,
            index=index,
            name=ident.name,
            pci_bus_id=ident.pci_bus_id,
            numa_node=ident.numa_node,
            mig_enabled=mig_enabled,
            utilization_gpu_ratio=None if util is None else ratio(util.gpu),
            utilization_memory_ratio=None if util is None else ratio(util.memory),
            memory_used_bytes=None if mem is None else int(mem.used),
            memory_total_bytes=None if mem is None else int(mem.total),
            power_watts=milli(nvml.get_int(lib.nvmlDeviceGetPowerUsage, handle)),
            power_limit_watts=slow.power_limit_watts,
            energy_joules_total=milli(
                nvml.get_int(lib.nvmlDeviceGetTotalEnergyConsumption, handle)
            ),
            temperature_celsius=scaled(
                nvml.get_int(lib.nvmlDeviceGetTemperature, handle, lib.NVML_TEMPERATURE_GPU), 1.0
            ),
            sm_clock_hz=scaled(
                nvml.get_int(lib.nvmlDeviceGetClockInfo, handle, lib.NVML_CLOCK_SM), 1e6
            ),
            memory_clock_hz=scaled(
                nvml.get_int(lib.nvmlDeviceGetClockInfo, handle, lib.NVML_CLOCK_MEM), 1e6
            ),
            clock_event_reasons=clock_event_reasons(nvml, handle),
            pcie_tx_bytes_per_second=slow.pcie_tx_bytes_per_second,
            pcie_rx_bytes_per_second=slow.pcie_rx_bytes_per_second,
            ecc_corrected_total=slow.ecc_corrected_total,
            ecc_uncorrected_total=slow.ecc_uncorrected_total,
            remapped_rows_correctable=None if rows is None else int(rows[0]),
            remapped_rows_uncorrectable=None if rows is None else int(rows[1]),
            remapped_rows_pending=None if rows is None else bool(rows[2]),
            remapped_rows_failure=None if rows is None else bool(rows[3]),
            xid_errors_total=events.counts_of(ident.uuid),
            processes=() if mig_enabled else processes.read(nvml, handle, ident.uuid),
        )
        if not mig_enabled:
            self._migs.pop(ident.uuid, None)
            return [gpu]
        migs, idents = read_migs(nvml, handle, index, ident, self.tracking)
        self._migs[ident.uuid] = idents
        return [gpu, *migs]
