"""Top's views: filters, sort columns and directions over the rows."""

from __future__ import annotations

import pytest

from podres_exporter.top.rows import ContainerRow, NodeData, NodeHeader, TopData, build
from podres_exporter.top.selection import Options, matches, select
from tests.top.samples import DEVICES, GPU_S, GPUS, reading


def _rows(*specs: tuple[str, str, str, int, float | None]) -> TopData:
    header = NodeHeader("n", True, 0.0, 1, 1, (), (), ())
    rows = tuple(
        ContainerRow(
            node="n",
            namespace=ns,
            pod=pod,
            container="c",
            cpus=tuple(range(ncpu)),
            busy=b,
            devices=(),
        )
        for ns, pod, _res, ncpu, b in specs
    )
    return TopData((NodeData(header, rows, ()),))


SPECS = (
    ("ml-training", "train-0", "", 6, 0.5),
    ("ml-inference", "vllm-a", "", 2, 0.9),
    ("data", "kafka-0", "", 0, None),
    ("data", "postgres-0", "", 2, 0.1),
)


@pytest.mark.parametrize(
    ("options", "pods"),
    [
        (Options(), ["kafka-0", "postgres-0", "vllm-a", "train-0"]),
        (Options(sort="busy"), ["vllm-a", "train-0", "postgres-0", "kafka-0"]),
        (Options(sort="busy", reverse=True), ["postgres-0", "train-0", "vllm-a", "kafka-0"]),
        (Options(sort="cpus"), ["train-0", "postgres-0", "vllm-a", "kafka-0"]),
        (Options(namespace="ml-"), ["vllm-a", "train-0"]),
        (Options(namespace="data", pod="*-0"), ["kafka-0", "postgres-0"]),
        (Options(pod="vllm"), ["vllm-a"]),
        (Options(view="devices", sort="busy"), ["kafka-0", "postgres-0", "vllm-a", "train-0"]),
    ],
)
def test_select_filters_and_sorts(options: Options, pods: list[str]) -> None:
    """Filters match substrings or globs; numeric columns sort largest first, unknowns last."""
    containers, _ = select(_rows(*SPECS), options)
    assert [r.pod for r in containers] == pods


def test_resource_filter_and_device_sorting() -> None:
    """--resource keeps containers holding it and its devices; device columns sort."""
    data = build(reading(*GPUS, *DEVICES))
    containers, devices = select(data, Options(resource="gpu.shared"))
    assert {r.pod for r in containers} == {"vllm-a", "vllm-b"}
    assert {d.resource for d in devices} == {"nvidia.com/gpu.shared"}
    _, by_util = select(data, Options(view="devices", sort="util"))
    assert [d.util for d in by_util][:4] == [0.4, 0.12, 0.12, 0.12]
    _, by_health = select(data, Options(view="devices", sort="health"))
    assert [d.healthy for d in by_health][:2] == [False, False]
    _, held = select(data, Options(view="devices", namespace="inf"))
    assert {d.device_id for d in held} == {f"{GPU_S}::0", f"{GPU_S}::1", "fpga0"}
    assert Options(view="devices", sort="busy").sort_key == "resource"


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [("", "x", True), ("ml", "ml-training", True), ("ml-*", "ml-training", True),
     ("*-0", "kafka-1", False), ("gpu", "nvidia.com/gpu", True), ("GPU", "nvidia.com/gpu", False)],
)  # fmt: skip
def test_matches(pattern: str, value: str, expected: bool) -> None:
    """A filter is a substring, or a glob when it has glob characters."""
    assert matches(pattern, value) is expected
