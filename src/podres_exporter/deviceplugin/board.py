"""The latest inventory of one resource, shared between the health loop and the streams.

The health loop (:class:`~podres_exporter.deviceplugin.monitor.Monitor`) publishes to
a :class:`Board`; the resource's ``DevicePlugin`` service reads it and its
ListAndWatch streams wait on it for the next change.
"""

from __future__ import annotations

import threading

from podres_exporter.deviceplugin.inventory import ResourceInventory

__all__ = ["Board"]


class Board:
    """The latest inventory of one resource; waiters wake on every change. Thread-safe."""

    def __init__(self, inventory: ResourceInventory) -> None:
        self._cond = threading.Condition()
        self._inventory = inventory
        self._version = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def current(self) -> tuple[int, ResourceInventory]:
        with self._cond:
            return self._version, self._inventory

    def publish(self, inventory: ResourceInventory) -> None:
        with self._cond:
            self._inventory = inventory
            self._version += 1
            self._cond.notify_all()

    def wait(self, version: int, timeout: float) -> int:
        """Block until the version differs from ``version``, the board closes, someone
        pokes, or ``timeout`` passes; return the current version."""
        with self._cond:
            if self._version == version and not self._closed:
                self._cond.wait(timeout)
            return self._version

    def poke(self) -> None:
        """Wake every waiter (a stream was cancelled and must notice)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        """No more changes: waiters return at once, streams end."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
