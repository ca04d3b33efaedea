"""The option machinery every command shares: value parsers, one option, precedence.

An :class:`Option` names its flag, the attribute it sets, its parser, default and
help; its environment variable is the flag upper-cased with ``.`` and ``-`` as
``_`` (``--path.sysfs`` -> ``PODRES_PATH_SYSFS``) and its config-file key is the
flag without its dashes. :func:`resolve` applies the one precedence of the project:
flag > environment > config file > default. Parsers raise ``ValueError``; resolve
turns that into a :class:`~podres_exporter.core.errors.ConfigError` naming the flag and
where the value came from.

:meth:`Option.add_to` is the one way a flag reaches a command line: its metavar comes
from its parser (``DURATION``, ``SIZE``, ``PATH`` ...), its help ends with what
:meth:`Option.shown` generates from the declaration (default, bounds, variable), and a
``switch`` is one ``--[no-]NAME`` argument. The flags several commands share are declared
once, in :mod:`podres_exporter.daemon.flags`.

A parser takes a string (a flag, a variable) or the TOML value of a config file, and
refuses a value of another type (an array where a path belongs is no path). Durations
and sizes are bounded: :func:`duration` and :func:`size` make the parser of an option
with its upper bound, which the help shows; no duration parsed is longer than
:data:`MAX_DURATION_S`, so none overflows a wait or a gRPC deadline.
:func:`check_at_most` checks a relation between two options, naming both.

The exporter's options are in :mod:`podres_exporter.exporter.settings`, the device plugin's
in :mod:`podres_exporter.deviceplugin.main`, ``podres top``'s in
:mod:`podres_exporter.top.main`; none imports another.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import stat
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from podres_exporter.core.errors import ConfigError
from podres_exporter.core.kube import parse_bytes

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
# A whole number of bytes with a quantity suffix, K for k, and an optional B: 64MiB, 16 Mi.
_SIZE = re.compile(r"^\s*(\d+)\s*(Ki|Mi|Gi|K|M|G)?B?\s*$")

MAX_PORT = 65535
MAX_CONFIG_BYTES = 2**20
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
    """``"10s"``, ``"500ms"``, ``"1m"``, ``"2.5"`` or a number (seconds) -> seconds; must
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


def parse_text(text: str) -> str:
    """Any string, as given (a URL, a name: what uses it checks it)."""
    return _text(text, "a string")


# The placeholder of a value in the help, by its parser (a bounded parser names its own).
_METAVARS: dict[Callable[[Any], Any], str] = {
    parse_path: "PATH",
    parse_listen_address: "ADDRESS",
    parse_log_level: "LEVEL",
    parse_log_format: "FORMAT",
    parse_patterns: "PATTERNS",
    parse_bool: "BOOL",
    parse_text: "TEXT",
}


class ArgumentAdder(Protocol):
    """Where :meth:`Option.add_to` adds a flag: a parser or one of its argument groups."""

    def add_argument(self, *name_or_flags: str, **kwargs: Any) -> argparse.Action: ...


class _Switch(argparse.Action):
    """``--NAME`` stores True, ``--no-NAME`` False."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, not (option_string or "").startswith("--no-"))


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: its flag, parser, default and help (unit and why included).

    ``metavar``: the value's placeholder in the help when the parser's own does not say
    it (``URL`` for a string). ``env_prefix``: of the environment variable; None for a
    flag that has none. ``switch``: a ``--[no-]FLAG`` switch that takes no value.
    ``fallback``: what an unset option without a default means, as the help says it
    (the plugin's ``[plugin] health_interval`` of its resource file).
    """

    flag: str
    attr: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    metavar: str = ""
    env_prefix: str | None = "PODRES_"
    switch: bool = False
    fallback: str | None = None

    @property
    def env(self) -> str | None:
        """``PODRES_PATH_SYSFS`` for ``--path.sysfs``; None without an ``env_prefix``."""
        if self.env_prefix is None:
            return None
        return self.env_prefix + re.sub(r"[.-]", "_", self.flag.lstrip("-")).upper()

    @property
    def key(self) -> str:
        return self.flag.lstrip("-")

    @property
    def limit(self) -> str | None:
        """The parser's bound as the help shows it (``max 1h``), or None."""
        limit = getattr(self.parse, "limit", None)
        return limit if isinstance(limit, str) else None

    @property
    def placeholder(self) -> str:
        """The value's name in the help: :attr:`metavar`, else the parser's."""
        found = self.metavar or getattr(self.parse, "metavar", None) or _METAVARS.get(self.parse)
        if not isinstance(found, str):
            raise TypeError(f"{self.flag}: name its metavar, its parser has none")
        return found

    def format(self, value: Any) -> str:
        """``value`` as the help writes it: 10.0 -> ``10s`` for a duration, 2**24 ->
        ``16Mi`` for a size, True -> ``on`` for a switch."""
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(self.parse, Duration) and isinstance(value, float | int):
            return format_duration(value)
        if isinstance(self.parse, Size) and isinstance(value, int):
            return format_size(value)
        return str(value)

    def shown(self) -> str:
        """The ``[default ..; max ..; env ..]`` the help appends to :attr:`help`."""
        parts = []
        if self.default is not None:
            parts.append(f"default {self.format(self.default)}")
        elif self.fallback is not None:
            parts.append(f"default {self.fallback}")
        if self.limit is not None:
            parts.append(self.limit)
        if self.env is not None:
            parts.append(f"env {self.env}")
        return f" [{'; '.join(parts)}]" if parts else ""

    def add_to(self, parser: ArgumentAdder) -> argparse.Action:
        """Add the flag to ``parser``. Its value is kept under the flag's own name, None
        when not given (see :func:`given`); a switch is one ``--[no-]NAME`` argument."""
        text = self.help + self.shown()
        if not self.switch:
            return parser.add_argument(
                self.flag, dest=self.flag, default=None, metavar=self.placeholder, help=text
            )
        name = self.flag.removeprefix("--")
        action = parser.add_argument(
            self.flag, f"--no-{name}", dest=self.flag, action=_Switch, default=None, help=text
        )
        # Both spellings are registered above; the help and the usage write them as one.
        action.option_strings = [f"--[no-]{name}"]
        return action


