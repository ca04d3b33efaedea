"""``podres snapshot``: one reading with its accounting, printed as JSON."""

from __future__ import annotations

import json
import sys

from podres_exporter import collectors, logconf
from podres_exporter.cli.export import default_gpu_backend, kubelet_client, telemetry_runner
from podres_exporter.errors import ConfigError, KubeletError, KubeletUnavailable, SourceError
from podres_exporter.model import NodeTopology, Snapshot
from podres_exporter.report import to_dict
from podres_exporter.settings import Settings
from podres_exporter.sources.cputopology import read_topology
from podres_exporter.telemetry import Telemetry
from podres_exporter.view import NodeView


def read_telemetry(settings: Settings) -> Telemetry:
    """Every telemetry source once (NVML on the real driver, sysfs, procfs)."""
    backend = default_gpu_backend()
    runner = telemetry_runner(settings, collectors.ALL, backend)
    assert runner is not None  # every collector is on: every source runs
    try:
        runner.start()
        return runner.collect()
    finally:
        runner.close()
        backend.close()


def run_snapshot(settings: Settings, *, pod: str | None = None, telemetry: bool = True) -> int:
    """Read the kubelet once and print the result; 1 when the kubelet cannot be read."""
    logconf.configure(settings.log_level, json=settings.log_format == "json")
    if pod is not None and pod.count("/") != 1:
        raise ConfigError(f"--pod {pod!r}: expected NAMESPACE/NAME")
    try:
        topology = read_topology(settings.path_sysfs)
    except SourceError as err:
        print(f"podres snapshot: warning: {err} (set --path.sysfs)", file=sys.stderr)
        topology = NodeTopology(online_cpus=frozenset())
    client = kubelet_client(settings)
    try:
        reading = client.read()
        found = None
        if pod is not None:
            namespace, name = pod.split("/")
            found = client.get_pod(namespace, name)
            if found is None:
                print(f"podres snapshot: pod {pod} is not on this node (--pod)", file=sys.stderr)
                return 1
    except KubeletUnavailable as err:
        print(
            f"podres snapshot: {err} (check --kubelet-socket and that you run as root)",
            file=sys.stderr,
        )
        return 1
    except KubeletError as err:
        print(f"podres snapshot: {err}", file=sys.stderr)
        return 1
    finally:
        client.close()
    snap = Snapshot(
        generation=1,
        taken_at=reading.taken_at,
        topology=topology,
        reading=reading,
        kubelet_up=True,
        stats=client.stats(),
        telemetry=read_telemetry(settings) if telemetry else None,
    )
    view = NodeView.of(snap, gpu_resources=settings.gpu_resources)
    json.dump(to_dict(view, only=found), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
