"""The values an option takes: parsers, the bounded ones' makers, and how a value is shown.

A parser takes a string (a flag, a variable) or the TOML value of a config file, and
refuses a value of another type (an array where a path belongs is no path) with a
``ValueError`` that :mod:`podres_exporter.daemon.options` turns into an error naming the
option. Durations and sizes are bounded: :func:`duration` and :func:`size` make the parser
of an option with its upper bound, which the help shows; no duration parsed is longer than
:data:`MAX_DURATION_S`, so none overflows a wait or a gRPC deadline. :data:`METAVARS` names
each parser's placeholder in the help (a bounded parser names its own).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from podres_exporter.core.kube import parse_bytes

# A number and its unit written together ("15s", not "15 s"); a bare number is seconds.
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
# A whole number of bytes with a quantity suffix, K for k, and an optional B: 64MiB, 16 Mi.
_SIZE = re.compile(r"^\s*(\d+)\s*(Ki|Mi|Gi|K|M|G)?B?\s*$")

MAX_PORT = 65535
"""The largest config file read (1 MiB): a real one is a few KiB; more is no config file."""
_SHOWN_CHARS = 40  # an error quotes at most this much of a value
# Digits a number may have before it is too long to be any duration, size or port; far
# below CPython's limit on int-string conversions, whose error would name sys internals.
_MAX_DIGITS = 30
_MAX_BITS = 100  # the same for a number (a TOML integer): about 30 digits


def _huge(value: object) -> bool:
    """Whether ``value`` is an integer too long for any bound (and to write in full)."""
    return isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _MAX_BITS


MAX_DURATION_S = 7 * 24 * 3600.0
"""The longest duration any parser takes (a week): far below ``threading.TIMEOUT_MAX`` and
gRPC's deadline range, so no value a parser returns can overflow a wait or a deadline."""


def shown(value: str | float) -> str:
    """``value`` quoted as an error shows it: its repr, cut to its first 40 characters
    (``'1111…' (5000 characters)``), a number too long to write as such."""
    if _huge(value):
        return "a number too large"
    text = repr(value)
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_CHARS]}… ({len(str(value))} characters)"


def describe(value: object) -> str:
    """A value as an error message names it: ``the number 5``, ``an array``, ``a table``."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {shown(value)}"
    if isinstance(value, str):
        return f"the string {shown(value)}"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def _text(value: object, what: str) -> str:
    """``value`` when it is a string; ValueError naming what was expected otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"expected {what}, got {describe(value)}")
    return value


def toml_type_error(parse: Callable[[Any], Any], key: str, value: object) -> str | None:
    """Why ``value``, read from a config file for the option ``key`` parsed by ``parse``,
    is not of the TOML type the README names, or None when it is: a duration is a string
    with its unit (``poll-interval = "15s"``: a bare number says no unit, and on the
    command line a number alone is seconds, which a reader of the file cannot tell). The
    other parsers check their own type: a size or count is a whole number or a string
    (``"16Mi"``, ``25000``), a switch a boolean or the strings a flag takes, patterns a
    string or an array of them."""
    if not isinstance(parse, Duration) or isinstance(value, str):
        return None
    example = "10s"
    if isinstance(value, int | float) and not isinstance(value, bool) and not _huge(value):
        example = f"{value:g}s" if math.isfinite(value) else example
    return f'expected a duration as a string with its unit, as in {key} = "{example}"; ' + (
        f"got {describe(value)}"
    )


def format_duration(seconds: float) -> str:
    """Seconds as the largest unit that states them exactly: 3600 -> ``1h``, 0.5 -> ``500ms``."""
    for unit, scale in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= scale and (seconds / scale).is_integer():
            return f"{int(seconds / scale)}{unit}"
    return f"{seconds * 1000:g}ms"


