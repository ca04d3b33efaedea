"""The exporter in a process of its own, on a benchmark scenario's simulated host.

Usage: python bench/exporter_proc.py SCENARIO SOCKET HOSTDIR PORT POLL [FLAG VALUE ...]

Writes the simulated host of SCENARIO (``simproc.scenario``: the same seeded node the
simulated kubelet on SOCKET serves) under HOSTDIR: sysfs with the CPU topology and the
device tree, procfs, the kubelet's log names, and a fake NVML with the node's GPUs, its
counters moving with the clock. Then runs the exporter (``cli.export.Exporter``, as
``podres export`` does) on 127.0.0.1:PORT, polling every POLL, reading all of that, with
NVML's slow fields at ``--source-interval.gpu-slow``. More exporter flags may follow
(``--no-collector.NAME`` is given as ``--collector.NAME off``), and
``--bench.switch-interval SECONDS``, the interpreter's switch interval in place of the
one ``podres export`` sets. Logs JSON at warning level to stderr; runs until SIGTERM.
Its CPU and memory are the exporter's own (and the fake NVML's, standing in for the
driver library a real exporter loads).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import simproc

from podres_exporter import collectors
from podres_exporter.cli.export import Exporter
from podres_exporter.daemon import process
from podres_exporter.exporter.settings import build
from podres_exporter.sources.gpu import NvmlBackend
from podres_sim import SimKubelet
from podres_sim.host import SimHost

FIXED_ARGS = 5
SWITCH_INTERVAL_FLAG = "--bench.switch-interval"


def main(argv: Sequence[str]) -> int:
    if len(argv) < FIXED_ARGS or (len(argv) - FIXED_ARGS) % 2:
        sys.stderr.write(__doc__.splitlines()[2] + "\n")
        return 2
    ref, sock, hostdir, port, poll = argv[:FIXED_ARGS]
    extra = dict(zip(argv[FIXED_ARGS::2], argv[FIXED_ARGS + 1 :: 2], strict=True))
    # Not a flag of the exporter: the interpreter's switch interval in seconds, in place
    # of the one podres export sets (bench/exporter.py's scrapes while polling).
    switch_interval = extra.pop(SWITCH_INTERVAL_FLAG, None)
    flags = {k: v for k, v in extra.items() if not k.startswith("--collector.")}
    switches = {
        k.removeprefix("--collector."): v == "on"
        for k, v in extra.items()
        if k.startswith("--collector.")
    }
    process.configure_logging("warning", "json")
    root = Path(hostdir)
    host = SimHost(SimKubelet(simproc.scenario(ref), root / "unused.sock"), root / "host")
    settings = replace(
        build(
            {"--listen-address": f"127.0.0.1:{port}", "--poll-interval": poll, **flags},
            {},
            collector_names=tuple(c.name for c in collectors.ALL),
            collector_flags=switches,
        ),
        kubelet_socket=sock,
        kubelet_max_message_bytes=64 * 2**20,
        path_sysfs=str(host.sysfs),
        path_procfs=str(host.procfs),
        path_pod_logs=str(host.pod_logs),
        path_container_logs=str(host.container_logs),
        kubelet_config=str(host.kubelet_config),
        kubelet_device_checkpoint=str(host.device_checkpoint),
    )
    backend = NvmlBackend(host.nvml, slow_interval_s=settings.source_interval_gpu_slow_s)
    with process.stop_on_signals() as stop:
        process.raise_open_files_limit()  # as podres export does
        exporter = Exporter(settings, gpu_backend=backend)
        process.tune_gc()  # as podres export does
        process.tune_switch_interval()
        if switch_interval is not None:
            sys.setswitchinterval(float(switch_interval))
        exporter.start()
        try:
            stop.wait()
        finally:
            exporter.stop("benchmark done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
