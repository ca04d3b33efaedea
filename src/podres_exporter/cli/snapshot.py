"""``podres snapshot``: one reading with its accounting, printed as JSON.

When no kubelet answers on ``--kubelet-socket`` (missing, not a socket, not ours to use,
a file left by a kubelet that stopped, a listener that never answers), the command
exits 2 with one line naming the socket and the flag, and nothing logged before it: the
log lines of the telemetry sources (NVML, sysfs, procfs), which start beside the kubelet
call, are held until the kubelet has answered, and dropped when it did not.
"""

from __future__ import annotations

import io
import json
import sys

from podres_exporter import collectors
from podres_exporter.core.errors import (
    ConfigError,
    FetchError,
    KubeletError,
    KubeletTimeout,
    KubeletUnavailable,
)
from podres_exporter.daemon import logconf, process
from podres_exporter.exporter.reader import NodeReader
from podres_exporter.exporter.report import to_dict
from podres_exporter.exporter.settings import Settings
from podres_exporter.top.fetch.local import check_socket

_SOCKET_HINT = "pass --kubelet-socket PATH (or PODRES_KUBELET_SOCKET)"


class _HeldLog(io.StringIO):
    """Where log lines wait until the kubelet has answered; rendered as for stderr."""

    def isatty(self) -> bool:
        return sys.stderr.isatty()

    def release(self, settings: Settings) -> None:
        """Write the held lines to stderr and log there from now on."""
        text = self.getvalue()
        if text:
            logconf.say(sys.stderr, text.rstrip("\n"))
        process.configure_logging(settings.log_level, settings.log_format)


def run_snapshot(settings: Settings, *, pod: str | None = None, telemetry: bool = True) -> int:
    """Read the kubelet once and print the result. ConfigError (exit 2, naming the flag)
    when no kubelet answers on the socket (see the module's docstring); 1 when the kubelet
    answered an error. A socket missing or refusing is found before anything is opened."""
    if pod is not None and pod.count("/") != 1:
        raise ConfigError(f"--pod {pod!r}: expected NAMESPACE/NAME")
    held = _HeldLog()
    process.configure_logging(settings.log_level, settings.log_format, stream=held)
    check_listener(settings.kubelet_socket)
    # Every collector's telemetry: NVML on the real driver, sysfs devices, procfs.
    reader = NodeReader.from_settings(
        settings, telemetry=telemetry, enabled=collectors.ALL, identity=False
    )
    try:
        seen = reader.observe()
        if seen.reading is None and isinstance(
            seen.kubelet_error, KubeletUnavailable | KubeletTimeout
        ):
            raise ConfigError(_no_answer(settings, seen.kubelet_error))
        held.release(settings)
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


def check_listener(path: str) -> None:
    """ConfigError naming ``--kubelet-socket`` when ``path`` is no socket we can use or
    nothing listens on it (see :func:`check_socket`)."""
    try:
        check_socket(path, _SOCKET_HINT)
    except FetchError as err:
        raise ConfigError(str(err)) from None


def _no_answer(settings: Settings, err: KubeletError) -> str:
    """The one line for a kubelet that did not answer on the socket."""
    detail = str(err).removeprefix(f"kubelet {err.method} on {settings.kubelet_socket}: ")
    if isinstance(err, KubeletTimeout):
        detail += f" (no answer within --kubelet-timeout {settings.kubelet_timeout_s:g}s)"
    return f"no kubelet answers on {settings.kubelet_socket}: {detail}: {_SOCKET_HINT}"


def _kubelet_failed(err: KubeletError) -> int:
    """Say why the kubelet could not be read, once: 2 when nothing answers on the socket
    (the flag to fix is named), 1 when the kubelet answered an error."""
    if isinstance(err, KubeletUnavailable):
        named = "" if "--kubelet-socket" in str(err) else " (check --kubelet-socket)"
        logconf.say(sys.stderr, f"podres snapshot: error: {err}{named}")
        return 2
    logconf.say(sys.stderr, f"podres snapshot: {err}")
    return 1
