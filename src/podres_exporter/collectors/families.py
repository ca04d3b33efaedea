"""Building metric families: holder labels, one-call families and declarative tables.

A :class:`Table` describes the families a collector renders from one kind of row:
the labels every family shares, how a row gives their values, and per family its
name, help and value (:func:`per_row`), its extra labels and samples
(:class:`Breakdown`), or its own identity labels (:class:`Info`). Rendering a table
yields its families in table order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from podres_exporter.core.identity import LABELS as IDENTITY_LABELS
from podres_exporter.core.model import Holder

HOLDER_LABELS = ("namespace", "pod", "container")
_NO_HOLDER = ("", "", "")
_R = TypeVar("_R")

# A sample's value; None means no sample.
Value = float | int | bool | None


def holder_values(h: Holder | None) -> list[str]:
    """The ``namespace``, ``pod``, ``container`` label values of a holder (empty for none)."""
    return list(h) if h is not None else list(_NO_HOLDER)


def numa_value(node: int | None) -> str:
    """The ``numa_node`` label value of a device: its node, or ``none`` without affinity."""
    return "none" if node is None else str(node)


# Labels that most series of a family leave empty (a GPU's identity on a family of every
# device id, a PCI address on a GPU's): left out of a series where empty, which Prometheus
# reads the same (an empty label is no label) and which keeps a large node's body small.
SPARSE_LABELS = frozenset(IDENTITY_LABELS)

# A Sample's fields after name, labels and value (timestamp, exemplar ...), at their defaults.
_SAMPLE_TAIL = tuple(Sample._field_defaults.values())

# The sample name of each family type: its family name with this suffix.
_SUFFIX = {"gauge": "", "counter": "_total", "info": "_info"}


class RowFamily(Metric):
    """A gauge, counter or info family kept as rows: (label values, value) in order.

    The exposition writer writes the rows straight to text (see
    ``textformat.write``); the prometheus_client ``samples`` are built only when
    something reads them (a test, ``podres top``'s parser, the registry's own
    generators), so a family that is only served never builds a ``Sample``.
    """

    def __init__(self, name: str, documentation: str, typ: str, labels: Sequence[str]) -> None:
        if typ == "counter" and name.endswith("_total"):  # as CounterMetricFamily names it
            name = name[: -len("_total")]
        super().__init__(name, documentation, typ)
        self.labels: tuple[str, ...] = tuple(labels)
        # The positions of its labels left out of a series where empty.
        self.sparse: tuple[int, ...] = tuple(
            i for i, label in enumerate(self.labels) if label in SPARSE_LABELS
        )
        self.sample_name = name + _SUFFIX[typ]
        self.rows: list[tuple[tuple[str, ...], float]] = []

    @property  # built from the rows each time (Metric.__init__ sets an empty list)
    def samples(self) -> list[Sample]:
        # ``Sample._make`` with the defaults spelt out: half the cost of ``Sample(...)``,
        # which counts (``podres top`` reads 150,000 samples of a large node this way).
        name, labels, make = self.sample_name, self.labels, Sample._make
        if self.sparse:
            sparse = set(self.sparse)
            return [
                make((name, {k: s for i, (k, s) in enumerate(zip(labels, v, strict=True))
                             if s or i not in sparse}, x, *_SAMPLE_TAIL))
                for v, x in self.rows
            ]  # fmt: skip
        return [
            make((name, dict(zip(labels, v, strict=True)), x, *_SAMPLE_TAIL)) for v, x in self.rows
        ]

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        if value:  # Metric.__init__ sets an empty list; anything else would be lost
            raise TypeError("a RowFamily's samples come from its rows")

    def add(self, values: Sequence[str], value: float) -> None:
        """One sample: its label values, in :attr:`labels` order, and its value."""
        self.rows.append((tuple(values), value))


def family(  # noqa: PLR0917 - a declarative table reads best positionally
    name: str,
    documentation: str,
    labels: Sequence[str],
    rows: Iterable[_R],
    label_values: Callable[[_R], Sequence[str]],
    value: Callable[[_R], Value],
    *,
    counter: bool = False,
) -> Metric:
    """One gauge (or counter) family: a sample per row whose value is not None."""
    fam = RowFamily(name, documentation, "counter" if counter else "gauge", labels)
    append = fam.rows.append
    for row in rows:
        v = value(row)
        if v is not None:
            append((tuple(label_values(row)), float(v)))
    return fam


def labelled(
    name: str,
    documentation: str,
    labels: Sequence[str],
    samples: Iterable[tuple[Sequence[str], Value]],
    *,
    counter: bool = False,
) -> Metric:
    """One gauge (or counter) family from (label values, value) pairs, in their order."""
    return family(
        name, documentation, labels, samples, lambda s: s[0], lambda s: s[1], counter=counter
    )


def info(
    name: str,
    documentation: str,
    labels: Sequence[str],
    rows: Iterable[_R],
    label_values: Callable[[_R], Sequence[str]],
) -> Metric:
    """One info family (``name`` without ``_info``): a series per row."""
    fam = RowFamily(name, documentation, "info", labels)
    fam.rows.extend((tuple(label_values(row)), 1.0) for row in rows)
    return fam


@dataclass(frozen=True, slots=True)
class Breakdown(Generic[_R]):
    """A family with labels ``by`` after the row's own: ``samples`` of all rows, in order.

    ``samples`` gives (row, values of ``by``, value) for every sample; None is no sample.
    """

    name: str
    documentation: str
    by: tuple[str, ...]
    samples: Callable[[Sequence[_R]], Iterable[tuple[_R, Sequence[str], Value]]]
    counter: bool = False

    def render(
        self, labels: Sequence[str], label_values: Callable[[_R], Sequence[str]], rows: Sequence[_R]
    ) -> Metric:
        return family(
            self.name,
            self.documentation,
            [*labels, *self.by],
            self.samples(rows),
            (lambda s: label_values(s[0]))
            if not self.by
            else lambda s: [*label_values(s[0]), *s[1]],
            lambda s: s[2],
            counter=self.counter,
        )


def per_row(
    name: str, documentation: str, value: Callable[[_R], Value], *, counter: bool = False
) -> Breakdown[_R]:
    """A family with a sample per row: ``value`` of the row, None for no sample.

    It is a :class:`Breakdown` with no labels of its own.
    """
    return Breakdown(
        name, documentation, (), lambda rows: ((r, (), value(r)) for r in rows), counter=counter
    )


@dataclass(frozen=True, slots=True)
class Info(Generic[_R]):
    """An info family with a series per row, labelled by its own ``labels``, not the table's."""

    name: str
    documentation: str
    labels: tuple[str, ...]
    label_values: Callable[[_R], Sequence[str]]

    def render(
        self, labels: Sequence[str], label_values: Callable[[_R], Sequence[str]], rows: Sequence[_R]
    ) -> Metric:
        return info(self.name, self.documentation, self.labels, rows, self.label_values)


@dataclass(frozen=True, slots=True)
class Table(Generic[_R]):
    """Families over one kind of row, sharing ``labels`` (their values by ``label_values``)."""

    labels: tuple[str, ...]
    label_values: Callable[[_R], Sequence[str]]
    families: tuple[Breakdown[_R] | Info[_R], ...]

    def render(self, rows: Sequence[_R]) -> Iterator[Metric]:
        """Each family of the table over ``rows``, in table order (each row's shared
        label values are worked out once, not once per family)."""
        shared = {id(r): list(self.label_values(r)) for r in rows}
        for f in self.families:
            yield f.render(self.labels, lambda r: shared[id(r)], rows)
