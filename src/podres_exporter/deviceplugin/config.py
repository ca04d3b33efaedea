"""The device plugin's resource file: which resources to advertise and how to find them.

One TOML file (``--resources``) declares every resource; each gets its own plugin
socket and registration::

    [plugin]
    health_interval = "500ms"   # re-discovery and health check period
    xid_unhealthy_for = "5m"    # a GPU stays Unhealthy this long after a critical XID

    [[resource]]
    name = "intel.com/sriov_vf"           # domain/name, as the kubelet validates it
    pre_start = false                     # PreStartContainer re-checks health
    cdi = "intel.com/net"                 # also return CDI names intel.com/net=<id>
    env = { SRIOV_POOL = "east" }         # extra variables for every container
    [resource.discover]
    kind = "pci"                          # nvml | pci | netdev | dev
    vendor = "0x8086"
    device = "0x1889"
    class = "0x0200*"                     # a glob, or a prefix without glob characters
    driver = "iavf"

    [[resource]]
    name = "nvidia.com/gpu"
    replicas = 4                          # time-slicing: ids <uuid>::0 .. <uuid>::3
    [resource.discover]
    kind = "nvml"                         # mig = true (+ profile = "1g.10gb") for MIG

Discovery kinds: ``nvml`` whole GPUs (MIG-enabled boards excluded), or with
``mig = true`` MIG devices, optionally of one ``profile``; ``pci`` PCI functions by
``vendor``, ``device``, ``class``, ``driver`` (each optional, at least one given,
all must match); ``netdev`` network interfaces whose name matches the glob
``pattern``; ``dev`` device nodes matching ``glob`` under ``/dev`` (``fuse``,
``dri/renderD*``; a leading ``/dev/`` is accepted).

A bad file raises :class:`~podres_exporter.core.errors.ConfigError` naming it as the
resource file, the flag and variable that name it (:data:`NAMED_BY`) and the key
(``resource[1].discover.kind``; resources count from 0). A file that declares no
resource (empty, comments only, ``resource = []``) is valid: the plugin advertises
nothing. Pure apart from :func:`load_config` reading the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

from podres_exporter.core.errors import ConfigError
from podres_exporter.core.kube import NameProblem, extended_resource_problem
from podres_exporter.daemon.options import Option, key_hint, read_toml
from podres_exporter.daemon.values import Duration, describe, duration, parse_path, toml_type_error

__all__ = [
    "DEFAULT_HEALTH_INTERVAL_S",
    "DEFAULT_XID_UNHEALTHY_FOR_S",
    "HEALTH_INTERVAL",
    "MAX_DEVICE_IDS",
    "MAX_REPLICAS",
    "RESOURCES",
    "XID_UNHEALTHY_FOR",
    "Discover",
    "DiscoverKind",
    "PluginConfig",
    "ResourceConfig",
    "load_config",
    "parse_config",
    "resource_name_problem",
]

RESOURCES: Final = Option(
    "--resources",
    "config_path",
    parse_path,
    None,
    "The resource file (TOML, [[resource]] tables): the devices to advertise; required.",
    metavar="FILE",
)
"""--resources: the resource file, read by :func:`load_config`, not an option of its own.
Not ``--config``: that is ``podres export``'s settings file (and ``PODRES_CONFIG`` its
variable); given to the plugin, it is refused with a message naming ``--resources``."""
NAMED_BY: Final = f"{RESOURCES.flag} / {RESOURCES.env}"
"""What names the resource file, as every error about it says: ``resource file F
(--resources / PODRES_RESOURCES): KEY: ...``; never "config file", the settings' word."""

DEFAULT_HEALTH_INTERVAL_S: Final = 0.5
DEFAULT_XID_UNHEALTHY_FOR_S: Final = 300.0
HEALTH_INTERVAL: Final = duration(min_s=0.05, max_s=60.0)
"""health_interval / --health-interval, at least 50ms: each check reads NVML and sysfs for
every device, and more often only spends the node's CPU; at most 1m: a device gone bad must
reach the kubelet within a minute, or pods go on being placed on it."""
XID_UNHEALTHY_FOR: Final = duration(max_s=24 * 3600.0)
"""xid_unhealthy_for / --xid-unhealthy-for, at most 24h: a GPU still failing after a day
reports new XIDs of its own."""
MAX_REPLICAS: Final = 1024  # "<id>::1023" still fits the kubelet's 63-character id limit
MAX_DEVICE_IDS: Final = 32_768
"""Device ids the plugin advertises in all, shared equally by the resources of the file
(:attr:`PluginConfig.ids_per_resource`): each id costs up to about 1 KB of the plugin's
memory (its device, its ListAndWatch entry, its index), so this many keep the plugin near
92 MB, under the container's 128Mi with room for its connections (docs/plugin.md,
"Limits"). A resource that finds more hardware than its share holds advertises the first
devices that fit, by id, and logs the rest."""

