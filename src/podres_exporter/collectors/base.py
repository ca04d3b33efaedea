"""The collector protocol: a collector turns a NodeView into metric families.

It translates; it never fetches. All I/O happened before the NodeView existed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.metrics_core import Metric

from podres_exporter.view import NodeView


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
