"""Fixtures of the source tests: a pod-resources server answering whatever it is set to."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from tests.exporter.kubelet_answers import Kubelet


@pytest.fixture(scope="module")
def kubelet() -> Iterator[tuple[Kubelet, str]]:
    """One server answering whatever it is set to, on a short socket path."""
    directory = tempfile.mkdtemp(prefix="pc-", dir="/tmp")
    socket = f"{directory}/kubelet.sock"
    server_side = Kubelet()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2),
        handlers=[server_side],
        options=[("grpc.max_send_message_length", 64 * 2**20)],
    )
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    yield server_side, socket
    server.stop(None).wait()
    shutil.rmtree(directory, ignore_errors=True)
