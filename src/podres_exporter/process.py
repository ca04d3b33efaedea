"""What every command sets up the same way: logging, the stop signals, the listen socket.

* :func:`configure_logging`: ``--log-level`` and ``--log-format``, where ``auto``
  means JSON unless stderr is a terminal;
* :func:`stop_on_signals` / :func:`wait_for_signal`: SIGTERM and SIGINT end a wait
  and say which signal it was;
* :func:`listen`: the daemon's web server, or a ConfigError naming ``--listen-address``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any, TextIO

from podres_exporter import logconf
from podres_exporter.errors import ConfigError
from podres_exporter.web import Site, WebServer

__all__ = [
    "STOP_SIGNALS",
    "Stop",
    "configure_logging",
    "listen",
    "stop_on_signals",
    "wait_for_signal",
]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How often a wait looks for a stop signal or a set event.
_POLL_S = 0.1


def configure_logging(level: str, log_format: str, *, stream: TextIO | None = None) -> None:
    """Logging at ``level`` in ``log_format``: ``json``, ``console`` or ``auto`` (JSON
    unless the stream, stderr by default, is a terminal)."""
    json = None if log_format == "auto" else log_format == "json"
    logconf.configure(level, stream=stream, json=json)


class Stop:
    """A stop request: ``event`` and why it was set.

    A signal handler must not take a lock that the code it interrupts may hold:
    ``Event.set`` takes the event's lock, which the main thread holds for a moment in
    every ``Event.wait``, and would deadlock there. So the handler only records the
    signal (:meth:`signalled`) and :meth:`wait`, polling, turns it into the event.
    """

    def __init__(self, event: threading.Event | None = None) -> None:
        self.event = event if event is not None else threading.Event()
        self.reason = "stop requested"
        self._signal: str | None = None

    def signalled(self, signum: int) -> None:
        """Record a stop signal; safe in a signal handler (it takes no lock)."""
        self._signal = f"signal {signal.Signals(signum).name}"

    def wait(self) -> str:
        """Block until a stop signal or the event; the reason (``signal SIGTERM`` ...)."""
        while self._signal is None and not self.event.is_set():
            time.sleep(_POLL_S)  # a signal interrupts the sleep; its handler runs first
        if self._signal is not None:
            self.reason = self._signal
            self.event.set()
        return self.reason


@contextlib.contextmanager
def stop_on_signals(event: threading.Event | None = None) -> Iterator[Stop]:
    """While inside, SIGTERM and SIGINT end the :class:`Stop`'s wait (which then sets its
    event) and name themselves in its reason; ``event`` (when given) stops it too.

    Handlers are installed only on the main thread (elsewhere only ``event`` stops)
    and the previous ones are restored on leaving.
    """
    stop = Stop(event)

    def handler(signum: int, _frame: FrameType | None) -> None:
        stop.signalled(signum)

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


def wait_for_signal(event: threading.Event | None = None) -> str:
    """Block until SIGTERM or SIGINT (or ``event`` is set); the reason."""
    with stop_on_signals(event) as stop:
        return stop.wait()


def listen(address: tuple[str, int], site: Site) -> WebServer:
    """The web server for ``site`` bound to ``address`` (not serving yet).

    ConfigError naming ``--listen-address`` when the address cannot be bound.
    """
    try:
        return WebServer(address, site)
    except OSError as err:
        host, port = address
        shown = f"[{host}]" if ":" in host else host
        raise ConfigError(
            f"cannot listen on {shown}:{port} (--listen-address): {err.strerror or err}"
        ) from err
