"""structlog set-up: JSON lines or readable console lines, each of bounded size.

Commands configure it through :func:`podres_exporter.daemon.process.configure_logging`.

What an event carries often comes from a peer: the kubelet's error texts, the ids in an
Allocate request, a device's name. :func:`bound_values` caps every event whatever its
values hold (a 1 MB id, a list of 10,000), and console lines, bound for a terminal,
show control characters escaped (:func:`console_safe`); JSON escapes them itself.

A log line that cannot be written (the pipe behind stderr closed, the disk is full) is
dropped and counted (:func:`dropped_lines`), never raised into the code that logged it: a
daemon keeps running without its log. The commands that print a result use
:func:`output_failed` for a standard output that cannot be written.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import reprlib
import sys
import threading
from collections.abc import Mapping, MutableMapping
from typing import Any, Final, TextIO, cast

import structlog

from podres_exporter.core.printable import cut, printable

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("auto", "json", "console")

MAX_STRING: Final = 512
"""Characters of a string value kept; the rest is counted: ``…(+N chars)``."""
MAX_ITEMS: Final = 32
"""Items of a list, tuple, set or mapping kept; the rest is counted: ``+N more``."""
MAX_TRACEBACK: Final = 8192
"""Characters kept of a formatted traceback (``exception``, ``stack``)."""
_TRACEBACK_KEYS: Final = frozenset({"exception", "stack"})
# Deeper down, less: a container inside a container keeps 8 items, and the strings in it
# 64 characters; a third level of containers is logged as its short repr.
_INNER_ITEMS: Final = 8
_INNER_STRING: Final = 64


def _make_short_repr() -> reprlib.Repr:
    short = reprlib.Repr()  # keyword arguments only from Python 3.12
    short.maxlevel = 1
    short.maxlist = short.maxtuple = short.maxset = short.maxfrozenset = 4
    short.maxdict = short.maxdeque = short.maxarray = 4
    short.maxstring = short.maxother = short.maxlong = _INNER_STRING
    return short


_SHORT: Final = _make_short_repr()


def _bound(value: Any, limit: int, depth: int = 0) -> Any:
    """``value`` within the bounds at ``depth`` (0: an event's value); the same object when
    it is within them already."""
    if depth > 1:
        limit = _INNER_STRING
    if isinstance(value, str):
        return cut(value, limit)
    if isinstance(value, bytes | bytearray):
        if len(value) > limit:
            value = bytes(value[:limit]) + f"…(+{len(value) - limit} bytes)".encode()
        return value
    if isinstance(value, list | tuple | set | frozenset | Mapping):
        return _short_repr(value, limit) if depth > 1 else _bound_items(value, limit, depth)
    return value


def _short_repr(value: Any, limit: int) -> str:
    return cut(_SHORT.repr(value), limit)


def _bound_items(
    value: list[Any] | tuple[Any, ...] | set[Any] | frozenset[Any] | Mapping[Any, Any],
    limit: int,
    depth: int,
) -> Any:
    """A container's first items (:data:`MAX_ITEMS`, 8 deeper down), each bounded, and
    how many more there were."""
    room = MAX_ITEMS if depth == 0 else _INNER_ITEMS
    more = len(value) - room
    if isinstance(value, Mapping):
        items = {
            _bound(k, limit, depth + 1): _bound(v, limit, depth + 1)
            for k, v in itertools.islice(value.items(), room)
        }
        if more > 0:
            items["…"] = f"+{more} more"
        return items
    kept = [_bound(v, limit, depth + 1) for v in itertools.islice(value, room)]
    if more <= 0 and all(a is b for a, b in zip(kept, value, strict=False)):
        return value
    if more > 0:
        kept.append(f"+{more} more")
    return tuple(kept) if isinstance(value, tuple) else kept


def bound_values(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: every value of the event within :data:`MAX_STRING` characters
    and :data:`MAX_ITEMS` items (tracebacks within :data:`MAX_TRACEBACK`), so no peer's
    data can make one event megabytes long."""
    return {
        key: _bound(value, MAX_TRACEBACK if key in _TRACEBACK_KEYS else MAX_STRING)
        for key, value in event_dict.items()
    }


# ----------------------------------------------------------------- console lines


def console_safe(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    r"""A structlog processor for console lines: control characters in string values and
    keys (escape sequences, line breaks, C1, bidi overrides) show escaped, ``\x1b`` as
    Python writes them; a traceback keeps its line breaks. Other values reach the console
    as their ``repr``, which escapes the strings inside them already."""
    return {
        printable(key): (
            printable(value, "\n" if key in _TRACEBACK_KEYS else "")
            if isinstance(value, str)
            else value
        )
        for key, value in event_dict.items()
    }


# ----------------------------------------------------------------- streams that fail

_dropped = 0
_dropped_lock = threading.Lock()


def dropped_lines() -> int:
    """How many log lines could not be written since the process started."""
    return _dropped


def discard(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at ``/dev/null``: what is still buffered for it,
    and what the interpreter flushes at exit, goes nowhere instead of failing again (and
    printing ``Exception ignored ... BrokenPipeError``). A stream without a descriptor
    (a test's ``StringIO``) is left as it is."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def say(stream: TextIO, line: str) -> None:
    """Write ``line`` and a line break to ``stream`` if it can still be written; a stream
    that fails is discarded (:func:`discard`) and the line lost."""
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):  # ValueError: the stream was closed
        discard(stream)


def output_failed(out: TextIO, err: TextIO, command: str, error: OSError) -> int:
    """The exit status of a command whose result could not be written to ``out``: 0 when
    its reader left (a broken pipe: ``| head`` took what it wanted), else 1, said once
    on ``err`` (a full disk, an I/O error). ``out`` is discarded either way."""
    discard(out)
    if isinstance(error, BrokenPipeError) or error.errno == errno.EPIPE:
        return 0
    say(err, f"{command}: error: cannot write the output: {error.strerror or error}")
    return 1


class _LogStream:
    """The stream log lines go to: a line that cannot be written is dropped and counted;
    a closed pipe is discarded, as no reader comes back to it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lost = False  # a write failed since the last flush (a line is written, then flushed)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError) as err:
            self._failed(err)
            return 0

    def flush(self) -> None:
        global _dropped  # noqa: PLW0603 - one count for the process, as its streams are
        try:
            self._stream.flush()
        except (OSError, ValueError) as err:
            self._failed(err)
        if self._lost:
            self._lost = False
            with _dropped_lock:
                _dropped += 1

    def _failed(self, err: Exception) -> None:
        self._lost = True
        if isinstance(err, BrokenPipeError):
            discard(self._stream)

    def isatty(self) -> bool:
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False


def configure(
    level: str = "info", *, stream: TextIO | None = None, json: bool | None = None
) -> None:
    """Configure structlog once, at the composition root.

    ``json`` defaults to "stream is not a TTY". Levels below ``level`` are dropped
    before any formatting work; every event passes :func:`bound_values`, and console
    lines :func:`console_safe`.
    """
    out = stream if stream is not None else sys.stderr
    as_json = (not out.isatty()) if json is None else json
    last: list[structlog.typing.Processor] = (
        [structlog.processors.JSONRenderer()]
        if as_json
        else [console_safe, structlog.dev.ConsoleRenderer(colors=out.isatty())]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            bound_values,
            *last,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _LogStream(out))),
        cache_logger_on_first_use=False,
    )
