"""The GPU tier's gate and record.

Tests marked ``gpu`` run only where a real NVIDIA driver answers (``nvmlInit`` succeeds
and NVML lists a GPU); elsewhere each is skipped with the one message of
:func:`tests.gpu.probe.probe`, so the normal test command stays green without a GPU.
What the tier finds (each field read or unsupported, timings, the notes of each check)
goes into :data:`FACTS`; with ``PODRES_GPU_REPORT_DIR`` set, the session writes it there
as ``facts.json`` for the report (``python -m tests.gpu.report``).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podres_exporter.sources.gpu import NvmlBackend, open_nvml_backend
from tests.gpu.probe import Probe, probe

REPORT_DIR_ENV = "PODRES_GPU_REPORT_DIR"
FACTS: dict[str, Any] = {"checks": {}, "timings": {}, "fields": []}


@functools.cache
def driver() -> Probe:
    """The real driver's answer, asked once per session."""
    return probe()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    gated = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gated:
        return
    found = driver()
    if not found.ok:
        skip = pytest.mark.skip(reason=found.message)
        for item in gated:
            item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get(REPORT_DIR_ENV)
    if not out:
        return
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    facts = {"probe": driver().as_dict(), **FACTS}
    (path / "facts.json").write_text(json.dumps(facts, indent=2, default=str) + "\n")


@pytest.fixture
def real() -> Probe:
    """The real driver's devices (the test is skipped where none answers)."""
    found = driver()
    assert found.ok, found.message
    return found


@pytest.fixture
def facts() -> dict[str, Any]:
    """What the tier records for its report."""
    return FACTS


@pytest.fixture
def real_backend() -> Iterator[NvmlBackend]:
    """The exporter's NVML backend on the real driver, closed afterwards."""
    backend = open_nvml_backend()
    yield backend
    backend.close()
