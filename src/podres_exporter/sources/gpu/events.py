"""XID errors, counted from one NVML event set.

The set is registered for ``nvmlEventTypeXidCriticalError`` on every GPU at init (and
on any GPU that could not be registered then, at the next read that reaches it), and
drained without blocking (timeout 0) at each read. Counts accumulate per GPU (a MIG
instance's XIDs count on its parent) and per XID code for the life of the backend.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import Any, Final

import structlog

from podres_exporter.sources.gpu.calls import LibraryGone, Nvml, handle_key, text
from podres_exporter.sources.gpu.fields import MigIdentity
from podres_exporter.sources.gpu.structs import EventData

__all__ = ["XidEvents"]

log = structlog.get_logger(__name__)

# At most this many events are taken off the event set per read, so a flood of
# events cannot stall a read.
_MAX_EVENTS_PER_READ: Final = 4096


class XidEvents:
    """The event set of one NVML session, and the XID counts of the backend's life."""

    def __init__(self) -> None:
        self.event_set: Any = None
        self._registered: dict[str, bool] = {}  # uuid -> registered (False: unsupported)
        self._key_to_uuid: dict[Hashable, str] = {}  # device handle key -> GPU uuid
        self._counts: dict[str, dict[int, int]] = {}  # GPU uuid -> XID code -> count

    def open(self, nvml: Nvml) -> None:
        """Create the event set and register every GPU (best effort: reads retry the rest)."""
        try:
            self.event_set = nvml.lib.nvmlEventSetCreate()
        except nvml.error as err:
            log.warning("nvml_event_set_unavailable", error=str(err))
            self.event_set = None
        self._register_all(nvml)

    def free(self, nvml: Nvml) -> None:
        """Free the event set (ignoring errors: NVML may be gone) and forget the handles;
        the counts stay."""
        if self.event_set is not None:
            try:
                nvml.lib.nvmlEventSetFree(self.event_set)
            except nvml.error as err:
                log.debug("nvml_event_set_free_failed", error=str(err))
        self.forget()

    def forget(self) -> None:
        """Drop the event set and the handles known, without calling NVML."""
        self.event_set = None
        self._registered.clear()
        self._key_to_uuid.clear()

    def remember(self, handle: Any, uuid: str) -> None:
        """Count the events of the device ``handle`` on the GPU ``uuid``."""
        self._key_to_uuid[handle_key(handle)] = uuid

    def _register_all(self, nvml: Nvml) -> None:
        lib = nvml.lib
        if self.event_set is None:
            return
        try:
            count = int(lib.nvmlDeviceGetCount())
        except nvml.error:
            return
        for index in range(count):
            try:
                handle = lib.nvmlDeviceGetHandleByIndex(index)
                uuid = text(lib.nvmlDeviceGetUUID(handle))
            except nvml.error:
                continue
            self.register(nvml, handle, uuid)

    def register(self, nvml: Nvml, handle: Any, uuid: str) -> None:
        """Register the GPU for XID events, unless it was (or cannot be)."""
        lib = nvml.lib
        if self.event_set is None or uuid in self._registered:
            return
        try:
            lib.nvmlDeviceRegisterEvents(handle, lib.nvmlEventTypeXidCriticalError, self.event_set)
        except nvml.error as err:
            if getattr(err, "value", None) in nvml.codes.absent:
                self._registered[uuid] = False
            return
        self._registered[uuid] = True

    def drain(self, nvml: Nvml, migs: Mapping[str, tuple[MigIdentity, ...]]) -> None:
        """Count the events waiting; ``migs``: each GPU's MIG devices, whose events count
        on it."""
        lib = nvml.lib
        if self.event_set is None:
            return
        xid_mask = int(lib.nvmlEventTypeXidCriticalError)
        for _ in range(_MAX_EVENTS_PER_READ):
            try:
                data: EventData = lib.nvmlEventSetWait(self.event_set, 0)
            except nvml.error as err:
                code = getattr(err, "value", None)
                if code in nvml.codes.library_gone:
                    raise LibraryGone(f"nvmlEventSetWait: {err}") from err
                if code != lib.NVML_ERROR_TIMEOUT:  # TIMEOUT: no more events
                    log.debug("nvml_event_wait_failed", error=str(err))
                return
            if not int(data.eventType) & xid_mask:
                continue
            uuid = self._event_uuid(nvml, data.device, migs)
            if uuid is None:
                log.warning("nvml_xid_unattributed", xid=int(data.eventData))
                continue
            counts = self._counts.setdefault(uuid, {})
            xid = int(data.eventData)
            counts[xid] = counts.get(xid, 0) + 1

    def _event_uuid(
        self, nvml: Nvml, device: Any, migs: Mapping[str, tuple[MigIdentity, ...]]
    ) -> str | None:
        uuid = self._key_to_uuid.get(handle_key(device))
        if uuid is not None:
            return uuid
        try:
            uuid = text(nvml.lib.nvmlDeviceGetUUID(device))
        except nvml.error:
            return None
        for parent, devices in migs.items():
            if any(m.uuid == uuid for m in devices):
                return parent
        return uuid

    def counts_of(self, uuid: str) -> Mapping[int, int]:
        """The GPU's XID counts by code."""
        return MappingProxyType(dict(sorted(self._counts.get(uuid, {}).items())))
