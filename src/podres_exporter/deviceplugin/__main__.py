"""``python -m podres_exporter.deviceplugin --resources FILE``: the device plugin alone,
with ``podres plugin``'s flags and parser (an unknown flag gets the usage and the flag it is
closest to, exit 2)."""

import signal

# First, as in podres_exporter.entry: a SIGHUP while it imports never ends the plugin.
signal.signal(signal.SIGHUP, signal.SIG_IGN)

import os  # noqa: E402  (after the step above, on purpose)

from podres_exporter.daemon.options import CommandParser  # noqa: E402
from podres_exporter.deviceplugin.main import add_plugin_arguments, run_plugin  # noqa: E402

_parser = add_plugin_arguments(
    CommandParser(
        prog="python -m podres_exporter.deviceplugin",
        description="Kubelet device plugin (API v1beta1) for the resources of --resources.",
    )
)
raise SystemExit(run_plugin(_parser.parse_args(), os.environ))