_HEX_ID = re.compile(r"^(0x)?[0-9a-fA-F]{4}$")
_MIG_PROFILE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb(\+[a-z]+)*$")
_CDI_KIND = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+/[A-Za-z0-9][-A-Za-z0-9_.]*$"
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class DiscoverKind(StrEnum):
    """How a resource's devices are found."""

    NVML = "nvml"
    PCI = "pci"
    NETDEV = "netdev"
    DEV = "dev"


@dataclass(frozen=True, slots=True)
class Discover:
    """A discovery rule; only the fields of its ``kind`` are set.

    ``vendor`` / ``device`` are normalised to ``0x`` + 4 lower-case hex digits;
    ``pci_class`` is a glob (``0x0200*``) matched against sysfs's ``0x020000``.
    """

    kind: DiscoverKind
    mig: bool = False
    profile: str | None = None
    vendor: str | None = None
    device: str | None = None
    pci_class: str | None = None
    driver: str | None = None
    pattern: str | None = None
    glob: str | None = None


@dataclass(frozen=True, slots=True)
class ResourceConfig:
    """One advertised resource.

    ``replicas``: 1 advertises each device once under its own id; N >= 2 advertises
    ``<id>::0`` .. ``<id>::N-1`` (time-slicing). ``pre_start``: the plugin asks for
    PreStartContainer and re-checks health there. ``cdi``: ``vendor.com/class`` for
    CDI device names. ``env``: variables added to (and overriding) every Allocate.
    """

    name: str
    discover: Discover
    replicas: int = 1
    pre_start: bool = False
    cdi: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def slug(self) -> str:
        """The name fit for a file name: ``intel.com/sriov_vf`` -> ``intel.com-sriov_vf``."""
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.name).strip("-")


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """Everything the resource file says. ``path`` is where it was read from."""

    resources: tuple[ResourceConfig, ...]
    health_interval_s: float = DEFAULT_HEALTH_INTERVAL_S
    xid_unhealthy_for_s: float = DEFAULT_XID_UNHEALTHY_FOR_S
    path: str = "<memory>"

    @property
    def ids_per_resource(self) -> int:
        """The device ids each resource may advertise: its equal share of
        :data:`MAX_DEVICE_IDS`."""
        return MAX_DEVICE_IDS // max(1, len(self.resources))

    @property
    def uses_nvml(self) -> bool:
        return any(r.discover.kind is DiscoverKind.NVML for r in self.resources)


# Why the kubelet refuses a resource name, worded for the resource file.
_NAME_PROBLEMS: Final = {
    NameProblem.NO_DOMAIN: "has no domain (expected domain/name, e.g. example.com/widget)",
    NameProblem.KUBERNETES_IO: "is in the kubernetes.io namespace, which is reserved",
    NameProblem.REQUESTS_PREFIX: "starts with requests., which is reserved for quotas",
    NameProblem.SLASHES: "has more than one /",
    NameProblem.EMPTY_DOMAIN: "has an empty domain",
    NameProblem.INVALID_DOMAIN: (
        "has an invalid domain {domain!r} (expected a lower-case DNS subdomain)"
    ),
    NameProblem.EMPTY_NAME: "has an empty name after the /",
    NameProblem.INVALID_NAME: (
        "has an invalid name {short!r} (alphanumerics, '-', '_' or '.', starting and "
        "ending with an alphanumeric, at most 63 characters)"
    ),
}


def resource_name_problem(name: str) -> str | None:
    """Why the kubelet would refuse ``name`` as a device-plugin resource, or None.

    It must be ``domain/name``: the domain a lower-case DNS subdomain, not
    ``kubernetes.io`` nor under it (the kubelet refuses any name containing
    ``kubernetes.io/``), not starting with ``requests.``; the name a qualified name
    (alphanumerics, ``-``, ``_``, ``.``, at most 63 characters). The rules are
    :func:`podres_exporter.core.kube.extended_resource_problem`'s.
    """
    problem = extended_resource_problem(name)
    if problem is None:
        return None
    domain, _, short = name.partition("/")
    return _NAME_PROBLEMS[problem].format(domain=domain, short=short)


