"""What every command sets up the same way: logging, the stop signals, the listen socket.

* :func:`configure_logging`: ``--log-level`` and ``--log-format``, where ``auto``
  means JSON unless stderr is a terminal;
* :func:`ignore_hangup`: what a daemon command does first, so that a SIGHUP (whose
  default action ends the process) never ends it, starting or stopping;
* :func:`stop_on_signals`: SIGTERM and SIGINT end a wait
  and say which signal it was; SIGHUP runs the daemon's reload callbacks instead, on
  the waiting thread;
* :func:`listen`: the daemon's web server, or a ConfigError naming ``--listen-address``;
  with ``--web.config.file``, the :class:`~podres_exporter.daemon.web.config.WebConfigWatcher`
  that :func:`web_config` loads is what it asks for TLS, users and headers.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any, TextIO

import structlog

from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon import logconf
from podres_exporter.daemon.web import Site, WebServer
from podres_exporter.daemon.web.config import WebConfigWatcher

__all__ = [
    "RELOAD_SIGNAL",
    "STOP_SIGNALS",
    "Reload",
    "Stop",
    "configure_logging",
    "ignore_hangup",
    "listen",
    "stop_on_signals",
    "web_config",
]

log = structlog.get_logger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RELOAD_SIGNAL = signal.SIGHUP

Reload = Callable[[], object]
"""A reload callback: re-reads what the daemon can re-read (its web config, its resource
file); what it returns is ignored, what it raises is logged."""

# How often a wait looks whether its event was set (by another thread: nothing wakes it
# for that). A signal ends the wait at once. A daemon's main thread does nothing else,
# so this is its only wake-up: ten a second cost a steady 0.08 % of a core.
EVENT_POLL_S = 0.5


def configure_logging(level: str, log_format: str, *, stream: TextIO | None = None) -> None:
    """Logging at ``level`` in ``log_format``: ``json``, ``console`` or ``auto`` (JSON
    unless the stream, stderr by default, is a terminal)."""
    json = None if log_format == "auto" else log_format == "json"
    logconf.configure(level, stream=stream, json=json)


# Young objects are collected every this many net allocations (Python's default: 700).
# A poll of a large node allocates a few hundred thousand short-lived objects, which at
# 700 costs some 250 young collections a poll (10 % of the poll's CPU) and full ones
# that walk every object the process holds; cycles among them are rare.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """The daemons' garbage collector: what start-up made (modules, classes, settings)
    moved out of the collector's sight (``gc.freeze``), and young collections every
    :data:`GC_THRESHOLDS` allocations. Called once, before the daemon's threads start."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


# How long a thread holds the interpreter lock while another asks for it (Python's
# default: 5 ms). The web loop gives the lock up at each system call (accept, recv,
# sendmsg, sendfile, epoll_wait); while a poll runs Python in its threads, one of them
# takes it each time, and the loop waits up to this long to have it back, a few times a
# scrape. Outside a poll no thread asks, and the interval costs nothing.
SWITCH_INTERVAL_S = 0.0002


