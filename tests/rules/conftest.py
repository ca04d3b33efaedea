"""Fixtures of the rule tests: the promtool that runs their unit tests."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not found: install the Debian package prometheus (make test does)")
    return found
