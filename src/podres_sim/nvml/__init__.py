"""The fake of the ``pynvml`` module, apart from the planner that decides a scenario's
GPUs.

``fake`` is the narrow fake (:class:`FakeNvml`: the pynvml functions the exporter
and the device plugin call) over ``board``'s hardware records; ``animation`` is its
random walk; ``planner`` turns the device ids a kubelet reports into a populated,
animated fake (``nvml_for_devices``).
"""

from podres_sim.nvml.board import (
    FakeEventData,
    FakeGpu,
    FakeMigDevice,
    FakeProcess,
    FakeSample,
)
from podres_sim.nvml.fake import FakeNvml
from podres_sim.nvml.planner import nvml_for_devices

__all__ = [
    "FakeEventData",
    "FakeGpu",
    "FakeMigDevice",
    "FakeNvml",
    "FakeProcess",
    "FakeSample",
    "nvml_for_devices",
]
