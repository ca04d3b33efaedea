"""The exporter's benchmark: cost of one poll, one rendering and one cached scrape.

Usage: python bench/bench.py [--quick]

For each scenario a simulated kubelet (same process, real gRPC over a unix socket)
is read by the real client; the timings are medians over several repetitions.
The figures printed beside each measure are the budgets the design relies on:
a poll and a rendering must fit easily in the default 10 s poll interval, and a
cached scrape must stay cheap whatever the node's size (scrapes never poll).

Then the daemon footprint (bench/footprint.py): the exporter and the device plugin
as processes of their own beside a simulated kubelet process, their steady and
burst CPU and their memory, from which the manifests' requests and limits are
derived (docs/performance.md).
"""

from __future__ import annotations

import argparse
import gzip
import resource
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import footprint

from podres_exporter.accounting import account
from podres_exporter.cli.export import Exporter
from podres_exporter.exposition import render_families
from podres_exporter.reader import NodeReader
from podres_exporter.settings import build
from podres_exporter.sim import Scenario, SimKubelet, load_builtin, write_sysfs


def median_s(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(name: str, scenario: Scenario, repeat: int, scrapes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="podres-bench-") as tmp:
        sysfs = write_sysfs(scenario.node, Path(tmp) / "sys")
        sim = SimKubelet(scenario, Path(tmp) / "k.sock")
        # Back-to-back repetitions would trip the demo kubelet's rate limit (100 qps, burst
        # 10), which a poll every 10 s never meets: measure the cost, not the throttling.
        sim.set_behaviour(rate_limit=False)
        sim.start()
        settings = replace(
            build({"--listen-address": "127.0.0.1:0", "--poll-interval": "1h"}, {}),
            kubelet_socket=str(sim.socket_path),
            path_sysfs=str(sysfs),
        )
        try:
            # The exporter's own reader, kubelet and topology only (the telemetry sources
            # are measured by the footprint run).
            reader = NodeReader.from_settings(settings, telemetry=False)
            seen = reader.observe()
            assert seen.reading is not None and seen.topology is not None, seen.kubelet_error
            reading, topo = seen.reading, seen.topology
            poll = median_s(reader.observe, repeat)
            acc = median_s(lambda: account(reading, topo), repeat)
            view = reader.view(seen, generation=1)
            render = median_s(
                lambda: render_families(reader.families(view, "bench"), openmetrics=False), repeat
            )
            body = render_families(reader.families(view, "bench"), openmetrics=False)
            reader.close()
            exp = Exporter(settings)
            exp.start()
            try:
                deadline = time.monotonic() + 60
                while exp.store.current() is None and time.monotonic() < deadline:
                    time.sleep(0.05)

                def scrape() -> None:
                    with urllib.request.urlopen(exp.url + "/metrics", timeout=30) as r:  # noqa: S310
                        r.read()

                scrape()  # the first scrape renders; the rest are served from the cache
                cached = median_s(scrape, scrapes)
            finally:
                exp.stop("benchmark done")
        finally:
            sim.stop(remove_socket=True)
    return {
        "pods": len(reading.pods),
        "poll_s": poll,
        "account_s": acc,
        "render_s": render,
        "scrape_cached_s": cached,
        "exposition_bytes": len(body),
        "exposition_gzip_bytes": len(gzip.compress(body)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer repetitions, smaller nodes, a short footprint run",
    )
    ns = parser.parse_args()
    repeat, scrapes = (3, 20) if ns.quick else (7, 200)
    scenarios = [
        ("demo", load_builtin("demo")),
        ("2k pods, 128 CPUs", Scenario.synthetic(pods=2000, exclusive_every=20)),
    ]
    if not ns.quick:
        scenarios.append(("20k pods (>4 MiB List)", Scenario.synthetic(pods=20000)))
    print(f"python {sys.version.split()[0]}; medians of {repeat} runs, {scrapes} scrapes")
    footprint.print_head(
        f"{'scenario':<24} {'pods':>6} {'poll':>9} {'account':>9} {'render':>9} "
        f"{'scrape':>9} {'body':>9} {'gzip':>8}"
    )
    for name, sc in scenarios:
        r = run(name, sc, repeat, scrapes)
        print(
            f"{name:<24} {int(r['pods']):>6} {r['poll_s'] * 1e3:>7.1f}ms "
            f"{r['account_s'] * 1e3:>7.1f}ms "
            f"{r['render_s'] * 1e3:>7.1f}ms {r['scrape_cached_s'] * 1e3:>7.2f}ms "
            f"{r['exposition_bytes'] / 1024:>7.0f}KB {r['exposition_gzip_bytes'] / 1024:>6.0f}KB"
        )
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process (simulator included): {rss_mib:.0f} MiB")
    print(
        "budgets: poll + account + render well under the 10 s default --poll-interval; "
        "a cached scrape in milliseconds whatever the node's size"
    )
    return footprint.run_all(ns.quick)


if __name__ == "__main__":
    raise SystemExit(main())
