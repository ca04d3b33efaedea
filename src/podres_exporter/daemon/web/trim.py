"""Giving freed memory back to the system once a burst of connections has closed.

glibc's allocator keeps what a process frees for its next allocations: after a thousand
connections have come and gone, their buffers are free inside the process but still
count in its resident memory (and against its container's limit) until ``malloc_trim``
returns the free pages. :class:`Trimmer` calls it on the loop a moment after a burst of
closed connections, at most every :data:`TRIM_INTERVAL_S`, after a collection of the
young generations: what a closed connection leaves in reference cycles (asyncio keeps
the CancelledError of a cancelled wait with the frames that hold it; the server breaks
the larger cycle of a stream's exception itself, in ``send.drop``) would otherwise wait
for the daemons' collector, tuned for polls (``process.tune_gc``: young collections
every 50,000 allocations). Where the C library has no ``malloc_trim`` (musl, macOS)
only the collection is done: such allocators return memory by themselves, or not at
all.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import time
from collections.abc import Callable

import structlog

__all__ = ["TRIM_AFTER_CLOSED", "TRIM_INTERVAL_S", "Trimmer", "malloc_trim"]

log = structlog.get_logger(__name__)

# Connections closed since the last trim that make it worth one (a scrape closes a few a
# minute; a burst of clients closes hundreds).
TRIM_AFTER_CLOSED = 64
# At most one trim (a few tens of milliseconds on the loop) this often; the first waits
# this long after the burst began, so that a burst still closing is trimmed once.
TRIM_INTERVAL_S = 2.0


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _load_malloc_trim()


def malloc_trim() -> bool:
    """glibc's ``malloc_trim(0)``: free pages go back to the system. Whether it ran
    (False without glibc)."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class Trimmer:
    """Counts closed connections and trims after a burst of them (the loop's alone).

    ``schedule(delay, callback)`` runs ``callback`` after ``delay`` seconds (the loop's
    ``call_later``); ``trim`` is :func:`malloc_trim`, ``collect`` the collection of the
    young generations; ``clock`` is monotonic seconds."""

    def __init__(
        self,
        schedule: Callable[[float, Callable[[], None]], object],
        trim: Callable[[], bool] = malloc_trim,
        clock: Callable[[], float] = time.monotonic,
        collect: Callable[[], object] = lambda: gc.collect(1),
    ) -> None:
        self._schedule = schedule
        self._trim = trim
        self._collect = collect
        self._clock = clock
        self._closed = 0
        self._pending = False
        self.trims = 0

    def closed(self) -> None:
        """One connection closed."""
        self._closed += 1
        if self._closed >= TRIM_AFTER_CLOSED and not self._pending:
            self._pending = True
            self._schedule(TRIM_INTERVAL_S, self._run)

    def _run(self) -> None:
        self._pending = False
        self._closed = 0
        start = self._clock()
        self._collect()
        if self._trim():
            self.trims += 1
            log.debug("http_memory_trimmed", duration_s=round(self._clock() - start, 4))
