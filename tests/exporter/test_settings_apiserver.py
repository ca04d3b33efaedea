"""--pod-identity.apiserver: off by default, on from any source, refused outside a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from podres_exporter.cli import main
from podres_exporter.core.errors import ConfigError
from podres_exporter.core.podmeta import Route
from podres_exporter.exporter.settings import build
from podres_exporter.sources.apiserver import ApiServerPods
from podres_exporter.sources.apiserver_wire import ApiServer
from podres_exporter.sources.poddirectory import build_directory_sources

CLUSTER = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_off_by_default_even_in_a_cluster() -> None:
    """Without the switch there is no API-server route, in a pod or not."""
    settings = build({}, CLUSTER)
    assert settings.pod_identity_apiserver is None
    assert Route.APISERVER not in build_directory_sources(settings)


@pytest.mark.parametrize("source", ["flag", "env", "file"])
def test_on_from_every_source_reads_the_in_cluster_server(source: str, tmp_path: Path) -> None:
    """The switch from a flag, PODRES_POD_IDENTITY_APISERVER or the config file's
    [pod-identity] table turns the route on, at the server the environment names."""
    flags, env, path = {}, dict(CLUSTER), None
    if source == "flag":
        flags = {"--pod-identity.apiserver": True}
    elif source == "env":
        env["PODRES_POD_IDENTITY_APISERVER"] = "true"
    else:
        path = tmp_path / "c.toml"
        path.write_text("[pod-identity]\napiserver = true\n")
    settings = build(flags, env | {"NODE_NAME": "node-a"}, config_path=str(path) if path else None)
    assert settings.pod_identity_apiserver == ApiServer("10.0.0.1", 443)
    source_ = build_directory_sources(settings)[Route.APISERVER]
    assert isinstance(source_, ApiServerPods) and source_.node == "node-a"


def test_on_outside_a_cluster_names_the_flag() -> None:
    """On with no KUBERNETES_SERVICE_HOST: a ConfigError naming the switch and its source."""
    with pytest.raises(ConfigError, match=r"--pod-identity.apiserver \(from .*\): "):
        build({"--pod-identity.apiserver": True}, {})
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_PORT"):
        build({}, {"PODRES_POD_IDENTITY_APISERVER": "1", "KUBERNETES_SERVICE_HOST": "h",
                   "KUBERNETES_SERVICE_PORT": "x"})  # fmt: skip


def test_cli_exits_2_once_outside_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    """`podres export --pod-identity.apiserver` outside a pod exits 2, one line, no traceback."""
    assert main(["export", "--pod-identity.apiserver"], env={}) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: --pod-identity.apiserver (from flag" in err
