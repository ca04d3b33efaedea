"""The device trees the sysfs tests read, written fresh for each test."""

from __future__ import annotations

from pathlib import Path

import pytest

from podres_sim.host import write_device_tree
from tests.sources.sysfs.support import SPECS, large_specs


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The test tree: NICs with VFs, an HCA, AMD, Intel and NVIDIA GPUs, virtual NICs."""
    return write_device_tree(tmp_path / "sys", SPECS)


@pytest.fixture
def large(tmp_path: Path) -> Path:
    """The test tree plus NICs with many SR-IOV VFs and a second HCA."""
    return write_device_tree(tmp_path / "sys", large_specs())
