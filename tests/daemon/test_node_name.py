"""The node's name: --node-name > PODRES_NODE_NAME > config file > NODE_NAME > host name,
for podres export and podres plugin alike."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest

from podres_exporter.core.errors import ConfigError
from podres_exporter.daemon.flags import node_name
from podres_exporter.deviceplugin.main import add_plugin_parser, plugin_settings
from podres_exporter.exporter.settings import build


def _export(flags: dict[str, str], env: dict[str, str], config: Path | None = None) -> str:
    return build(flags, env, config_path=str(config) if config else None).node_name


def _plugin(argv: list[str], env: dict[str, str]) -> str:
    top = argparse.ArgumentParser(prog="podres")
    add_plugin_parser(top.add_subparsers(dest="command", required=True))
    ns = top.parse_args(["plugin", "--resources", "r.toml", *argv])
    return plugin_settings(ns, env).node_name


def test_precedence_flag_env_file_downward_api_host(tmp_path: Path) -> None:
    """Each source wins over every one after it; with none, the host name."""
    config = tmp_path / "podres.toml"
    config.write_text('node-name = "from-file"\n')
    both = {"PODRES_NODE_NAME": "from-env", "NODE_NAME": "from-downward-api"}
    assert _export({"--node-name": "from-flag"}, both, config) == "from-flag"
    assert _export({}, both, config) == "from-env"
    assert _export({}, {"NODE_NAME": "from-downward-api"}, config) == "from-file"
    assert _export({}, {"NODE_NAME": "from-downward-api"}) == "from-downward-api"
    assert _export({}, {}) == socket.gethostname()
    assert _plugin(["--node-name", "from-flag"], both) == "from-flag"
    assert _plugin([], both) == "from-env"
    assert _plugin([], {"NODE_NAME": "from-downward-api"}) == "from-downward-api"
    assert _plugin([], {}) == socket.gethostname()


def test_host_name_fallback_is_injectable_and_never_empty() -> None:
    """Without flag or NODE_NAME the host name is used as it is, 'unknown' when empty."""
    assert node_name(None, {}, lambda: "gpu-node-7") == "gpu-node-7"
    assert node_name(None, {"NODE_NAME": " "}, lambda: "gpu-node-7") == "gpu-node-7"
    assert node_name(None, {}, lambda: "") == "unknown"


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        ({"--node-name": "two words"}, {}, "--node-name"),
        ({}, {"PODRES_NODE_NAME": "-bad"}, "PODRES_NODE_NAME"),
        ({}, {"NODE_NAME": "a/b"}, "NODE_NAME (from the environment)"),
    ],
)
def test_a_bad_name_names_where_it_came_from(
    flags: dict[str, str], env: dict[str, str], named: str
) -> None:
    """A name that is no node name is refused, naming the flag or variable to fix."""
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(")", r"\)")):
        _export(flags, env)
