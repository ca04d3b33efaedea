"""`podres top`'s owners: each container's workload from podres_pod_info, shown, filtered and
sorted by, from an exporter's /metrics, Prometheus and the local reader alike."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import pytest

from podres_exporter.cli.export import Exporter
from podres_exporter.top import add_top_parser, run_top
from podres_exporter.top.fetch.local import LocalSource
from podres_exporter.top.jsonout import to_json
from podres_exporter.top.render import render
from podres_exporter.top.rows import build
from podres_exporter.top.selection import Options, select
from podres_sim import SimKubelet
from tests.support import Prometheus, exporter_settings, http_get, wait_until
from tests.top.samples import DEVICES, NODE, reading, s


def _data() -> Any:
    """The samples' node, with the trainer's pod a Job's and one vLLM pod a Deployment's."""
    owners = (
        s("podres_pod_info", 1, namespace="ml", pod="train-0", uid="u1", owner_kind="Job",
          owner_name="train", controller_kind="Job", controller_name="train"),
        s("podres_pod_info", 1, namespace="inf", pod="vllm-a", uid="u2",
          owner_kind="Deployment", owner_name="vllm", controller_kind="ReplicaSet",
          controller_name="vllm-5d9f"),
        s("podres_pod_info", 1, namespace="inf", pod="vllm-b", uid="u3"),  # no controller
    )  # fmt: skip
    return build(reading(*NODE, *DEVICES, *owners))


def test_rows_carry_their_pods_workload_and_wide_shows_it() -> None:
    """A container's owner is its pod's owner_kind/owner_name; -o wide has an OWNER column,
    the default view does not; JSON has it (null without one)."""
    data = _data()
    owners = {(r.pod, r.owner) for n in data.nodes for r in n.containers}
    assert {("train-0", "Job/train"), ("vllm-a", "Deployment/vllm"), ("vllm-b", "")} <= owners
    wide = render(data, Options(wide=True), 240)
    assert " OWNER" in wide and "Deployment/vllm" in wide
    assert " OWNER" not in render(data, Options(), 240)
    doc = to_json(data, Options())
    by_pod = {c["pod"]: c["owner"] for n in doc["nodes"] for c in n["containers"]}
    assert by_pod["train-0"] == "Job/train" and by_pod["vllm-b"] is None


def test_owner_filter_and_sort_group_by_workload() -> None:
    """--owner keeps a workload's containers (substring or glob); --sort owner puts each
    workload's containers together, those without one last."""
    data = _data()
    kept, _ = select(data, Options(owner="Deployment/*"))
    assert {r.pod for r in kept} == {"vllm-a"}
    kept, _ = select(data, Options(owner="train"))
    assert {r.pod for r in kept} == {"train-0"}
    ordered, _ = select(data, Options(sort="owner"))
    assert [r.owner for r in ordered][:2] == ["Deployment/vllm", "Job/train"]
    assert ordered[-1].owner == ""


def _top_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="podres")
    add_top_parser(parser.add_subparsers(dest="command", required=True))
    capsys.readouterr()
    rc = run_top(parser.parse_args(["top", *args, "--once", "-o", "json"]), {})
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def _owners(doc: dict[str, Any]) -> dict[tuple[str, str], str | None]:
    return {(c["namespace"], c["pod"]): c["owner"] for n in doc["nodes"] for c in n["containers"]}


def _deployed(owners: dict[tuple[str, str], str | None]) -> bool:
    """The Pods API has synced: the Deployment's pods have their owner."""
    return any(o == "Deployment/vllm-llama3-8b" for o in owners.values())


def test_owners_from_an_exporter_and_the_local_reader(
    make_sim: Callable[..., SimKubelet],
    make_exporter: Callable[..., Exporter],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--exporter and the local node give every container the owner the Pods API says:
    the same from both, a Job's pods their Job, a bare pod none."""
    sim = make_sim("demo")
    exp = make_exporter(sim)
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    remote = wait_until(
        lambda: o if _deployed(o := _owners(_top_json(capsys, "--exporter", exp.url))) else None,
        timeout=30,
    )
    source = LocalSource(
        exporter_settings(sim),
        node_name="gpu-node-a1",
        gpu_backend=sim.host.gpu_backend(),  # type: ignore[attr-defined]
    )
    try:
        local = wait_until(
            lambda: (
                o if _deployed(o := _owners(to_json(build(source.read()), Options()))) else None
            ),
            timeout=30,
        )
    finally:
        source.close()
    assert local == remote
    assert remote[("research", "jupyter-alice")] is None
    assert remote[("ml-training", "llm-pretrain-0")] == "StatefulSet/llm-pretrain"


@pytest.mark.prometheus
def test_owners_from_prometheus(
    make_sim: Callable[..., SimKubelet],
    make_exporter: Callable[..., Exporter],
    prometheus: Callable[[list[str]], Prometheus],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--prometheus reads podres_pod_info too: the same owners as the exporter's own."""
    exp = make_exporter(make_sim("demo"))
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    direct = wait_until(
        lambda: o if _deployed(o := _owners(_top_json(capsys, "--exporter", exp.url))) else None,
        timeout=30,
    )
    prom = prometheus([exp.url.removeprefix("http://")])
    wait_until(lambda: prom.query('podres_pod_info{owner_kind="Deployment"}'), timeout=60)
    via = wait_until(
        lambda: o if _deployed(o := _owners(_top_json(capsys, "--prometheus", prom.url))) else None,
        timeout=60,
    )
    assert via == direct