def format_size(size: int) -> str:
    """Bytes as the largest binary unit that states them exactly: 2**30 -> ``1Gi``."""
    for unit, scale in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def parse_duration(
    text: str | float,
    *,
    min_s: float | None = None,
    max_s: float = MAX_DURATION_S,
    zero: bool = False,
) -> float:
    """``"10s"``, ``"500ms"``, ``"1m"``, ``"2.5"`` or a number (seconds) -> seconds (the
    unit written next to the number: ``"15 s"`` is refused); must
    be > 0 (or 0 when ``zero``), at least ``min_s`` (when given) and at most ``max_s``."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f'expected a duration such as "10s", got {describe(text)}')
    if _huge(text):
        raise ValueError(f"{shown(text)} is more than the maximum, {format_duration(max_s)}")
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"{shown(text)} is not a duration (examples: 10s, 500ms, 1m)")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds == 0 and zero:
        return 0.0
    if seconds <= 0:
        raise ValueError(f"{shown(text)} must be greater than zero")
    if min_s is not None and seconds < min_s:
        raise ValueError(f"{shown(text)} is less than the minimum, {format_duration(min_s)}")
    if not math.isfinite(seconds) or seconds > max_s:
        raise ValueError(f"{shown(text)} is more than the maximum, {format_duration(max_s)}")
    return seconds


def parse_size(text: str | int, *, max_bytes: int | None = None) -> int:
    """``"16Mi"``, ``"4194304"``, ``"64MiB"`` or a number -> bytes; must be > 0 (and at
    most ``max_bytes`` when given)."""
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise ValueError(f'expected a size such as "16Mi", got {describe(text)}')
    too_large = f"{shown(text)} is " + (
        "too large" if max_bytes is None else f"more than the maximum, {format_size(max_bytes)}"
    )
    if _huge(text):
        raise ValueError(too_large)
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"{shown(text)} is not a size (examples: 16Mi, 4194304)")
    number, suffix = m.group(1), m.group(2) or ""
    if len(number.lstrip("0")) > _MAX_DIGITS:
        raise ValueError(too_large)
    size = parse_bytes(number + ("k" if suffix == "K" else suffix))
    if size <= 0:
        raise ValueError(f"{shown(text)} must be greater than zero")
    if max_bytes is not None and size > max_bytes:
        raise ValueError(too_large)
    return size


@dataclass(frozen=True, slots=True)
class Duration:
    """The parser of a duration option with its bounds (see :func:`duration`)."""

    metavar: ClassVar[str] = "DURATION"
    max_s: float
    min_s: float | None = None
    zero: bool = False  # 0 accepted (it means "off" or "every time": the option says)

    def __call__(self, raw: Any) -> float:
        return parse_duration(raw, min_s=self.min_s, max_s=self.max_s, zero=self.zero)

    @property
    def limit(self) -> str:
        """``min 100ms; max 1m`` (``max 1m`` without a lower bound; ``0 or ...``)."""
        top = f"max {format_duration(self.max_s)}"
        bounds = top if self.min_s is None else f"min {format_duration(self.min_s)}; {top}"
        return f"0 or {bounds}" if self.zero else bounds


@dataclass(frozen=True, slots=True)
class Size:
    """The parser of a size option with its upper bound (see :func:`size`)."""

    metavar: ClassVar[str] = "SIZE"
    max_bytes: int

    def __call__(self, raw: Any) -> int:
        return parse_size(raw, max_bytes=self.max_bytes)

    @property
    def limit(self) -> str:
        return f"max {format_size(self.max_bytes)}"


@dataclass(frozen=True, slots=True)
class Count:
    """The parser of a count option, 0 to ``max_count`` (see :func:`count`)."""

    metavar: ClassVar[str] = "COUNT"
    max_count: int

    def __call__(self, raw: Any) -> int:
        if isinstance(raw, bool) or not isinstance(raw, str | int):
            raise ValueError(f"expected a whole number, got {describe(raw)}")
        text = str(raw).strip()
        if not text.isdigit() or not text.isascii():
            raise ValueError(f"{shown(text)} is not a whole number of 0 or more")
        if len(text.lstrip("0")) > len(str(self.max_count)) or int(text) > self.max_count:
            raise ValueError(f"{shown(text)} is more than the maximum, {self.max_count}")
        return int(text)

    @property
    def limit(self) -> str:
        return f"max {self.max_count}"


def count(*, max_count: int) -> Count:
    """A parser of whole numbers from 0 to ``max_count`` (the help shows the bound)."""
    if max_count <= 0:
        raise ValueError("max_count must be positive")
    return Count(max_count)


def duration(*, max_s: float, min_s: float | None = None, zero: bool = False) -> Duration:
    """A duration parser refusing more than ``max_s`` seconds and, when given, less than
    ``min_s`` (a floor below which the value only loads a peer or fails every call); the
    help shows both bounds. ``zero``: 0 is accepted too."""
    if not 0 < max_s <= MAX_DURATION_S:
        raise ValueError(f"max_s must be in (0, {MAX_DURATION_S:g}]")
    if min_s is not None and not 0 < min_s <= max_s:
        raise ValueError("min_s must be in (0, max_s]")
    return Duration(max_s, min_s, zero)


def size(*, max_bytes: int) -> Size:
    """A size parser refusing more than ``max_bytes`` (the help shows the bound)."""
    if max_bytes <= 0:
        raise ValueError("max_bytes must be positive")
    return Size(max_bytes)


def parse_listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (every interface) or ``[::1]:PORT`` -> (host, port)."""
    raw = _text(text, 'an address such as ":9842"').strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(
            f"{shown(text)} is not HOST:PORT (examples: :9842, 127.0.0.1:9842, [::1]:9842)"
        )
    port = int(port_text) if len(port_text) <= _MAX_DIGITS else MAX_PORT + 1
    if not 0 <= port <= MAX_PORT:
        number = port_text if len(port_text) <= _SHOWN_CHARS else shown(port_text)
        raise ValueError(f"port {number} is out of range 0-{MAX_PORT}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{shown(text)}: put an IPv6 host in brackets, as in [::1]:9842")
    return (host or "0.0.0.0", port)  # noqa: S104 - binding every interface is the documented default