def given(ns: argparse.Namespace, options: Iterable[Option]) -> dict[str, Any]:
    """The flags of ``options`` given on the command line: flag -> raw value."""
    raw = vars(ns)
    return {o.flag: raw[o.flag] for o in options if raw.get(o.flag) is not None}


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables as dotted keys; an empty table stays, as the value ``{}`` of its key
    (so that ``poll-interval = {}`` is refused, not lost)."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def raw_value(
    opt: Option,
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    file_values: Mapping[str, Any] | None = None,
    file_path: str | None = None,
) -> tuple[Any, str] | None:
    """The raw value of ``opt`` and where it came from (``flag --x``, ``environment
    variable PODRES_X``, ``key 'x' of config file F``, ``default``); None when unset."""
    if flags.get(opt.flag) is not None:
        return flags[opt.flag], f"flag {opt.flag}"
    if opt.env is not None and opt.env in env:
        return env[opt.env], f"environment variable {opt.env}"
    if file_values is not None and opt.key in file_values:
        return file_values[opt.key], f"key {opt.key!r} of config file {file_path}"
    if opt.default is None:
        return None
    return opt.default, "default"


def resolve(
    opt: Option,
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    file_values: Mapping[str, Any] | None = None,
    file_path: str | None = None,
) -> Any:
    """One option's parsed value: flag > environment > config file > default.

    A default of None stays None (the option is unset). ConfigError names the flag and
    where the bad value came from.
    """
    found = raw_value(opt, flags, env, file_values, file_path)
    if found is None:
        return None
    raw, origin = found
    try:
        return opt.parse(raw)
    except ValueError as err:
        raise ConfigError(f"invalid value for {opt.flag} (from {origin}): {err}") from err


def resolve_all(
    options: Iterable[Option],
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    file_values: Mapping[str, Any] | None = None,
    file_path: str | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Every option's parsed value by ``attr``, and where each came from (for
    :func:`check_at_most`); ConfigError as :func:`resolve` raises it."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for opt in options:
        values[opt.attr] = resolve(opt, flags, env, file_values, file_path)
        found = raw_value(opt, flags, env, file_values, file_path)
        origins[opt.attr] = found[1] if found is not None else "unset"
    return values, origins


def check_at_most(
    low: Option,
    high: Option,
    values: Mapping[str, Any],
    origins: Mapping[str, str],
    why: str,
) -> None:
    """ConfigError naming both flags and where each value came from when the value of
    ``low`` is above that of ``high`` (both set); ``why`` says why it must not be."""
    a, b = values.get(low.attr), values.get(high.attr)
    if a is None or b is None or a <= b:
        return
    shown = format_duration if isinstance(a, float) else str
    raise ConfigError(
        f"{low.flag} ({shown(a)}, from {origins[low.attr]}) is more than {high.flag} "
        f"({shown(b)}, from {origins[high.attr]}): {why}"
    )


def read_toml(path: str) -> dict[str, Any]:
    """The TOML file that ``--config`` names; ConfigError naming the flag and the file:
    unreadable, not a regular file (a FIFO would block, a device never end), larger than
    1 MiB, not UTF-8 (as TOML must be), not TOML, or nested too deep to parse."""
    where = f"config file {repr(path) if chr(0) in path else path} (--config)"
    try:
        text = _read_regular(path).decode("utf-8")
        return tomllib.loads(text)
    except OSError as err:
        raise ConfigError(f"{where}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{where} is not UTF-8 text (byte {err.start}): save it as UTF-8, as TOML requires"
        ) from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{where} is not valid TOML: {err}") from err
    except RecursionError as err:
        raise ConfigError(f"{where} is nested too deep to read") from err
    except ValueError as err:  # a NUL in the path; an integer of thousands of digits
        reason = "the path holds a NUL byte" if chr(0) in path else "a number in it is too long"
        raise ConfigError(f"{where} cannot be read: {reason}") from err


def _read_regular(path: str) -> bytes:
    """The bytes of the regular file at ``path``, at most :data:`MAX_CONFIG_BYTES`;
    OSError for a FIFO, a device, a directory or a larger file. Opened without blocking,
    so that a FIFO nobody writes to is refused, not waited on."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise OSError(f"{kind}: name a TOML file")
        chunks: list[bytes] = []
        left = MAX_CONFIG_BYTES + 1  # one byte more tells a larger file
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_CONFIG_BYTES:
        raise OSError(f"larger than {format_size(MAX_CONFIG_BYTES)}: no config file is that large")
    return data


def read_config_file(path: str) -> dict[str, Any]:
    """The config file's keys, flattened (``[path] sysfs`` -> ``path.sysfs``)."""
    data = read_toml(path)
    try:
        return _flatten(data)
    except RecursionError as err:  # dotted keys thousands deep: parsed, too deep to walk
        raise ConfigError(f"config file {path} (--config) is nested too deep to read") from err
