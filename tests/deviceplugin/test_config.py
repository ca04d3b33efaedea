"""The resource file: schema, defaults, and errors that name the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from podres_exporter.core.errors import ConfigError
from podres_exporter.deviceplugin.config import (
    DiscoverKind,
    load_config,
    parse_config,
    resource_name_problem,
)

EXAMPLE = """
[plugin]
health_interval = "250ms"
xid_unhealthy_for = "2m"

[[resource]]
name = "intel.com/sriov_vf"
cdi = "intel.com/net"
pre_start = true
env = { SRIOV_POOL = "east" }
[resource.discover]
kind = "pci"
vendor = "8086"
device = "0x1889"
class = "0x0200"
driver = "iavf"

[[resource]]
name = "nvidia.com/gpu"
replicas = 4
[resource.discover]
kind = "nvml"

[[resource]]
name = "nvidia.com/mig-1g.10gb"
[resource.discover]
kind = "nvml"
mig = true
profile = "1g.10gb"

[[resource]]
name = "example.com/uplink"
[resource.discover]
kind = "netdev"
pattern = "ens*f1"

[[resource]]
name = "example.com/fuse"
[resource.discover]
kind = "dev"
glob = "/dev/fuse"
"""


def res(name: str = "example.com/widget", **discover: Any) -> dict[str, Any]:
    return {"name": name, "discover": discover or {"kind": "dev", "glob": "fuse"}}


def test_the_documented_example_parses(tmp_path: Path) -> None:
    """Every kind and option of the example file is read, normalised and kept."""
    path = tmp_path / "plugin.toml"
    path.write_text(EXAMPLE)
    config = load_config(str(path))
    assert config.path == str(path)
    assert config.health_interval_s == 0.25
    assert config.xid_unhealthy_for_s == 120.0
    vf, gpu, mig, uplink, fuse = config.resources
    assert vf.name == "intel.com/sriov_vf"
    assert vf.discover.kind is DiscoverKind.PCI
    assert (vf.discover.vendor, vf.discover.device) == ("0x8086", "0x1889")
    assert vf.discover.pci_class == "0x0200*"  # a prefix becomes a glob
    assert vf.discover.driver == "iavf"
    assert vf.cdi == "intel.com/net"
    assert vf.pre_start is True
    assert dict(vf.env) == {"SRIOV_POOL": "east"}
    assert vf.replicas == 1
    assert (gpu.replicas, gpu.discover.mig) == (4, False)
    assert (mig.discover.mig, mig.discover.profile) == (True, "1g.10gb")
    assert uplink.discover.pattern == "ens*f1"
    assert fuse.discover.glob == "fuse"  # the leading /dev/ is dropped
    assert config.uses_nvml


def test_defaults() -> None:
    """Without [plugin] the health interval is 500 ms and the XID window 5 minutes."""
    config = parse_config({"resource": [res()]})
    assert config.health_interval_s == 0.5
    assert config.xid_unhealthy_for_s == 300.0
    assert not config.uses_nvml
    only = config.resources[0]
    assert (only.replicas, only.pre_start, only.cdi, dict(only.env)) == (1, False, None, {})


def test_flag_values_override_the_plugin_table() -> None:
    """Already-parsed overrides (from flags or the environment) win over [plugin]."""
    config = parse_config(
        {"plugin": {"health_interval": "2s"}, "resource": [res()]},
        health_interval_s=0.1,
        xid_unhealthy_for_s=9.0,
    )
    assert (config.health_interval_s, config.xid_unhealthy_for_s) == (0.1, 9.0)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"resource": [res()], "plugins": {}}, "plugins: unknown key"),
        ({"plugin": {"health": "1s"}, "resource": [res()]}, "plugin.health: unknown key"),
        ({"plugin": {"health_interval": "soon"}, "resource": [res()]}, "plugin.health_interval:"),
        ({"plugin": {"xid_unhealthy_for": 0}, "resource": [res()]}, "plugin.xid_unhealthy_for:"),
        ({"resource": "x"}, "resource: expected [[resource]] tables, got the string 'x'"),
        ({"plugin": {"health_interval": 2}}, 'as in health_interval = "2s"; got the number 2'),
        ({"resource": [res(), {"nmae": "x"}]}, "resource[1].nmae: unknown key"),
        (
            {"resource": [{"discover": {"kind": "dev", "glob": "x"}}]},
            "resource[0].name: is required",
        ),
        ({"resource": [{"name": 3, "discover": {}}]}, "resource[0].name: expected a string"),
        ({"resource": [{"name": "example.com/a"}]}, "resource[0].discover: is required"),
        ({"resource": [res(kind="usb")]}, "resource[0].discover.kind: 'usb' is not one of"),
        ({"resource": [res(kind="pci")]}, "resource[0].discover: a pci rule needs"),
        ({"resource": [res(kind="pci", vendr="8086")]}, "resource[0].discover.vendr: unknown key"),
        ({"resource": [res(kind="pci", vendor="intel")]}, "resource[0].discover.vendor:"),
        ({"resource": [res(kind="nvml", profile="1g.10gb")]}, "discover.profile: is only"),
        ({"resource": [res(kind="nvml", mig=True, profile="big")]}, "discover.profile: 'big'"),
        ({"resource": [res(kind="nvml", mig="yes")]}, "discover.mig: expected true or false"),
        ({"resource": [res(kind="netdev")]}, "resource[0].discover.pattern: is required"),
        ({"resource": [res(kind="netdev", pattern="a/b")]}, "discover.pattern: an interface"),
        ({"resource": [res(kind="dev", glob="../etc/*")]}, "resource[0].discover.glob:"),
        ({"resource": [res(kind="dev")]}, "resource[0].discover.glob: is required"),
        ({"resource": [{**res(), "replicas": 0}]}, "resource[0].replicas: 0 is not in 1..1024"),
        ({"resource": [{**res(), "replicas": True}]}, "resource[0].replicas: expected a whole"),
        ({"resource": [{**res(), "pre_start": "on"}]}, "resource[0].pre_start: expected true"),
        ({"resource": [{**res(), "cdi": "gpu"}]}, "resource[0].cdi: 'gpu' is not a CDI kind"),
        ({"resource": [{**res(), "env": {"A-B": "x"}}]}, "resource[0].env.A-B: is not an env"),
        ({"resource": [{**res(), "env": {"A": 1}}]}, "resource[0].env.A: expected a string"),
        ({"resource": [res(), res()]}, "resource[1].name: 'example.com/widget' is already"),
    ],
)
def test_a_bad_value_names_the_file_and_the_key(data: dict[str, Any], key: str) -> None:
    """Each mistake is a ConfigError naming the file and the exact key."""
    with pytest.raises(ConfigError) as info:
        parse_config(data, source="/etc/podres/plugin.toml")
    message = str(info.value)
    assert message.startswith(
        "resource file /etc/podres/plugin.toml (--resources / PODRES_RESOURCES): "
    )
    assert key in message


@pytest.mark.parametrize(
    "name",
    [
        "kubernetes.io/x",
        "foo.kubernetes.io/x",
        "gpu",
        "example.com/",
        "/gpu",
        "Example.com/gpu",
        "example.com/a/b",
        "requests.example.com/x",
        "example.com/-gpu",
        "exa_mple.com/gpu",
        "example.com/" + "g" * 64,
    ],
)
def test_the_kubelet_would_refuse_these_resource_names(name: str) -> None:
    """Names the kubelet's extended-resource check refuses are refused at load."""
    assert resource_name_problem(name) is not None
    with pytest.raises(ConfigError, match=r"resource\[0\]\.name: resource name"):
        parse_config({"resource": [res(name)]})


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("gpu", "has no domain (expected domain/name, e.g. example.com/widget)"),
        ("foo.kubernetes.io/x", "is in the kubernetes.io namespace, which is reserved"),
        ("requests.example.com/x", "starts with requests., which is reserved for quotas"),
        ("example.com/a/b", "has more than one /"),
        ("/gpu", "has an empty domain"),
        (
            "Example.com/gpu",
            "has an invalid domain 'Example.com' (expected a lower-case DNS subdomain)",
        ),
        ("example.com/", "has an empty name after the /"),
        (
            "example.com/-gpu",
            "has an invalid name '-gpu' (alphanumerics, '-', '_' or '.', starting and ending "
            "with an alphanumeric, at most 63 characters)",
        ),
    ],
)
def test_a_refused_name_says_why(name: str, problem: str) -> None:
    """Each rule a name breaks has its own message, naming the bad part."""
    assert resource_name_problem(name) == problem
    with pytest.raises(ConfigError) as info:
        parse_config({"resource": [res(name)]})
    assert str(info.value) == (
        "resource file <memory> (--resources / PODRES_RESOURCES): "
        f"resource[0].name: resource name {name!r} {problem}"
    )


@pytest.mark.parametrize(
    "name",
    ["example.com/gpu", "nvidia.com/mig-1g.10gb", "intel.com/sriov_netdevice", "a.b/C.d_e-f"],
)
def test_valid_resource_names_pass(name: str) -> None:
    """Domain/name with a DNS-subdomain domain and a qualified name is accepted."""
    assert resource_name_problem(name) is None


def test_a_missing_or_broken_file_is_named(tmp_path: Path) -> None:
    """An unreadable file and a file that is not TOML are ConfigErrors naming the file."""
    with pytest.raises(
        ConfigError, match=r"^resource file .*nope\.toml \(--resources / PODRES_RESOURCES\)"
    ):
        load_config(str(tmp_path / "nope.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[[resource]\nname=")
    with pytest.raises(
        ConfigError, match=r"bad\.toml \(--resources / PODRES_RESOURCES\) is not valid TOML"
    ):
        load_config(str(bad))


def test_the_slug_is_fit_for_a_socket_name() -> None:
    """The resource's slug has no slash, so it can name the plugin's socket."""
    config = parse_config({"resource": [res("intel.com/sriov_vf")]})
    assert config.resources[0].slug == "intel.com-sriov_vf"
