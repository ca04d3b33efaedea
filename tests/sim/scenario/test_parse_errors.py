"""`podres demo --scenario FILE` with a scenario file that is wrong: exit status 2 naming
the file and the key; and no value of any type anywhere in a scenario raises anything but
a ScenarioError."""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.cli import main
from podres_exporter.core.errors import ScenarioError
from podres_sim.scenario import scenario_from_dict

GOOD = """
name = "tiny"
[node]
numa_nodes = 1
cpus_per_numa_node = 2
[[pods]]
namespace = "ns"
name = "p"
[[pods.containers]]
name = "c"
cpu = 1
memory = "1Gi"
"""


@pytest.mark.parametrize(
    ("content", "names"),
    [
        pytest.param(GOOD.encode("utf-16"), ": not UTF-8 text (byte 0)", id="utf-16"),
        pytest.param(
            GOOD.replace('"tiny"', '"t\xefny"').encode("latin-1"), ": not UTF-8 text", id="latin-1"
        ),
        pytest.param(GOOD.replace('name = "c"', 'name = "c'), ": invalid TOML", id="syntax"),
        pytest.param(
            GOOD.replace('name = "c"', "name = 3"),
            ": pods[0].containers[0].name: expected a string",
            id="number-for-string",
        ),
        pytest.param(
            GOOD.replace("numa_nodes = 1", "numa_nodes = [1]"),
            ": node.numa_nodes: expected an integer",
            id="array-for-int",
        ),
        pytest.param(
            GOOD.replace("cpu = 1", "cpu = { n = 1 }"),
            ": pods[0].containers[0].cpu: ",
            id="table-for-cpu",
        ),
        pytest.param(
            GOOD.replace("cpu = 1", "cpu = inf"), ": pods[0].containers[0].cpu: ", id="inf-cpu"
        ),
        pytest.param(
            GOOD.replace('memory = "1Gi"', "memory = [1]"),
            ": pods[0].containers[0].memory: ",
            id="array-for-memory",
        ),
        pytest.param(
            GOOD + "[kubelet]\napi = 1\n", ": kubelet.api: expected", id="number-for-choice"
        ),
        pytest.param(
            GOOD + "[churn]\ninterval_s = 1e9\n",
            ": churn.interval_s: expected seconds from 0 to 3600",
            id="churn-over-bound",
        ),
        pytest.param(
            GOOD.replace("numa_nodes = 1", "numa_nodes = 100000000"),
            ": node.numa_nodes: expected 1 to 1024",
            id="numa-over-bound",
        ),
        pytest.param(
            GOOD.replace("[[pods]]", "[[pods]]\nreplicas = 10000000"),
            ": pods[0].replicas: expected at most 100000",
            id="replicas-over-bound",
        ),
        pytest.param(
            GOOD.replace(
                "cpus_per_numa_node = 2", 'cpus_per_numa_node = 2\nreserved_cpus = "0-99999999"'
            ),
            ": node.reserved_cpus: CPU ids are below 8192",
            id="cpu-id-over-bound",
        ),
        pytest.param(
            GOOD + "[device_plugins]\nresource_grace_s = 1e12\n",
            ": device_plugins.resource_grace_s: expected at most",
            id="grace-over-bound",
        ),
        pytest.param('colour = "red"\n' + GOOD, ": colour: unknown key", id="unknown-key"),
    ],
)
def test_a_wrong_scenario_file_exits_2_naming_file_and_key(
    tmp_path: Path, content: str | bytes, names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`podres demo --scenario FILE`: another encoding, not TOML, a value of the wrong type,
    a size no node has, or an unknown key: exit 2 naming the file and the key."""
    path = tmp_path / "node.toml"
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    assert main(["demo", "--scenario", str(path), "--listen-address", "127.0.0.1:0"], {}) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"podres demo: error: --scenario: {path}{names}")
    assert "Traceback" not in err


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key and array index in ``data``, as a path from the top."""
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for k, v in items:
        yield (*prefix, k)
        if isinstance(v, dict | list):
            yield from _paths(v, (*prefix, k))


WRONG: tuple[Any, ...] = ([], {}, -1, "x", True, [{}], float("inf"), float("nan"))


@pytest.mark.parametrize("name", ["demo", "minimal"])
def test_any_value_anywhere_is_a_scenario_error_or_accepted(name: str) -> None:
    """Each key of a shipped scenario given each wrong type in turn: the scenario loads
    or a ScenarioError names the source; nothing else escapes (a TypeError, an
    OverflowError would be a traceback in `podres demo`)."""
    text = resources.files("podres_sim.scenario").joinpath("files", f"{name}.toml")
    data = tomllib.loads(text.read_text(encoding="utf-8"))
    tried = 0
    for path in _paths(data):
        for value in WRONG:
            mutated = copy.deepcopy(data)
            target = mutated
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = value
            try:
                scenario_from_dict(mutated, source="s.toml")
            except ScenarioError as err:
                assert err.source == "s.toml"
            tried += 1
    assert tried > 100
