"""A resource's board: the latest inventory, and a wake-up for whoever waits on it."""

from __future__ import annotations

import threading
import time

from podres_exporter.deviceplugin.board import Board
from podres_exporter.deviceplugin.inventory import Device, ResourceInventory

RESOURCE = "example.com/r"
EMPTY = ResourceInventory.of(RESOURCE, (), {})
ONE = ResourceInventory.of(RESOURCE, (Device("a", "a", None, True),), {})


def waiting(board: Board, version: int, timeout: float = 5.0) -> tuple[threading.Thread, list[int]]:
    """``board.wait(version, timeout)`` on a thread of its own; its answer lands in the list."""
    got: list[int] = []
    thread = threading.Thread(target=lambda: got.append(board.wait(version, timeout)))
    thread.start()
    return thread, got


def test_publish_moves_the_version_on_and_wakes_waiters() -> None:
    board = Board(EMPTY)
    assert board.current() == (0, EMPTY)
    thread, got = waiting(board, 0)
    time.sleep(0.05)
    board.publish(ONE)
    thread.join(2)
    assert got == [1]
    assert board.current() == (1, ONE)


def test_wait_returns_at_once_for_an_old_version_or_a_closed_board() -> None:
    board = Board(EMPTY)
    board.publish(ONE)
    started = time.monotonic()
    assert board.wait(0, 5.0) == 1
    board.close()
    assert board.closed
    assert board.wait(1, 5.0) == 1
    assert time.monotonic() - started < 1.0


def test_a_poke_wakes_waiters_without_a_change_and_a_timeout_ends_the_wait() -> None:
    board = Board(EMPTY)
    thread, got = waiting(board, 0, timeout=30.0)
    deadline = time.monotonic() + 5.0
    while thread.is_alive() and time.monotonic() < deadline:  # until the waiter is waiting
        board.poke()
        thread.join(0.01)
    assert got == [0]
    started = time.monotonic()
    assert board.wait(0, 0.05) == 0
    assert time.monotonic() - started >= 0.04
