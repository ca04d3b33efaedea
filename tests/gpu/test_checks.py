"""The GPU tier's checks, proven on the fake NVML in the normal test suite: they pass on
what the exporter serves from a sound board and from one without some fields, and they
catch a unit error, a counter going down, an unsupported field served as 0, and a
device the pod does not hold."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.cli.export import Exporter
from podres_exporter.core.telemetry import GpuReading
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.exporter.report import to_dict
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim import SimKubelet, resolve_scenario
from podres_sim.nvml import FakeNvml
from podres_sim.nvml.board import MODELS
from tests.gpu.checks import (
    FIELDS,
    attributed_processes,
    check_allocation,
    check_counters,
    check_exposition,
    check_identity,
    check_reading,
    check_snapshot,
    runtime_nodes,
    unattributed_processes,
)
from tests.gpu.node import CONTAINER, POD, scenario_toml
from tests.sources.gpu.support import METRIC_FIELDS
from tests.support import Samples, exporter_settings, scrape, select, wait_until

H100 = "GPU-6a0e2f55-1c8e-4f0b-9d21-0a1b2c3d4e50"
RTX = "GPU-6a0e2f55-1c8e-4f0b-9d21-0a1b2c3d4e51"
CONSUMER = "NVIDIA GeForce RTX 3090"


def _reading(fake: FakeNvml, uuid: str) -> GpuReading:
    return next(g for g in NvmlBackend(fake).read().gpus if g.uuid == uuid)


def test_every_field_of_a_reading_is_checked() -> None:
    """The tier's table covers every metric field of a GPU reading, in its order."""
    assert tuple(f.attr for f in FIELDS) == METRIC_FIELDS


def test_a_sound_board_reads_every_field_without_a_problem() -> None:
    """Every exported field of a fake H100 is read, in its unit, in range."""
    fake = FakeNvml()
    fake.add_gpu(H100, memory_used=10 << 30, utilization_gpu=55, power_usage_mw=312_000)
    results = check_reading(_reading(fake, H100))
    assert [r.attr for r in results] == [f.attr for f in FIELDS]
    assert {r.status for r in results} == {"read"}
    assert [r.problem for r in results if r.problem] == []


def test_a_board_without_some_fields_reports_them_unsupported() -> None:
    """A consumer board's ECC and row remapping are unsupported: listed so, no problem."""
    fake = FakeNvml()
    fake.add_gpu(RTX, name=CONSUMER)
    results = {r.attr: r for r in check_reading(_reading(fake, RTX))}
    unsupported = {a for a, r in results.items() if r.status == "unsupported"}
    assert unsupported == {f for f in METRIC_FIELDS if f.startswith(("ecc_", "remapped_"))}
    assert not [r for r in results.values() if r.problem]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"sm_clock_hz": 1980.0}, "outside"),  # MHz served as Hz
        ({"utilization_gpu_ratio": 55.0}, "outside"),  # percent served as a ratio
        ({"power_watts": 312_000.0}, "outside"),  # mW served as W
        ({"power_watts": 900.0}, "above the power limit"),
        ({"memory_used_bytes": 100 << 30}, "> total"),
        ({"temperature_celsius": 305.0}, "outside"),  # kelvin
        ({"memory_total_bytes": 80.0}, "not an integer"),
        ({"remapped_rows_pending": 0}, "not a flag"),
        ({"clock_event_reasons": ("gpu_idle", "made_up")}, "unknown reasons"),
    ],
)
def test_a_unit_or_range_error_is_caught(change: dict[str, Any], needle: str) -> None:
    """Each kind of scale or type error the checks exist for is reported."""
    fake = FakeNvml()
    fake.add_gpu(H100)
    bad = dataclasses.replace(_reading(fake, H100), **change)
    problems = [r.problem for r in check_reading(bad) if r.problem]
    assert len(problems) == 1 and needle in (problems[0] or ""), problems


def test_a_counter_going_down_is_caught() -> None:
    """Energy, ECC and XID counts must not go down between two reads."""
    fake = FakeNvml()
    fake.add_gpu(H100, energy_mj=5_000_000, ecc_corrected=3)
    first = _reading(fake, H100)
    fake.step(1.0)
    assert check_counters(first, _reading(fake, H100)) == []
    later = dataclasses.replace(first, energy_joules_total=1.0, xid_errors_total={})
    first = dataclasses.replace(first, xid_errors_total={79: 1})
    problems = check_counters(first, later)
    assert len(problems) == 2 and "energy_joules_total" in problems[0] and "XID 79" in problems[1]


