"""The collector protocol: a collector turns a NodeView into metric families.

It translates; it never fetches. All I/O happened before the NodeView existed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from prometheus_client.metrics_core import Metric

from podres_exporter.core.accounting import Accounting
from podres_exporter.core.join import Joined
from podres_exporter.core.view import NodeView

_P = TypeVar("_P")


@dataclass(frozen=True, slots=True)
class RenderContext:
    """What a collector may read: the published view and static facts of the process:
    its version (and the build's ``revision`` and ``python_version``) and the node's name."""

    view: NodeView
    version: str
    node: str = ""
    revision: str = "unknown"
    python_version: str = ""


class Collector(Protocol):
    """One group of metric families; ``name`` gives the ``--collector.NAME`` flag."""

    name: str
    default_enabled: bool
    description: str
    # The telemetry sources it reads ("gpu", "sysfs", "cpu"): the reader runs only those
    # that some enabled collector needs.
    needs: frozenset[str]

    def collect(self, ctx: RenderContext) -> Iterable[Metric]:
        """The families for ``ctx``; may raise, the registry guards each call."""
        ...

    def inputs(self, ctx: RenderContext) -> object:
        """What :meth:`collect` reads of ``ctx``: while it is the very same object,
        the families it gave last time are given again, not built anew."""
        ...


@dataclass(slots=True)
class PartCollector(Generic[_P]):
    """A collector of one part of what it may read: no families while that part is missing.

    ``part`` picks the part from the context (:func:`accounting`, :func:`joined`: None
    before the first reading), ``render`` turns it into families.
    """

    name: str
    description: str
    part: Callable[[RenderContext], _P | None]
    render: Callable[[_P], Iterable[Metric]]
    default_enabled: bool = True
    needs: frozenset[str] = frozenset()

    def collect(self, ctx: RenderContext) -> Iterable[Metric]:
        part = self.part(ctx)
        return () if part is None else self.render(part)

    def inputs(self, ctx: RenderContext) -> object:
        return self.part(ctx)


def view(ctx: RenderContext) -> NodeView:
    """The whole view, for a collector that reads several parts of it."""
    return ctx.view


def accounting(ctx: RenderContext) -> Accounting | None:
    """The view's allocation accounting; None before the first kubelet reading."""
    return ctx.view.accounting


def joined(ctx: RenderContext) -> Joined | None:
    """The view's telemetry matched to holders; None before the first telemetry read."""
    return ctx.view.joined


def joined_rows(name: str) -> Callable[[RenderContext], Any]:
    """One kind of rows of the join (``"net"``, ``"pci"`` ...): a collector of them alone
    reuses its families while the join hands on the same rows (devices not read again)."""

    def part(ctx: RenderContext) -> Any:
        j = ctx.view.joined
        return None if j is None else getattr(j, name)

    return part
