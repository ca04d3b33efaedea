"""The GPU tier's report writer, its ``nvidia-smi -q`` parser, and the rule that the tier
never changes a GPU setting."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.gpu.checks import check_nvidia_smi, check_reading
from tests.gpu.probe import SKIP_PREFIX, Device, Probe, parse_nvidia_smi_q
from tests.gpu.report import main, outcomes_from_junit, write_report
from tests.gpu.test_checks import H100, RTX

_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.gpu.test_real_nvml" name="test_fields" time="1.0"/>
<testcase classname="tests.gpu.test_real_plugin" name="test_plugin" time="2.0">
<failure message="AssertionError: GPU-x unhealthy">trace</failure></testcase>
<testcase classname="tests.gpu.test_real_exporter" name="test_process" time="0.1">
<skipped type="pytest.skip" message="no CUDA client can run here">skip</skipped></testcase>
</testsuite></testsuites>
"""

_SMI = """
==============NVSMI LOG==============

Timestamp                                 : Sat Nov 28 03:00:00 2026
Driver Version                            : 550.54.15
CUDA Version                              : 12.4

Attached GPUs                             : 2
GPU 00000000:17:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Product Brand                         : NVIDIA
    MIG Mode
        Current                           : Disabled
        Pending                           : Disabled
    GPU UUID                              : GPU-6a0e2f55-1c8e-4f0b-9d21-0a1b2c3d4e50
    Minor Number                          : 0
    Clocks Event Reasons
        Idle                              : Active
GPU 00000000:9A:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    MIG Mode
        Current                           : Enabled
        Pending                           : Enabled
    GPU UUID                              : GPU-6a0e2f55-1c8e-4f0b-9d21-0a1b2c3d4e51
    Minor Number                          : 3
"""


def _probe() -> Probe:
    return Probe(
        True,
        "gpu tier: 1 GPU(s)",
        driver_version="550.54.15",
        cuda_version="12.4",
        devices=(Device(H100, 0, "NVIDIA H100 80GB HBM3", minor=0, mig_enabled=False),),
    )


def test_junit_outcomes_are_read_with_their_messages(tmp_path: Path) -> None:
    """Passed, failed and skipped cases come out with the reason pytest gave."""
    (tmp_path / "junit.xml").write_text(_JUNIT)
    outcomes = outcomes_from_junit(tmp_path / "junit.xml")
    assert [(o["outcome"], o["message"]) for o in outcomes] == [
        ("passed", ""),
        ("failed", "AssertionError: GPU-x unhealthy"),
        ("skipped", "no CUDA client can run here"),
    ]


def test_the_report_lists_the_driver_each_field_and_the_timings(tmp_path: Path) -> None:
    """report.json and report.md carry the driver, CUDA, the board, each field read or
    unsupported with its value and unit, the timings and each test's outcome."""
    from podres_exporter.sources.gpu import NvmlBackend
    from podres_sim.nvml import FakeNvml

    fake = FakeNvml()
    fake.add_gpu(RTX, name="NVIDIA GeForce RTX 3090")
    (gpu,) = NvmlBackend(fake).read().gpus
    facts = {
        "probe": _probe().as_dict(),
        "fields": [r.as_dict() for r in check_reading(gpu)],
        "timings": {"real driver, 1 GPU(s), every field": {"reads": 20, "median_ms": 41.2}},
        "checks": {"plugin": ["nvidia.com/gpu: 1 advertised healthy"]},
    }
    (tmp_path / "junit.xml").write_text(_JUNIT)
    report = write_report(tmp_path, facts, outcomes_from_junit(tmp_path / "junit.xml"))
    assert report["summary"] == "GPU tier FAILED: 1 of 3 tests"
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["driver_version"] == "550.54.15" and saved["cuda_version"] == "12.4"
    statuses = {f["field"]: (f["status"], f["unit"]) for f in saved["fields"]}
    assert statuses["ecc_corrected_total"] == ("unsupported", "errors")
    assert statuses["sm_clock_hz"] == ("read", "hertz")
    text = (tmp_path / "report.md").read_text()
    assert "**GPU tier FAILED: 1 of 3 tests**" in text
    assert "driver 550.54.15, CUDA 12.4" in text
    assert f"| {RTX} | ecc_corrected_total | podres_gpu_ecc_errors_total | unsupported |" in text
    assert (
        f"| {RTX} | sm_clock_hz | podres_gpu_sm_clock_hertz | read | 1995000000.0 | hertz |" in text
    )
    assert "median_ms" in text and "nvidia.com/gpu: 1 advertised healthy" in text


