"""The option machinery every command shares: value parsers, one option, precedence.

An :class:`Option` names its flag, the attribute it sets, its parser, default and
help; its environment variable is the flag upper-cased with ``.`` and ``-`` as
``_`` (``--path.sysfs`` -> ``PODRES_PATH_SYSFS``) and its config-file key is the
flag without its dashes. :func:`resolve` applies the one precedence of the project:
flag > environment > config file > default. Parsers raise ``ValueError``; resolve
turns that into a :class:`~podres_exporter.errors.ConfigError` naming the flag and
where the value came from.

The exporter's options are in :mod:`podres_exporter.settings`, the device plugin's
in :mod:`podres_exporter.deviceplugin.main`; neither imports the other.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from podres_exporter.errors import ConfigError
from podres_exporter.kube import parse_bytes
from podres_exporter.logconf import FORMATS, LEVELS

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
# A whole number of bytes with a quantity suffix, K for k, and an optional B: 64MiB, 16 Mi.
_SIZE = re.compile(r"^\s*(\d+)\s*(Ki|Mi|Gi|K|M|G)?B?\s*$")

MAX_PORT = 65535


def parse_duration(text: str) -> float:
    """``"10s"``, ``"500ms"``, ``"1m"``, ``"2.5"`` (seconds) -> seconds; must be > 0."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a duration (examples: 10s, 500ms, 1m)")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds <= 0:
        raise ValueError(f"{text!r} must be greater than zero")
    return seconds


def parse_size(text: str) -> int:
    """``"16Mi"``, ``"4194304"``, ``"64MiB"`` -> bytes; must be > 0."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a size (examples: 16Mi, 4194304)")
    number, suffix = m.group(1), m.group(2) or ""
    size = parse_bytes(number + ("k" if suffix == "K" else suffix))
    if size <= 0:
        raise ValueError(f"{text!r} must be greater than zero")
    return size


def parse_listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (every interface) or ``[::1]:PORT`` -> (host, port)."""
    raw = str(text).strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"{text!r} is not HOST:PORT (examples: :9842, 127.0.0.1:9842, [::1]:9842)")
    port = int(port_text)
    if not 0 <= port <= MAX_PORT:
        raise ValueError(f"port {port} is out of range 0-{MAX_PORT}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: put an IPv6 host in brackets, as in [::1]:9842")
    return (host or "0.0.0.0", port)  # noqa: S104 - binding every interface is the documented default


def parse_log_level(text: str) -> str:
    """One of debug, info, warning, error."""
    level = str(text).strip().lower()
    if level not in LEVELS:
        raise ValueError(f"{text!r} is not one of {', '.join(LEVELS)}")
    return level


def parse_log_format(text: str) -> str:
    """auto (JSON unless on a terminal), json or console."""
    fmt = str(text).strip().lower()
    if fmt not in FORMATS:
        raise ValueError(f"{text!r} is not one of {', '.join(FORMATS)}")
    return fmt


def parse_bool(text: str | bool) -> bool:
    """true/false, 1/0, yes/no, on/off."""
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true or false)")


def parse_patterns(text: str) -> tuple[str, ...]:
    """Comma-separated, non-empty glob patterns: ``nvidia.com/*,amd.com/gpu``."""
    patterns = tuple(p.strip() for p in str(text).split(",") if p.strip())
    if not patterns:
        raise ValueError("expected at least one pattern, e.g. nvidia.com/*")
    return patterns


def parse_path(text: str) -> str:
    """A non-empty path."""
    value = str(text)
    if not value:
        raise ValueError("the path is empty")
    return value


@dataclass(frozen=True, slots=True)
class Option:
    """One setting: its flag, parser, default and help (unit and why included)."""

    flag: str
    attr: str
    parse: Callable[[Any], Any]
    default: Any
    help: str

    @property
    def env(self) -> str:
        return "PODRES_" + re.sub(r"[.-]", "_", self.flag.lstrip("-")).upper()

    @property
    def key(self) -> str:
        return self.flag.lstrip("-")


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


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
    if flags.get(opt.flag) is not None:
        raw, origin = flags[opt.flag], f"flag {opt.flag}"
    elif opt.env in env:
        raw, origin = env[opt.env], f"environment variable {opt.env}"
    elif file_values is not None and opt.key in file_values:
        raw, origin = file_values[opt.key], f"key {opt.key!r} of config file {file_path}"
    elif opt.default is None:
        return None
    else:
        raw, origin = opt.default, "default"
    try:
        return opt.parse(raw)
    except ValueError as err:
        raise ConfigError(f"invalid value for {opt.flag} (from {origin}): {err}") from err


def read_toml(path: str) -> dict[str, Any]:
    """The TOML file that ``--config`` names; ConfigError naming the flag."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as err:
        raise ConfigError(f"config file {path} (--config): {err.strerror or err}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} (--config) is not valid TOML: {err}") from err


def read_config_file(path: str) -> dict[str, Any]:
    """The config file's keys, flattened (``[path] sysfs`` -> ``path.sysfs``)."""
    return _flatten(read_toml(path))
