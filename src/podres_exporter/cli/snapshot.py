"""``podres snapshot``: one reading with its accounting, printed as JSON."""

from __future__ import annotations

import json
import sys

from podres_exporter import collectors
from podres_exporter.core.errors import ConfigError, KubeletError, KubeletUnavailable
from podres_exporter.daemon import logconf, process
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.exporter.report import to_dict
from podres_exporter.exporter.settings import Settings


def run_snapshot(settings: Settings, *, pod: str | None = None, telemetry: bool = True) -> int:
    """Read the kubelet once and print the result; 1 when the kubelet cannot be read."""
    process.configure_logging(settings.log_level, settings.log_format)
    if pod is not None and pod.count("/") != 1:
        raise ConfigError(f"--pod {pod!r}: expected NAMESPACE/NAME")
    # Every collector's telemetry: NVML on the real driver, sysfs devices, procfs.
    reader = NodeReader.from_settings(settings, telemetry=telemetry, enabled=collectors.ALL)
    try:
        seen = reader.observe()
        found = None
        if seen.reading is not None and pod is not None:
            namespace, name = pod.split("/")
            found = reader.kubelet.get_pod(namespace, name)
            if found is None:
                logconf.say(sys.stderr, f"podres snapshot: pod {pod} is not on this node (--pod)")
                return 1
    except KubeletError as err:  # Get failed after List answered
        logconf.say(sys.stderr, f"podres snapshot: {_kubelet_problem(err)}")
        return 1
    finally:
        reader.close()
    if seen.reading is None:
        assert seen.kubelet_error is not None
        logconf.say(sys.stderr, f"podres snapshot: {_kubelet_problem(seen.kubelet_error)}")
        return 1
    if seen.topology is None:  # accounted without NUMA nodes or online CPUs
        logconf.say(
            sys.stderr, f"podres snapshot: warning: {seen.topology_error} (set --path.sysfs)"
        )
    view = reader.view(seen, generation=1)
    try:
        json.dump(to_dict(view, only=found), sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
    except OSError as err:  # `| head -c 100` left, or a full disk: said once, no traceback
        return logconf.output_failed(sys.stdout, sys.stderr, "podres snapshot", err)
    return 0


def _kubelet_problem(err: KubeletError) -> str:
    if isinstance(err, KubeletUnavailable):
        return f"{err} (check --kubelet-socket and that you run as root)"
    return str(err)