# ------------------------------------------------------------------------ parsing


class _Table:
    """One TOML table being read: typed getters that name the key on error."""

    def __init__(self, data: Any, where: str, source: str) -> None:
        self.where = where
        self.source = source  # the file as errors name it: _named(path)
        if not isinstance(data, dict):
            raise self.error(f"expected a table, got {describe(data)}")
        self.data: dict[str, Any] = data

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def error(self, message: str, name: str | None = None) -> ConfigError:
        where = self.where if name is None else self.key(name)
        return ConfigError(f"{self.source}: {where}: {message}")

    def only(self, allowed: tuple[str, ...]) -> None:
        for name in self.data:
            if name not in allowed:
                raise self.error(f"unknown key{key_hint(name, allowed)}", name)

    def string(self, name: str, *, required: bool = False) -> str | None:
        if name not in self.data:
            if required:
                raise self.error("is required", name)
            return None
        value = self.data[name]
        if not isinstance(value, str):
            raise self.error(f"expected a string, got {describe(value)}", name)
        if not value.strip():
            raise self.error("is empty", name)
        return value.strip()

    def boolean(self, name: str, default: bool) -> bool:
        if name not in self.data:
            return default
        value = self.data[name]
        if not isinstance(value, bool):
            raise self.error(f"expected true or false, got {describe(value)}", name)
        return value

    def duration(self, name: str, default: float, parse: Duration) -> float:
        """A duration: a string with its unit, as in the settings file."""
        if name not in self.data:
            return default
        value = self.data[name]
        wrong = toml_type_error(parse, name, value)
        if wrong is not None:
            raise self.error(wrong, name)
        try:
            return parse(value)
        except ValueError as err:
            raise self.error(str(err), name) from err

    def table(self, name: str, *, required: bool = False) -> _Table | None:
        if name not in self.data:
            if required:
                raise self.error("is required", name)
            return None
        return _Table(self.data[name], self.key(name), self.source)


def _named(path: str) -> str:
    """The resource file at ``path`` as its errors name it."""
    return f"resource file {path} ({NAMED_BY})"


def _hex_id(table: _Table, name: str) -> str | None:
    value = table.string(name)
    if value is None:
        return None
    if not _HEX_ID.match(value):
        raise table.error(f"{value!r} is not a PCI id (4 hex digits, e.g. 0x8086)", name)
    return "0x" + value.lower().removeprefix("0x")


def _discover(table: _Table) -> Discover:
    raw_kind = table.string("kind", required=True) or ""
    try:
        kind = DiscoverKind(raw_kind)
    except ValueError:
        known = ", ".join(k.value for k in DiscoverKind)
        raise table.error(f"{raw_kind!r} is not one of {known}", "kind") from None
    if kind is DiscoverKind.NVML:
        table.only(("kind", "mig", "profile"))
        mig = table.boolean("mig", False)
        profile = table.string("profile")
        if profile is not None:
            if not mig:
                raise table.error("is only meaningful with mig = true", "profile")
            profile = profile.removeprefix("mig-")
            if not _MIG_PROFILE.match(profile):
                raise table.error(f"{profile!r} is not a MIG profile (e.g. 1g.10gb)", "profile")
        return Discover(kind, mig=mig, profile=profile)
    if kind is DiscoverKind.PCI:
        table.only(("kind", "vendor", "device", "class", "driver"))
        pci_class = table.string("class")
        if pci_class is not None:
            pci_class = pci_class.lower()
            if not pci_class.startswith("0x"):
                pci_class = "0x" + pci_class
            if not any(c in pci_class for c in "*?["):
                pci_class += "*"  # a prefix
        rule = Discover(
            kind,
            vendor=_hex_id(table, "vendor"),
            device=_hex_id(table, "device"),
            pci_class=pci_class,
            driver=table.string("driver"),
        )
        if not (rule.vendor or rule.device or rule.pci_class or rule.driver):
            raise table.error("a pci rule needs at least one of vendor, device, class, driver")
        return rule
    if kind is DiscoverKind.NETDEV:
        table.only(("kind", "pattern"))
        pattern = table.string("pattern", required=True)
        if pattern is not None and "/" in pattern:
            raise table.error("an interface name has no /", "pattern")
        return Discover(kind, pattern=pattern)
    table.only(("kind", "glob"))
    glob = table.string("glob", required=True) or ""
    glob = glob.removeprefix("/dev/").lstrip("/")
    if not glob or ".." in glob.split("/"):
        raise table.error("expected a glob under /dev such as fuse or dri/renderD*", "glob")
    return Discover(kind, glob=glob)


