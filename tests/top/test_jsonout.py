"""-o json: the header and the selected rows of each node as one document."""

from __future__ import annotations

import json

from podres_exporter.top.jsonout import to_json
from podres_exporter.top.rows import build
from podres_exporter.top.selection import Options
from tests.top.samples import DEVICES, GPU_S, GPUS, NODE, reading


def test_json_output_has_header_and_rows_per_node() -> None:
    """-o json: per node its header numbers and its filtered rows, JSON-serialisable."""
    doc = to_json(build(reading(*NODE, *GPUS, *DEVICES), source="test"), Options(pod="vllm-a"))
    text = json.dumps(doc)
    assert json.loads(text) == doc
    (node,) = doc["nodes"]
    assert node["node"] == "node-a" and node["kubelet_up"] is True
    assert [c["shared_free"] for c in node["cpus"]] == [3, 7]
    assert node["device_counts"][0]["unallocated"] == 1
    assert [c["pod"] for c in node["containers"]] == ["vllm-a"]
    assert node["containers"][0]["gpu_shared"] is True
    assert {d["device_id"] for d in node["devices"]} == {f"{GPU_S}::0"}
    assert doc["filters"] == {"pod": "vllm-a"} and doc["sort"] == "name"
