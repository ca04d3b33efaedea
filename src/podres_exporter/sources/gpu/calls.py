"""Calls into the injected pynvml module, each guarded by what its return code means.

* ``NOT_SUPPORTED``, ``NO_PERMISSION``, ``FUNCTION_NOT_FOUND`` (an older driver),
  ``ARGUMENT_VERSION_MISMATCH`` (a driver without that version of the result structure),
  ``NOT_FOUND``, ``NO_DATA``: the value is not there (None).
* ``GPU_IS_LOST``, ``TIMEOUT``, ``UNKNOWN``, ``RESET_REQUIRED``, ``IRQ_ISSUE``: the
  device is gone or hung (:class:`DeviceFailed`).
* ``UNINITIALIZED``, ``DRIVER_NOT_LOADED``, a missing library or a library/driver
  version mismatch: NVML itself is unusable (:class:`LibraryGone`).
* Any other code: None, logged once per function and code.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import structlog

__all__ = ["Codes", "DeviceFailed", "LibraryGone", "Nvml", "handle_key", "text"]

log = structlog.get_logger(__name__)


class DeviceFailed(Exception):
    """A query said the device is gone or hung: the device is reported unhealthy."""


class LibraryGone(Exception):
    """A query said NVML itself is unusable (uninitialised, driver unloaded)."""


@dataclass(slots=True)
class Codes:
    """NVML return codes by what they mean to this backend."""

    absent: frozenset[int] = field(default_factory=frozenset)
    device_fatal: frozenset[int] = field(default_factory=frozenset)
    library_gone: frozenset[int] = field(default_factory=frozenset)
    absent_at_init: frozenset[int] = field(default_factory=frozenset)


def _codes(nvml: Any) -> Codes:
    return Codes(
        absent=frozenset(
            {
                nvml.NVML_SUCCESS,  # pynvml raises it when a sample query finds nothing
                nvml.NVML_ERROR_NOT_SUPPORTED,
                nvml.NVML_ERROR_NO_PERMISSION,
                nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
                nvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
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


class Nvml:
    """The pynvml module (``lib``, or a fake of it) with its error classes and codes.

    ``error`` is ``NVMLError``; ``mismatch`` what pynvml raises (not an NVMLError) from
    unversioned functions whose newest version the driver lacks, treated like
    ``FUNCTION_NOT_FOUND``.
    """

    __slots__ = ("_warned", "codes", "error", "lib", "mismatch")

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.error: type[Exception] = lib.NVMLError
        self.mismatch: type[Exception] = getattr(lib, "NVMLLibraryMismatchError", self.error)
        self.codes = _codes(lib)
        self._warned: set[tuple[str, int]] = set()

    def get(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None when NVML says the value is not there.

        Raises DeviceFailed / LibraryGone for the codes that mean so.
        """
        try:
            return fn(*args)
        except self.error as err:
            code = getattr(err, "value", None)
            name = str(getattr(fn, "__name__", "nvml"))
            if code in self.codes.absent:
                return None
            if code in self.codes.device_fatal:
                raise DeviceFailed(f"{name}: {err}") from err
            if code in self.codes.library_gone:
                raise LibraryGone(f"{name}: {err}") from err
            if isinstance(code, int) and (name, code) not in self._warned:
                self._warned.add((name, code))
                log.warning("nvml_query_failed", function=name, code=code, error=str(err))
            return None
        except self.mismatch:
            return None

    def get_int(self, fn: Callable[..., Any], *args: Any) -> int | None:
        value = self.get(fn, *args)
        return None if value is None else int(value)


def handle_key(handle: Any) -> Hashable:
    """A key equal for two handles of the same device (ctypes pointers compare by address)."""
    if isinstance(handle, ctypes._Pointer):
        return ("nvml-device", ctypes.cast(handle, ctypes.c_void_p).value)
    if isinstance(handle, Hashable):
        return handle
    return ("object", id(handle))


def text(value: Any) -> str:
    """An NVML string (bytes from older pynvml) as text."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)
