"""The scenarios the package ships and the references that name a scenario.

``builtin_names`` and ``load_builtin`` list and load the TOML files in ``files/``
(``demo``, ``minimal`` ...) and the benchmark's generated nodes (``small``, ``large``,
``huge``); ``resolve_scenario`` turns what ``--scenario`` takes (a built-in name, a
TOML file, ``synthetic:PODS[:N]``) into a scenario.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from podres_exporter.core.errors import ScenarioError
from podres_sim.scenario.parse import parse_scenario, read_scenario
from podres_sim.scenario.records import Scenario
from podres_sim.scenario.synthetic import BENCH_SCENARIOS, bench_scenario, synthetic_scenario

__all__ = ["builtin_names", "load_builtin", "resolve_scenario"]


def _builtin_root() -> Any:
    return resources.files("podres_sim.scenario").joinpath("files")


def builtin_names() -> tuple[str, ...]:
    """The names of the scenarios shipped with the package: the TOML files (``demo``,
    ``minimal`` ...) and the benchmark's generated nodes (``small``, ``large``, ``huge``)."""
    files = (p.name[:-5] for p in _builtin_root().iterdir() if p.name.endswith(".toml"))
    return tuple(sorted({*files, *BENCH_SCENARIOS}))


def load_builtin(name: str) -> Scenario:
    """Load a shipped scenario by name (``"demo"`` -> ``files/demo.toml``)."""
    if name not in builtin_names():
        raise ScenarioError(
            f"{name}.toml", "", f"no built-in scenario {name!r}; have {', '.join(builtin_names())}"
        )
    if name in BENCH_SCENARIOS:
        return bench_scenario(name)
    res = _builtin_root().joinpath(f"{name}.toml")
    return parse_scenario(res.read_text(encoding="utf-8"), source=f"{name}.toml", default_name=name)


# --------------------------------------------------------------------------- references

_SYNTHETIC = "synthetic:"


def resolve_scenario(ref: str) -> Scenario:
    """The scenario a reference names: ``synthetic:PODS[:N]`` (``synthetic_scenario``,
    every Nth pod with an exclusive CPU), a built-in name, or a TOML file (a path ending
    in ``.toml``, or any existing file). A built-in name wins over a file of that name.

    ScenarioError names the reference when it names nothing, else the file and the key.
    """
    if ref.startswith(_SYNTHETIC):
        return _synthetic(ref)
    if ref in builtin_names():
        return load_builtin(ref)
    path = Path(ref)
    if path.suffix == ".toml" or path.is_file():
        return read_scenario(path)
    raise ScenarioError(
        ref,
        "",
        f"neither a built-in scenario ({', '.join(builtin_names())}), a file "
        "nor synthetic:PODS[:N]",
    )


def _synthetic(ref: str) -> Scenario:
    try:
        pods, *every = (int(n) for n in ref.removeprefix(_SYNTHETIC).split(":"))
    except ValueError:
        raise ScenarioError(ref, "", "expected synthetic:PODS[:N]") from None
    if pods < 1 or len(every) > 1 or (every and every[0] < 0):
        raise ScenarioError(ref, "", "expected synthetic:PODS[:N]")
    return synthetic_scenario(pods, exclusive_every=every[0] if every else 0)