def test_without_a_gpu_the_report_says_no_gpu_and_why(tmp_path: Path) -> None:
    """With no facts (the tier skipped), the report probes the driver itself and says
    'no GPU' with the skip message."""
    assert main(["--out", str(tmp_path)]) == 0
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["gpu"] is False
    assert saved["summary"].startswith(f"no GPU: {SKIP_PREFIX}")
    assert "no GPU" in (tmp_path / "report.md").read_text()


def test_nvidia_smi_q_gives_each_gpu_in_index_order() -> None:
    """The parser takes the driver, CUDA version and each GPU's bus id, name, UUID,
    minor number and current MIG mode, in the order printed."""
    parsed = parse_nvidia_smi_q(_SMI)
    assert parsed["driver_version"] == "550.54.15" and parsed["cuda_version"] == "12.4"
    assert parsed["gpus"] == [
        {
            "index": 0,
            "bus_id": "00000000:17:00.0",
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": H100,
            "minor": 0,
            "mig_mode": "Disabled",
        },
        {
            "index": 1,
            "bus_id": "00000000:9A:00.0",
            "name": "NVIDIA A100-SXM4-80GB",
            "uuid": RTX,
            "minor": 3,
            "mig_mode": "Enabled",
        },
    ]


# nvidia-smi options that change a GPU (MIG, persistence, clocks, power, ECC, compute
# mode, reset, ...) and NVML's setters: none may appear in the tier or its script.
_SETTINGS = re.compile(
    r"nvidia-smi[^\n]*\s(-mig|-pm|-lgc|-rgc|-lmc|-rmc|-ac|-rac|-pl|-e|-c|-r|--gpu-reset|"
    r"--applications-clocks|--power-limit|--ecc-config|--compute-mode|-am|-acp)\b"
    r"|nvml(Device|GpuInstance)(Set|Reset|Clear|Create|Destroy)\w*"
)


def test_the_tier_never_changes_a_gpu_setting() -> None:
    """No nvidia-smi option that changes a GPU, and no NVML setter, in the tier's code
    or its script: the tier reads; MIG is tested only where it is already on."""
    root = Path(__file__).resolve().parents[2]
    sources = [*sorted((root / "tests" / "gpu").glob("*.py")), root / "tools" / "gpu-tier.sh"]
    assert sources[-1].is_file()
    found = {
        str(path.relative_to(root)): _SETTINGS.findall(path.read_text())
        for path in sources
        if path.name != "test_report.py"
    }
    assert {k: v for k, v in found.items() if v} == {}


def test_the_nvidia_smi_check_compares_uuids_indices_models_and_driver() -> None:
    """What nvidia-smi -q lists must be served at the same index with the same model and
    driver; a difference in any is named."""
    smi = parse_nvidia_smi_q(_SMI)

    def info(uuid: str, index: str, model: str) -> tuple[str, frozenset[tuple[str, str]]]:
        labels = {"driver_version": "550.54.15", "parent_uuid": "", "uuid": uuid}
        return ("podres_gpu_info", frozenset({**labels, "gpu": index, "model": model}.items()))

    samples = {
        info(H100, "0", "NVIDIA H100 80GB HBM3"): 1.0,
        info(RTX, "1", "NVIDIA A100-SXM4-80GB"): 1.0,
    }
    assert check_nvidia_smi(smi, samples) == []
    smi["gpus"][0]["index"], smi["gpus"][1]["name"] = 1, "NVIDIA A100-SXM4-40GB"
    smi["driver_version"] = "555.42.02"
    problems = check_nvidia_smi(smi, samples)
    assert f"{H100}: gpu 0, nvidia-smi 1" in problems
    assert f"{RTX}: model 'NVIDIA A100-SXM4-80GB', nvidia-smi 'NVIDIA A100-SXM4-40GB'" in problems
    assert f"{RTX}: driver 550.54.15, nvidia-smi 555.42.02" in problems
    del smi["gpus"][1]
    assert f"served, not listed by nvidia-smi: ['{RTX}']" in check_nvidia_smi(smi, samples)
