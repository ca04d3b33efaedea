"""The first step of the ``podres`` program, before anything slow is imported.

The console script and ``python -m podres_exporter`` / ``python -m
podres_exporter.deviceplugin`` start here. A daemon command (``export``, ``demo``,
``plugin``) ignores SIGHUP from this step on, so that no SIGHUP ends it while Python
imports its modules (half a second or more) or reads its settings. A SIGHUP received
before the daemon serves is dropped, not kept for later: the daemon reads its files as
it starts. Once it serves, SIGHUP is the reload request
(:func:`podres_exporter.daemon.process.stop_on_signals`).

Only :mod:`signal` and :mod:`sys` are imported here, and nothing is changed on import:
a library user importing the package keeps its own SIGHUP disposition.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

DAEMONS = ("export", "demo", "plugin")
"""The commands that run until stopped: a SIGHUP never ends them."""


def ignore_hangup_for(argv: Sequence[str]) -> bool:
    """Ignore SIGHUP when ``argv`` (without the program name) runs a daemon command;
    whether it did. Called on the main thread, before any other import of ours."""
    if not argv or argv[0] not in DAEMONS:
        return False
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return True


def main() -> int:
    """The ``podres`` console script: SIGHUP settled, then the command line."""
    ignore_hangup_for(sys.argv[1:])
    from podres_exporter.cli import main as cli_main

    return cli_main()
