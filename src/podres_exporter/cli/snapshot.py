"""``podres snapshot``: one reading with its accounting, printed as JSON."""

from __future__ import annotations

import json
import sys

from podres_exporter import collectors
from podres_exporter.core.errors import ConfigError, FetchError, KubeletError, KubeletUnavailable
from podres_exporter.daemon import logconf, process
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.exporter.report import to_dict
from podres_exporter.exporter.settings import Settings
from podres_exporter.top.fetch.local import check_socket

_SOCKET_HINT = "pass --kubelet-socket PATH (or PODRES_KUBELET_SOCKET)"


def run_snapshot(settings: Settings, *, pod: str | None = None, telemetry: bool = True) -> int:
    """Read the kubelet once and print the result. ConfigError (exit 2, naming the flag)
    when the socket is missing, not a socket, not ours to use or refused; 1 when the
    kubelet answered an error. A missing socket is found before anything is opened or
    logged: its message is the only line."""
    process.configure_logging(settings.log_level, settings.log_format)  # logs nothing itself
    if pod is not None and pod.count("/") != 1:
        raise ConfigError(f"--pod {pod!r}: expected NAMESPACE/NAME")
    try:
        check_socket(settings.kubelet_socket, _SOCKET_HINT)
    except FetchError as err:
        raise ConfigError(str(err)) from None
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
        return _kubelet_failed(err)
    finally:
        reader.close()
    if seen.reading is None:
        assert seen.kubelet_error is not None
        return _kubelet_failed(seen.kubelet_error)
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


def _kubelet_failed(err: KubeletError) -> int:
    """Say why the kubelet could not be read, once: 2 when nothing answers on the socket
    (the flag to fix is named), 1 when the kubelet answered an error."""
    if isinstance(err, KubeletUnavailable):
        named = "" if "--kubelet-socket" in str(err) else " (check --kubelet-socket)"
        logconf.say(sys.stderr, f"podres snapshot: error: {err}{named}")
        return 2
    logconf.say(sys.stderr, f"podres snapshot: {err}")
    return 1
