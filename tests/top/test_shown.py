"""`podres top` shows everything it counts: DRA-held devices, the containers it does not
list, and wide mode's device ids whole."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import pytest

from podres_exporter.cli.export import Exporter
from podres_exporter.top import add_top_parser, run_top
from podres_exporter.top.jsonout import to_json
from podres_exporter.top.render import render
from podres_exporter.top.rows import Sample, TopData, build
from podres_exporter.top.selection import Options
from podres_sim import SimKubelet
from tests.support import http_get, wait_until
from tests.top.rows.support import one_node, row
from tests.top.samples import NODE, reading, s
from tests.top.test_render import local_data

RERANK = {"namespace": "ml", "pod": "rerank-0", "container": "rerank"}
ROUTER = {"namespace": "ml", "pod": "router-0", "container": "router"}
MIG = "MIG-36f675cc-81e7-4ef5-a8e2-5d940ed90475"
MIG_B = "MIG-6b0d549b-6f03-475a-9600-a35a099950d8"
BASE = tuple(x for x in NODE if x.name != "podres_containers")  # one row: the trainer


def claim(holder: dict[str, str], name: str, driver: str = "", device: str = "") -> Sample:
    """A ``podres_container_dynamic_resource_info`` series: one device of a claim."""
    return s(
        "podres_container_dynamic_resource_info", 1, claim_namespace="ml", claim_name=name,
        dra_driver=driver, dra_pool="node-a" if device else "", dra_device=device, **holder,
    )  # fmt: skip


def dra_only() -> TopData:
    """A node where one container holds nothing but a DRA claim of two GPUs, a NIC it
    shares with another claim, and one that holds a claim naming no device."""
    return build(
        reading(
            *BASE,
            s("podres_containers", 6),
            claim(RERANK, "gpus", "gpu.example.com", "gpu-0"),
            claim(RERANK, "gpus", "gpu.example.com", "gpu-1"),
            claim(RERANK, "nic", "dra.net", "eth2"),
            claim(ROUTER, "nic-b", "dra.net", "eth2"),
            claim({**ROUTER, "container": "sidecar"}, "old-style"),
            s("podres_dra_devices", 2, dra_driver="gpu.example.com", dra_pool="node-a"),
            s("podres_dra_shared_devices", 0, dra_driver="gpu.example.com", dra_pool="node-a"),
            s("podres_dra_devices", 1, dra_driver="dra.net", dra_pool="node-a"),
            s("podres_dra_shared_devices", 1, dra_driver="dra.net", dra_pool="node-a"),
        )
    )


def test_a_container_holding_only_dra_claims_has_a_row_with_its_devices() -> None:
    """Its row lists its DRA devices (resource: the driver, id: pool/device) and claims."""
    data = dra_only()
    r = row(data, "rerank-0", "rerank")
    assert [(d.resource, d.device_id, d.dra) for d in r.devices] == [
        ("dra.net", "node-a/eth2", True),
        ("gpu.example.com", "node-a/gpu-0", True),
        ("gpu.example.com", "node-a/gpu-1", True),
    ]
    assert r.claims == ("ml/gpus", "ml/nic")
    assert row(data, "router-0", "sidecar").claims == ("ml/old-style",)


def test_dra_devices_are_device_rows_with_their_holders() -> None:
    """Each DRA device is a device row; one used through two claims is ``shared``."""
    rows = {d.device_id: d for d in one_node(dra_only()).devices if d.dra}
    assert sorted(rows) == ["node-a/eth2", "node-a/gpu-0", "node-a/gpu-1"]
    nic = rows["node-a/eth2"]
    assert nic.state == "shared" and nic.healthy is None
    assert [h.pod for h in nic.holders] == ["rerank-0", "router-0"]
    assert nic.claims == ("ml/nic", "ml/nic-b")
    assert rows["node-a/gpu-0"].state == "allocated"


def test_the_header_counts_dra_devices_in_use_per_driver() -> None:
    """The devices line of the header counts the DRA devices in use, and those shared."""
    text = render(dra_only(), Options(), 160)
    devices = next(x for x in text.splitlines() if x.startswith(" devices free"))
    assert "dra.net (DRA) 1 held (1 shared)" in devices
    assert "gpu.example.com (DRA) 2 held" in devices
    counts = to_json(dra_only(), Options())["nodes"][0]["device_counts"]
    assert {(d["resource"], d["allocated"], d["shared"]) for d in counts if d["dra"]} == {
        ("dra.net", 1, 1),
        ("gpu.example.com", 2, 0),
    }


def test_dra_devices_in_both_views_and_json() -> None:
    """The table marks DRA devices on the container's row and in the devices view; -o json
    carries them with ``"dra": true``."""
    data = dra_only()
    containers = render(data, Options(), 160)
    line = next(x for x in containers.splitlines() if x.startswith("ml         rerank-0"))
    assert "dra.net (DRA): 1, gpu.example.com (DRA): 2" in line
    assert "DRA claims: 1" in next(x for x in containers.splitlines() if "sidecar" in x)
    devices = render(data, Options(view="devices"), 160).splitlines()
    gpu = next(x for x in devices if "node-a/gpu-0" in x)
    assert gpu.split()[:4] == ["gpu.example.com", "(DRA)", "node-a/gpu-0", "none"]
    assert "ml/rerank-0/rerank" in gpu
    doc = to_json(data, Options())
    (node,) = doc["nodes"]
    rerank = next(c for c in node["containers"] if c["pod"] == "rerank-0")
    assert {d["device_id"] for d in rerank["devices"] if d["dra"]} == {
        "node-a/eth2",
        "node-a/gpu-0",
        "node-a/gpu-1",
    }
    assert rerank["dra_claims"] == ["ml/gpus", "ml/nic"]
    assert sum(d["dra"] for d in node["devices"]) == 3


def test_containers_with_nothing_placed_are_counted_in_a_footer() -> None:
    """Containers the header counts but the table leaves out are said, with how to list them."""
    data = dra_only()  # 6 containers, 4 with a row
    assert one_node(data).unplaced == 2
    lines = render(data, Options(), 120).splitlines()
    assert "+ 2 more containers hold nothing placed (shared CPU pool only): not listed" in lines
    assert "  list every pod: kubectl get pods -A -o wide" in lines
    assert to_json(data, Options())["nodes"][0]["containers_unplaced"] == 2
    assert not any(x.startswith("+ ") for x in render(data, Options(view="devices"), 120).split())


def test_no_footer_when_every_container_has_a_row() -> None:
    """No note when nothing is left out, or when the source serves no container count."""
    every = build(reading(*BASE, s("podres_containers", 3), claim(RERANK, "a", "d", "x"),
                          claim(ROUTER, "b", "d", "y")))  # fmt: skip
    uncounted = build(reading(*BASE, claim(RERANK, "a", "d", "x")))
    for data in (every, uncounted):
        assert not any(x.startswith("+ ") for x in render(data, Options(), 120).splitlines())
    assert one_node(uncounted).unplaced is None


def wide_data() -> TopData:
    """A container holding two MIG instances and a GPU of a DRA claim, with long names."""
    holder = {"namespace": "ml-inference", "pod": "embedding-api-fc6bmt8gm5-dwskk",
              "container": "api"}  # fmt: skip
    return build(
        reading(
            *NODE,
            *(
                s("podres_container_device_info", 1, resource="nvidia.com/mig-1g.10gb",
                  device_id=mig, numa_node="1", **holder)
                for mig in (MIG, MIG_B)
            ),
            s("podres_node_device_info", 1, resource="nvidia.com/mig-1g.10gb", device_id=MIG,
              numa_node="1", state="allocated"),
            s("podres_container_memory_bytes", 4 * 2**30, numa_node="1", memory_type="memory",
              **holder),
            claim(holder, "gpus", "gpu.example.com", "gpu-0"),
        )
    )  # fmt: skip


def column(text: str, header: str, after: str) -> str:
    """The text of the table column ``header`` (up to column ``after``), its lines joined."""
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if f" {header} " in x)
    left, right = lines[at].index(f" {header} ") + 1, lines[at].index(f" {after} ") + 1
    body = []
    for line in lines[at + 1 :]:
        if not line.strip() or line.startswith(("+ ", "  list")):
            break
        body.append(line[left:right].strip())
    return "".join(body)


@pytest.mark.parametrize("width", [80, 120, 160])
def test_wide_mode_shows_device_ids_whole(width: int) -> None:
    """-o wide folds long device ids onto continuation lines of their column, never cuts them."""
    data = wide_data()
    text = render(data, Options(wide=True), width)
    assert all(len(x) <= width for x in text.splitlines())
    devices = column(text, "DEVICES", "GPU%")
    for device_id in (MIG, MIG_B, "node-a/gpu-0"):
        assert device_id in devices
    assert "…" not in devices
    view = render(data, Options(view="devices", wide=True), width)
    ids = column(view, "DEVICE", "NUMA")
    assert MIG in ids and MIG_B in ids and "…" not in ids


def test_wide_mode_keeps_a_mig_id_on_one_line_where_there_is_room() -> None:
    """At 160 columns each MIG id stands whole on one line; the row goes on below."""
    text = render(wide_data(), Options(wide=True), 160)
    lines = text.split("NAMESPACE", 1)[1].splitlines()[1:]
    assert any(MIG in x for x in lines) and any(MIG_B in x for x in lines)
    first = next(i for i, x in enumerate(lines) if x.startswith("ml-inference"))
    assert "memory 4Gi" in lines[first]
    assert lines[first + 1].startswith(" "), "a continuation line: the other columns blank"


def top_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """`podres top ARGS -o json --once` in-process, its JSON document."""
    parser = argparse.ArgumentParser(prog="podres")
    add_top_parser(parser.add_subparsers(dest="command", required=True))
    capsys.readouterr()
    rc = run_top(parser.parse_args(["top", *args, "--once", "-o", "json"]), {})
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_demo_shows_the_dra_container_and_the_unplaced_footer(
    make_sim: Callable[..., SimKubelet],
    make_exporter: Callable[..., Exporter],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The demo's simulated kubelet, read locally and through its exporter: the DRA pod's
    devices on its row and in the devices view, and the containers not listed counted."""
    sim = make_sim("demo")
    data = local_data(sim)
    text = render(data, Options(), 160)
    reranker = next(x for x in text.splitlines() if "dra-reranker" in x)
    assert "dra.net (DRA): 1, gpu.example.com (DRA): 2" in reranker
    node = one_node(data)
    assert node.header.containers == 56
    listed = len({r.holder for r in node.containers if r.container})
    hidden = 56 - listed
    assert f"+ {hidden} more containers hold nothing placed (shared CPU pool only): not listed" in (
        text.splitlines()
    )
    devices = render(data, Options(view="devices"), 160)
    assert "gpu-node-a1/gpu-1" in devices and "gpu.example.com (DRA)" in devices

    exp = make_exporter(sim)
    wait_until(lambda: http_get(exp.url + "/readyz")[0] == 200)
    doc = top_json(capsys, "--exporter", exp.url, "--interval", "0.3")
    (out,) = doc["nodes"]
    assert out["containers_unplaced"] == hidden
    rerank = next(c for c in out["containers"] if c["pod"] == "dra-reranker")
    assert sorted(d["device_id"] for d in rerank["devices"] if d["dra"]) == [
        "gpu-node-a1/eth2",
        "gpu-node-a1/gpu-0",
        "gpu-node-a1/gpu-1",
    ]
