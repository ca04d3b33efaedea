"""The simulated kubelet in a process of its own, serving one benchmark scenario.

Usage: python bench/simproc.py SCENARIO SOCKET

SCENARIO: ``small``, ``large`` or ``huge`` (``sim.synthetic.bench_scenario``),
``fleet:PODS`` (``fleet_scenario``: the linearity rows), or anything ``--scenario``
of ``python -m podres_exporter.sim`` takes. The benchmark runs it apart so that the
exporter's CPU, read from ``/proc/<pid>/stat``, holds none of the simulator's work.
Serves until SIGTERM or SIGINT, then removes the socket.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from podres_exporter import process
from podres_exporter.sim import Scenario, SimKubelet, resolve_scenario
from podres_exporter.sim.synthetic import BENCH_SCENARIOS, bench_scenario, fleet_scenario

FLEET = "fleet:"


def scenario(ref: str) -> Scenario:
    """The scenario ``ref`` names; the same object in every process (seeded)."""
    if ref in BENCH_SCENARIOS:
        return bench_scenario(ref)
    if ref.startswith(FLEET):
        return fleet_scenario(int(ref.removeprefix(FLEET)))
    return resolve_scenario(ref)


def main(argv: Sequence[str]) -> int:
    """Serve ``argv[0]``'s scenario on the socket ``argv[1]`` until a signal."""
    if len(argv) != 2:  # noqa: PLR2004 - SCENARIO SOCKET
        sys.stderr.write(__doc__.splitlines()[2] + "\n")
        return 2
    ref, socket_path = argv
    with process.stop_on_signals() as stop:
        sim = SimKubelet(scenario(ref), socket_path)
        sim.start()
        try:
            stop.wait()
        finally:
            sim.stop(remove_socket=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