def parse_log_level(text: str) -> str:
    """One of debug, info, warning, error."""
    from podres_exporter.daemon.logconf import LEVELS  # structlog only for a command that logs

    level = _text(text, "a log level").strip().lower()
    if level not in LEVELS:
        raise ValueError(f"{shown(text)} is not one of {', '.join(LEVELS)}")
    return level


def parse_log_format(text: str) -> str:
    """auto (JSON unless on a terminal), json or console."""
    from podres_exporter.daemon.logconf import FORMATS  # structlog only for a command that logs

    fmt = _text(text, "a log format").strip().lower()
    if fmt not in FORMATS:
        raise ValueError(f"{shown(text)} is not one of {', '.join(FORMATS)}")
    return fmt


def parse_bool(text: str | bool) -> bool:
    """true/false, 1/0, yes/no, on/off."""
    if isinstance(text, bool):
        return text
    value = _text(text, "true or false").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{shown(text)} is not a boolean (true or false)")


def parse_patterns(text: str | list[str]) -> tuple[str, ...]:
    """Comma-separated, non-empty glob patterns: ``nvidia.com/*,amd.com/gpu`` (or, in a
    config file, an array of them)."""
    what = 'patterns such as "nvidia.com/*"'
    items = text if isinstance(text, list | tuple) else [_text(text, what)]
    parts = [p for item in items for p in _text(item, what).split(",")]
    patterns = tuple(p.strip() for p in parts if p.strip())
    if not patterns:
        raise ValueError("expected at least one pattern, e.g. nvidia.com/*")
    return patterns


def parse_path(text: str) -> str:
    """A non-empty path."""
    value = _text(text, "a path")
    if not value:
        raise ValueError("the path is empty")
    return value


_NODE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")


def parse_node_name(text: str) -> str:
    """A node name: letters, digits, ``.``, ``-``, ``_``, at most 253 (a Kubernetes node name
    is a DNS subdomain; a host name may have capitals)."""
    value = _text(text, "a node name").strip()
    if not _NODE_NAME.match(value):
        raise ValueError(
            f"{shown(value)} is no node name: letters, digits, '.', '-' and '_', starting and "
            "ending with a letter or digit, at most 253"
        )
    return value


def parse_text(text: str) -> str:
    """Any string, as given (a URL, a name: what uses it checks it)."""
    return _text(text, "a string")


# The placeholder of a value in the help, by its parser (a bounded parser names its own).
METAVARS: dict[Callable[[Any], Any], str] = {
    parse_path: "PATH",
    parse_listen_address: "ADDRESS",
    parse_log_level: "LEVEL",
    parse_log_format: "FORMAT",
    parse_patterns: "PATTERNS",
    parse_bool: "BOOL",
    parse_text: "TEXT",
    parse_node_name: "NAME",
}