@pytest.fixture
def node(make_sim: Callable[..., SimKubelet], tmp_path: Path) -> SimKubelet:
    """The tier's simulated node over the fake NVML: the pod holds a sound H100 and a
    consumer board without ECC or row remapping."""
    path = tmp_path / "node.toml"
    path.write_text(scenario_toml([H100, RTX]))
    sim = make_sim(resolve_scenario(str(path)))
    nvml: FakeNvml = sim.host.nvml  # type: ignore[attr-defined]
    for function in MODELS[CONSUMER].unsupported:
        nvml.set_unsupported(function, RTX)
    return sim


def _served(exporter: Exporter) -> Samples:
    return wait_until(
        lambda: (s := scrape(exporter.url)) and len(select(s, "podres_gpu_info")) == 2 and s,
        timeout=20,
    )


def test_the_exporter_serves_what_was_read_and_nothing_for_the_unsupported(
    node: SimKubelet, make_exporter: Callable[..., Exporter]
) -> None:
    """The checks pass on the exporter's own series: the pod is named, each device at
    its index, every field read is served, and an unsupported one has no series."""
    samples = _served(make_exporter(node))
    reading = {g.uuid: g for g in node.host.gpu_backend().read().gpus}  # type: ignore[attr-defined]
    for index, uuid in enumerate((H100, RTX)):
        assert check_identity(samples, uuid, index, POD) == []
        assert check_exposition(reading[uuid], samples) == []
    assert not select(samples, "podres_gpu_ecc_errors_total", uuid=RTX)


def test_an_unsupported_field_served_as_zero_is_caught(
    node: SimKubelet, make_exporter: Callable[..., Exporter]
) -> None:
    """A 0 served for a field the board does not support is a problem; so is a device
    named at the wrong index or not held by the pod."""
    samples = dict(_served(make_exporter(node)))
    reading = next(g for g in node.host.gpu_backend().read().gpus if g.uuid == RTX)  # type: ignore[attr-defined]
    samples[("podres_gpu_ecc_errors_total", frozenset({("uuid", RTX), ("type", "corrected")}))] = (
        0.0
    )
    assert check_exposition(reading, samples) == [
        "podres_gpu_ecc_errors_total{'type': 'corrected'}: unsupported, yet served"
    ]
    assert check_identity(samples, RTX, 0, None) == [f"{RTX}: gpu label ['1'], expected 0"]
    assert check_identity(samples, RTX, 1, "other/pod") == [
        f"{RTX}: no series names the pod other/pod"
    ]


def test_the_snapshot_check_reads_podres_snapshots_json(node: SimKubelet) -> None:
    """The snapshot check passes on what ``podres snapshot`` prints for the node, and
    names a device missing or held by someone else."""
    settings = exporter_settings(node)
    reader = NodeReader.from_settings(settings, gpu_backend=node.host.gpu_backend())  # type: ignore[attr-defined]
    try:
        seen = reader.observe()
        doc = to_dict(reader.view(seen, generation=1))
    finally:
        reader.close()
    holder = f"{POD}/{CONTAINER}"
    assert check_snapshot(doc, H100, 0, holder) == []
    assert check_snapshot(doc, RTX, 1, holder) == []
    assert check_snapshot(doc, RTX, 1, "x/y/z") == [
        f"{RTX}: holders ['{holder}'], expected [x/y/z]"
    ]
    assert check_snapshot(doc, "GPU-missing", 0, None) == ["GPU-missing is not in the snapshot"]


def test_processes_of_no_holder_count_unattributed(
    node: SimKubelet, make_exporter: Callable[..., Exporter]
) -> None:
    """A process on the GPU outside any pod's cgroup is counted with empty holder labels
    (the simulated pod's own process stays attributed to it)."""
    nvml: FakeNvml = node.host.nvml  # type: ignore[attr-defined]
    nvml.add_process(H100, pid=999_999, used_memory=64 << 20)
    exporter = make_exporter(node)
    samples = wait_until(
        lambda: (s := scrape(exporter.url)) and unattributed_processes(s, H100) >= 1 and s,
        timeout=20,
    )
    assert unattributed_processes(samples, H100) == 1
    assert attributed_processes(samples, H100) == len(nvml.gpu(H100).processes) - 1


def test_allocation_checks_name_the_variable_and_missing_nodes() -> None:
    """An Allocate answer must name the devices in NVIDIA_VISIBLE_DEVICES and return only
    device nodes that exist; the runtime's nodes of a GPU include its own."""
    envs = {"NVIDIA_VISIBLE_DEVICES": H100}
    assert check_allocation(envs, ["/dev/null"], [H100], _exists) == []
    assert check_allocation(envs, ["/dev/nvidia-none"], [RTX], _exists) == [
        f"NVIDIA_VISIBLE_DEVICES={H100!r}, expected {RTX!r}",
        "device node /dev/nvidia-none does not exist here",
    ]
    assert runtime_nodes(3) == ["/dev/nvidiactl", "/dev/nvidia3", "/dev/nvidia-uvm"]


def _exists(path: str) -> bool:
    return Path(path).exists()
