"""``podres export`` with a fake NVML in its own process, for the fault suite's GPU faults.

    python -m tests.faults.gpu_exporter --scenario FILE.toml --control FILE.json \\
        [--init-retry SECONDS] -- EXPORT FLAGS...

What ``podres demo`` does in one process, this does in the exporter's: the exporter is
built from the same command line as ``podres export`` and given an NVML backend over the
fake NVML of the scenario's GPUs (``scenario_nvml``: the same UUIDs as the test's
simulated host). The backend is the exporter's own, closed after it stops, as the one
``podres export`` opens is. ``--init-retry`` shortens NVML's init retry (60 s in
production) so that a recovery fits in a test.

The test drives the fake through the control file (JSON, written whole and replaced),
read every 50 ms: ``init_error`` (an NVML error code for nvmlInit, null for none),
``broken`` (UUIDs whose every query fails with GPU_IS_LOST) and ``hang`` (every NVML
call blocks, as in a wedged driver).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from podres_exporter.cli import parser, settings_from
from podres_exporter.cli.export import Exporter
from podres_exporter.daemon import process
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim import resolve_scenario
from podres_sim.host import scenario_nvml
from podres_sim.nvml import FakeNvml

_CONTROL_POLL_S = 0.05


def apply(nvml: FakeNvml, control: dict[str, Any]) -> None:
    """Put the fake in the state the control file asks for."""
    nvml.init_error = control.get("init_error")
    broken = set(control.get("broken", ()))
    for gpu in nvml.gpus:
        if gpu.uuid in broken and gpu.error is None:
            nvml.break_gpu(gpu.uuid)
        elif gpu.uuid not in broken and gpu.error is not None:
            nvml.heal_gpu(gpu.uuid)
    if control.get("hang"):
        nvml.hang()
    else:
        nvml.release()


def read_control(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def follow(nvml: FakeNvml, path: Path, stop: threading.Event) -> None:
    """Apply the control file whenever it changes, until ``stop``."""
    last: dict[str, Any] | None = None
    while not stop.wait(_CONTROL_POLL_S):
        control = read_control(path)
        if control is not None and control != last:
            apply(nvml, control)
            last = control


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.faults.gpu_exporter")
    p.add_argument("--scenario", required=True, help="the simulated node's scenario")
    p.add_argument("--control", required=True, type=Path, help="the control file (JSON)")
    p.add_argument("--init-retry", type=float, default=0.2, help="NVML init retry, seconds")
    p.add_argument("export", nargs=argparse.REMAINDER, help="-- then podres export's flags")
    ns = p.parse_args(argv)
    flags = [f for f in ns.export if f != "--"]
    settings = settings_from(parser().parse_args(["export", *flags]), os.environ)
    process.configure_logging(settings.log_level, settings.log_format)
    nvml = scenario_nvml(resolve_scenario(ns.scenario))
    apply(nvml, read_control(ns.control) or {})
    stop_following = threading.Event()
    follower = threading.Thread(
        target=follow, args=(nvml, ns.control, stop_following), name="fake-nvml-control"
    )
    follower.start()
    backend = NvmlBackend(nvml, init_retry_s=ns.init_retry)
    exporter = Exporter(settings, gpu_backend=backend)
    with process.stop_on_signals() as stop:
        exporter.start()
        reason = stop.wait()
    exporter.stop(reason)
    backend.close()
    stop_following.set()
    follower.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
