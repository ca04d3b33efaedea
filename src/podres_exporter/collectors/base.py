"""The collector protocol: a collector turns a NodeView into metric families.

It translates; it never fetches. All I/O happened before the NodeView existed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from podres_exporter.model import Holder
from podres_exporter.view import NodeView

HOLDER_LABELS = ("namespace", "pod", "container")
_NO_HOLDER = ("", "", "")
_R = TypeVar("_R")


def holder_values(h: Holder | None) -> list[str]:
    """The ``namespace``, ``pod``, ``container`` label values of a holder (empty for none)."""
    return list(h) if h is not None else list(_NO_HOLDER)


def family(  # noqa: PLR0917 - a declarative table reads best positionally
    name: str,
    documentation: str,
    labels: Sequence[str],
    rows: Iterable[_R],
    label_values: Callable[[_R], Sequence[str]],
    value: Callable[[_R], float | int | bool | None],
    *,
    counter: bool = False,
) -> Metric:
    """One gauge (or counter) family: a sample per row whose value is not None."""
    fam: GaugeMetricFamily | CounterMetricFamily = (
        CounterMetricFamily(name, documentation, labels=list(labels))
        if counter
        else GaugeMetricFamily(name, documentation, labels=list(labels))
    )
    for row in rows:
        v = value(row)
        if v is not None:
            fam.add_metric(list(label_values(row)), float(v))
    return fam


@dataclass(frozen=True, slots=True)
class RenderContext:
    """What a collector may read: the published view and static facts of the process."""

    view: NodeView
    version: str


class Collector(Protocol):
    """One group of metric families; ``name`` gives the ``--collector.NAME`` flag."""

    name: str
    default_enabled: bool
    description: str

    def collect(self, ctx: RenderContext) -> Iterable[Metric]:
        """The families for ``ctx``; may raise, the registry guards each call."""
        ...