def _env(table: _Table | None) -> Mapping[str, str]:
    if table is None:
        return MappingProxyType({})
    out: dict[str, str] = {}
    for name, value in table.data.items():
        if not _ENV_NAME.match(name):
            raise table.error("is not an environment variable name", name)
        if not isinstance(value, str):
            raise table.error(f"expected a string, got {describe(value)}", name)
        out[name] = value
    return MappingProxyType(out)


def _resource(table: _Table) -> ResourceConfig:
    table.only(("name", "discover", "replicas", "pre_start", "cdi", "env"))
    name = table.string("name", required=True) or ""
    problem = resource_name_problem(name)
    if problem is not None:
        raise table.error(f"resource name {name!r} {problem}", "name")
    discover_table = table.table("discover", required=True)
    assert discover_table is not None
    discover = _discover(discover_table)
    replicas = table.data.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise table.error(f"expected a whole number, got {describe(replicas)}", "replicas")
    if not 1 <= replicas <= MAX_REPLICAS:
        raise table.error(f"{replicas} is not in 1..{MAX_REPLICAS}", "replicas")
    cdi = table.string("cdi")
    if cdi is not None and not _CDI_KIND.match(cdi):
        raise table.error(f"{cdi!r} is not a CDI kind (vendor.com/class)", "cdi")
    return ResourceConfig(
        name=name,
        discover=discover,
        replicas=replicas,
        pre_start=table.boolean("pre_start", False),
        cdi=cdi,
        env=_env(table.table("env")),
    )


def parse_config(
    data: Mapping[str, Any],
    *,
    source: str = "<memory>",
    health_interval_s: float | None = None,
    xid_unhealthy_for_s: float | None = None,
) -> PluginConfig:
    """A PluginConfig from the parsed TOML ``data``; ConfigError names the bad key. No
    ``[[resource]]`` at all is a config that advertises nothing.

    ``health_interval_s`` / ``xid_unhealthy_for_s``, when given (from a flag or the
    environment, already parsed), win over the ``[plugin]`` table.
    """
    named = _named(source)
    top = _Table(dict(data), "", named)
    top.only(("plugin", "resource"))
    plugin = top.table("plugin") or _Table({}, "plugin", named)
    plugin.only(("health_interval", "xid_unhealthy_for"))
    resources_raw = top.data.get("resource", [])
    if not isinstance(resources_raw, list):
        raise top.error(f"expected [[resource]] tables, got {describe(resources_raw)}", "resource")
    resources = tuple(
        _resource(_Table(item, f"resource[{i}]", named)) for i, item in enumerate(resources_raw)
    )
    seen: dict[str, int] = {}
    for i, res in enumerate(resources):
        if res.name in seen:
            raise ConfigError(
                f"{named}: resource[{i}].name: {res.name!r} is already "
                f"declared by resource[{seen[res.name]}]"
            )
        seen[res.name] = i
    share = MAX_DEVICE_IDS // max(1, len(resources))
    for i, res in enumerate(resources):
        if res.replicas > share:
            raise ConfigError(
                f"{named}: resource[{i}].replicas: {res.replicas} ids per device "
                f"do not fit the {share} ids each of {len(resources)} resources may advertise "
                f"(at most {MAX_DEVICE_IDS} in all, shared equally)"
            )
    health = plugin.duration("health_interval", DEFAULT_HEALTH_INTERVAL_S, HEALTH_INTERVAL)
    xid = plugin.duration("xid_unhealthy_for", DEFAULT_XID_UNHEALTHY_FOR_S, XID_UNHEALTHY_FOR)
    return PluginConfig(
        resources=resources,
        health_interval_s=health if health_interval_s is None else health_interval_s,
        xid_unhealthy_for_s=xid if xid_unhealthy_for_s is None else xid_unhealthy_for_s,
        path=source,
    )


def load_config(
    path: str,
    *,
    health_interval_s: float | None = None,
    xid_unhealthy_for_s: float | None = None,
) -> PluginConfig:
    """Read and validate the resource file at ``path`` (see :func:`parse_config`)."""
    return parse_config(
        read_toml(path, flag=NAMED_BY, what="resource file"),
        source=path,
        health_interval_s=health_interval_s,
        xid_unhealthy_for_s=xid_unhealthy_for_s,
    )
