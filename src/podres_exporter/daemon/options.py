"""The option machinery every command shares: one option, its flag, precedence, config files.

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

The values themselves (parsers, bounds, how a value is shown) are in
:mod:`podres_exporter.daemon.values`. :func:`check_at_most` checks a relation between two
options, naming both.

The exporter's options are in :mod:`podres_exporter.exporter.settings`, the device plugin's
in :mod:`podres_exporter.deviceplugin.main`, ``podres top``'s in
:mod:`podres_exporter.top.main`; none imports another.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import stat
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon.values import (
    METAVARS,
    Duration,
    Size,
    format_duration,
    format_size,
    toml_type_error,
)

MAX_CONFIG_BYTES = 2**20


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
        found = self.metavar or getattr(self.parse, "metavar", None) or METAVARS.get(self.parse)
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


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the known word closest to ``word``, or ``""`` when
    none is close: the hint of an unknown flag or config key."""
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def key_hint(key: str, known: Iterable[str]) -> str:
    """What follows ``unknown key 'x'`` in an error: the closest known key as a "did you
    mean", or, when none is close, every known key."""
    names = sorted(known)
    return did_you_mean(key, names) or f" (known: {', '.join(names)})"


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that refuses an argument it does not know itself, with its own
    usage and a "did you mean": a subcommand's parser (``add_subparsers`` makes them of
    its parent's class) says ``podres export: error: unrecognized arguments: --poll-intervall
    5s (did you mean --poll-interval?)`` where argparse would hand the word up to the
    top-level parser, whose usage names no flag of the subcommand."""

    def parse_known_args(  # type: ignore[override]  # same call; never returns extras
        self, args: Any = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            flags = [w.partition("=")[0] for w in extras if w.startswith("-")]
            hint = did_you_mean(flags[0], self._option_string_actions) if flags else ""
            self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return ns, extras


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
    wrong = toml_type_error(opt.parse, opt.key, raw) if origin.startswith("key ") else None
    if wrong is not None:
        raise ConfigError(f"invalid value for {opt.flag} (from {origin}): {wrong}")
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


def read_toml(path: str, flag: str = "--config", what: str = "config file") -> dict[str, Any]:
    """The TOML file that ``flag`` names; ConfigError naming the file as ``what`` (the
    plugin's is its ``resource file``), the flag and the file: unreadable, not a regular
    file (a FIFO would block, a device never end), larger than 1 MiB, not UTF-8 (as TOML
    must be), not TOML, or nested too deep to parse."""
    where = f"{what} {repr(path) if chr(0) in path else path} ({flag})"
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
        raise OSError(
            f"larger than {format_size(MAX_CONFIG_BYTES)}: no settings or resource file needs that"
        )
    return data


def read_config_file(path: str) -> dict[str, Any]:
    """The config file's keys, flattened (``[path] sysfs`` -> ``path.sysfs``)."""
    data = read_toml(path)
    try:
        return _flatten(data)
    except RecursionError as err:  # dotted keys thousands deep: parsed, too deep to walk
        raise ConfigError(f"config file {path} (--config) is nested too deep to read") from err
