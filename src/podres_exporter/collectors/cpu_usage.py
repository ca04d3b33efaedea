"""CPU use of the exclusive CPUs and the shared pool.

``podres_cpu_busy_seconds_total``, ``podres_cpu_busy_ratio`` and
``podres_shared_pool_busy_ratio``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.metrics_core import Metric

from podres_exporter.collectors.base import PartCollector, joined
from podres_exporter.collectors.families import HOLDER_LABELS, family, holder_values, labelled
from podres_exporter.core.join import Joined


def _families(j: Joined) -> Iterator[Metric]:
    yield family(
        "podres_cpu_busy_seconds",
        "Busy time (all but idle and iowait) of each exclusively held CPU, with its holder.",
        ["cpu", "numa_node", *HOLDER_LABELS],
        j.cpu_busy,
        lambda c: [str(c.cpu), c.numa, *holder_values(c.holder)],
        lambda c: c.busy_seconds,
        counter=True,
    )
    yield family(
        "podres_cpu_busy_ratio",
        "Busy share (0-1) of each exclusively held CPU between the last two reads of the "
        "CPU times, with its holder.",
        ["cpu", "numa_node", *HOLDER_LABELS],
        j.cpu_busy,
        lambda c: [str(c.cpu), c.numa, *holder_values(c.holder)],
        lambda c: c.ratio,
    )
    yield labelled(
        "podres_shared_pool_busy_ratio",
        "Busy share of the shared-pool CPUs of a NUMA node between the last two polls (0-1): "
        "contention of every container without exclusive CPUs.",
        ["numa_node"],
        [((numa,), ratio) for numa, ratio in sorted(j.shared_pool_busy_ratio.items())],
    )


COLLECTOR: Final = PartCollector(
    "cpu_usage",
    "busy time of each exclusive CPU and the shared pool's busy ratio per NUMA node",
    joined,
    _families,
    needs=frozenset({"cpu"}),
)