def tune_switch_interval() -> None:
    """The exporter's interpreter lock handed back after :data:`SWITCH_INTERVAL_S` to a
    thread that waits for it (``sys.setswitchinterval``): a scrape during a poll waits
    for the poll's Python a fraction of a millisecond at a time, not 5 ms."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


OPEN_FILES_WANTED = 8192


def raise_open_files_limit() -> int:
    """Raise the soft limit of open files to :data:`OPEN_FILES_WANTED`, or to the hard
    limit where that is lower (a container often starts at a soft 1,024 under a hard
    limit far above it; Go's runtime raises it the same way at start). The exporter keeps
    the device counter files open between polls (some 2,000 on a large GPU node). Returns
    the soft limit now; one that cannot be raised is left as it is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (OSError, ValueError) as err:
            log.warning("open_files_limit_kept", soft=soft, hard=hard, error=str(err))
            return soft
        return wanted
    return soft


def ignore_hangup() -> None:
    """Ignore SIGHUP from now on (on the main thread; elsewhere nothing): the daemon
    commands call it before they parse their settings, so that a SIGHUP while they start
    or stop is ignored rather than ending them; :func:`stop_on_signals` turns it into a
    reload while the daemon runs."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(RELOAD_SIGNAL, signal.SIG_IGN)


class Stop:
    """A stop request: ``event`` and why it was set; and the reload callbacks SIGHUP runs.

    A signal handler must not take a lock that the code it interrupts may hold:
    ``Event.set`` takes the event's lock, which the main thread holds for a moment in
    every ``Event.wait``, and would deadlock there; a reload callback takes locks and
    logs. So the handlers only record the signal (:meth:`signalled`, :meth:`hangup`)
    and write a byte to a pipe of the Stop's own, which :meth:`wait` watches: it wakes
    at once, turns a stop into the event and runs the reloads; a signal delivered to
    another thread wakes it through the same pipe (:func:`stop_on_signals` makes it the
    interpreter's wake-up fd). An event given, which another thread may set, is looked
    at every ``event_poll_s`` (:data:`EVENT_POLL_S`); without one, the wait sleeps until
    a signal (a daemon's idle main thread never wakes). :meth:`close` closes the pipe.
    """

    def __init__(
        self,
        event: threading.Event | None = None,
        reload: Iterable[Reload] = (),
        *,
        event_poll_s: float = EVENT_POLL_S,
    ) -> None:
        self.event = event if event is not None else threading.Event()
        self._poll_ms = None if event is None else event_poll_s * 1000  # None: no timeout
        self.reason = "stop requested"
        self.reloads: list[Reload] = list(reload)
        self._signal: str | None = None
        self._hangups = 0  # written by the handler only
        self._handled = 0  # written by wait only
        self._woken, self._wake = os.pipe()  # the handlers write, wait reads
        os.set_blocking(self._woken, False)
        os.set_blocking(self._wake, False)

    def signalled(self, signum: int) -> None:
        """Record a stop signal and wake the wait; safe in a signal handler (no lock)."""
        self._signal = f"signal {signal.Signals(signum).name}"
        self._wake_up()

    def hangup(self) -> None:
        """Record a SIGHUP and wake the wait; safe in a signal handler (no lock)."""
        self._hangups += 1
        self._wake_up()

    @property
    def wakeup_fd(self) -> int:
        """The write end of the wake-up pipe (for ``signal.set_wakeup_fd``)."""
        return self._wake

    def _wake_up(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe already wakes it; a closed one, none
            os.write(self._wake, b"!")

    def wait(self) -> str:
        """Block until a stop signal or the event; the reason (``signal SIGTERM`` ...).
        A SIGHUP meanwhile runs the reload callbacks here, then the wait goes on."""
        woken = select.poll()  # not select(): no limit on the descriptor's number
        woken.register(self._woken, select.POLLIN)
        while self._signal is None and not self.event.is_set():
            if self._hangups != self._handled:
                self._reload()
            elif woken.poll(self._poll_ms):
                with contextlib.suppress(BlockingIOError):
                    os.read(self._woken, 512)
        if self._signal is not None:
            self.reason = self._signal
            self.event.set()
        return self.reason

    def close(self) -> None:
        """Close the wake-up pipe (the handlers' writes then do nothing)."""
        fds, self._woken, self._wake = (self._woken, self._wake), -1, -1  # never a reused fd
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _reload(self) -> None:
        """One ``reload_requested`` event for the SIGHUPs seen since the last, then every
        callback; one that raises is logged and the others still run."""
        seen = self._hangups  # read once: the handler may add to it at any moment
        signals, self._handled = seen - self._handled, seen
        log.info(
            "reload_requested",
            signal=RELOAD_SIGNAL.name,
            signals=signals,
            callbacks=len(self.reloads),
        )
        for callback in self.reloads:
            try:
                callback()
            except Exception as err:  # noqa: BLE001 - a failed reload must not end the daemon
                log.error(
                    "reload_failed",
                    callback=getattr(callback, "__qualname__", repr(callback)),
                    error=repr(err),
                )


@contextlib.contextmanager
def stop_on_signals(
    event: threading.Event | None = None,
    *,
    reload: Iterable[Reload] = (),
    event_poll_s: float = EVENT_POLL_S,
    last: bool = False,
) -> Iterator[Stop]:
    """While inside, SIGTERM and SIGINT end the :class:`Stop`'s wait (which then sets its
    event) and name themselves in its reason; ``event`` (when given) stops it too.
    SIGHUP runs the ``reload`` callbacks (more can be appended to ``Stop.reloads``) from
    the waiting thread, never from the handler, and never ends the process.

    Handlers are installed only on the main thread (elsewhere only ``event`` stops)
    and the previous ones are restored on leaving; SIGHUP's is too, unless it was the
    default action, which would end a daemon during its shutdown: it is ignored instead.
    ``event_poll_s``: how often the wait looks at ``event``. ``last``: the process ends
    after this (a daemon's stop is inside): SIGTERM and SIGINT are then ignored rather
    than restored, so that one more during the interpreter's exit is no
    KeyboardInterrupt.
    """
    stop = Stop(event, reload, event_poll_s=event_poll_s)

    def handler(signum: int, _frame: FrameType | None) -> None:
        stop.signalled(signum)

    def hangup(_signum: int, _frame: FrameType | None) -> None:
        stop.hangup()

    previous: dict[signal.Signals, Any] = {}
    previous_wakeup: int | None = None
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, handler)
        previous[RELOAD_SIGNAL] = signal.signal(RELOAD_SIGNAL, hangup)
        # A signal may be delivered to any thread: the interpreter's own handler then
        # writes to this fd, which wakes the wait at once (the Python handlers run on
        # the main thread only, once it runs again).
        previous_wakeup = signal.set_wakeup_fd(stop.wakeup_fd, warn_on_full_buffer=False)
    try:
        yield stop
    finally:
        if previous_wakeup is not None:
            signal.set_wakeup_fd(previous_wakeup)
        for sig, h in previous.items():
            keep_alive = sig == RELOAD_SIGNAL and h in (signal.SIG_DFL, None)
            signal.signal(sig, signal.SIG_IGN if keep_alive or last else h)
        stop.close()


def web_config(path: str | None) -> WebConfigWatcher | None:
    """The ``--web.config.file`` watcher (not watching yet), None without a file; a
    ConfigError naming the file and the key when the file is wrong."""
    return WebConfigWatcher(path) if path else None


def listen(
    address: tuple[str, int], site: Site, *, web_config: WebConfigWatcher | None = None
) -> WebServer:
    """The web server for ``site`` bound to ``address`` (not serving yet), under the
    configuration ``web_config`` keeps (plain and open without one).

    ConfigError naming ``--listen-address`` when the address cannot be bound.
    """
    try:
        return WebServer(address, site, web_config=web_config.current if web_config else None)
    except OSError as err:
        host, port = address
        shown = f"[{host}]" if ":" in host else host
        raise ConfigError(
            f"cannot listen on {shown}:{port} (--listen-address): {err.strerror or err}"
        ) from err
