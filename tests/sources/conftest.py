"""Fixtures of the source tests: a pod-resources server answering whatever it is set to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.exporter.kubelet_answers import Kubelet, serving


@pytest.fixture(scope="module")
def kubelet() -> Iterator[tuple[Kubelet, str]]:
    """One server answering whatever it is set to, on a short socket path."""
    with serving("pc-") as served:
        yield served
