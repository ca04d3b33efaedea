"""The simulated kubelet in a process of its own, serving one benchmark scenario.

Usage: python bench/simproc.py SCENARIO SOCKET [--counts FILE] [--churn PER_SECOND]

SCENARIO: ``small``, ``large`` or ``huge`` (``sim.synthetic.bench_scenario``),
``fleet:PODS`` (``fleet_scenario``: the linearity rows), ``identity:PODS``
(``identity_scenario``), or anything ``--scenario``
of ``python -m podres_sim`` takes. The benchmark runs it apart so that the
exporter's CPU, read from ``/proc/<pid>/stat``, holds none of the simulator's work.

``--counts FILE``: every 0.25 s, FILE is replaced by a JSON object of the calls served
per method (what the exporter really asked, counted on the kubelet's side), the pods
now listed and the pods replaced so far. ``--churn PER_SECOND``: that many pods a
second are deleted and replaced by a pod of the same shape under a new name.

Serves until SIGTERM or SIGINT, then removes the socket.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from podres_exporter.daemon import process
from podres_sim import Scenario, SimKubelet, resolve_scenario
from podres_sim.scenario.synthetic import (
    BENCH_SCENARIOS,
    bench_scenario,
    fleet_scenario,
    identity_scenario,
)

FLEET = "fleet:"
IDENTITY = "identity:"
COUNTS_EVERY_S = 0.25


def scenario(ref: str) -> Scenario:
    """The scenario ``ref`` names; the same object in every process (seeded)."""
    if ref in BENCH_SCENARIOS:
        return bench_scenario(ref)
    if ref.startswith(FLEET):
        return fleet_scenario(int(ref.removeprefix(FLEET)))
    if ref.startswith(IDENTITY):
        return identity_scenario(int(ref.removeprefix(IDENTITY)))
    return resolve_scenario(ref)


class Churn:
    """Replaces ``per_second`` pods a second: a random pod deleted, one of its shape
    admitted under a new name (the exporter sees a new pod and a departed one)."""

    def __init__(self, sim: SimKubelet, per_second: float) -> None:
        self._sim = sim
        self._every = 1.0 / per_second if per_second > 0 else 0.0
        self._rng = random.Random(7)
        self._due = time.monotonic()
        self.replaced = 0
        self.departed: set[str] = set()

    def run_due(self) -> None:
        if not self._every:
            return
        node = self._sim.node
        while time.monotonic() >= self._due:
            self._due += self._every
            pods = [p for p in node.pods if p.containers]
            if not pods:
                return
            victim = self._rng.choice(pods)
            node.remove(victim.namespace, victim.name)
            self.departed.add(f"{victim.namespace}/{victim.name}")
            self.replaced += 1
            node.admit(victim.spec, name=f"{victim.spec.name}-r{self.replaced}")


def write_counts(path: Path, sim: SimKubelet, churn: Churn) -> None:
    listed = sorted(f"{p.namespace}/{p.name}" for p in sim.node.pods)
    data = {
        "calls": sim.request_count,
        "pods": listed,
        "replaced": churn.replaced,
        "departed": sorted(churn.departed - set(listed)),
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def main(argv: Sequence[str]) -> int:
    """Serve the scenario on the socket until a signal."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("socket")
    parser.add_argument("--counts", type=Path)
    parser.add_argument("--churn", type=float, default=0.0)
    ns = parser.parse_args(argv)
    with process.stop_on_signals() as stop:
        sim = SimKubelet(scenario(ns.scenario), ns.socket)
        sim.start()
        churn = Churn(sim, ns.churn)
        done = threading.Event()

        def tend() -> None:
            while True:
                churn.run_due()
                if ns.counts:
                    write_counts(ns.counts, sim, churn)
                if done.wait(COUNTS_EVERY_S):
                    return

        if ns.counts or ns.churn:
            threading.Thread(target=tend, name="simproc-tend", daemon=True).start()
        try:
            stop.wait()
        finally:
            done.set()
            sim.stop(remove_socket=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
