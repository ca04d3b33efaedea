"""Prometheus text -> samples: the parser of an exporter's ``/metrics`` for ``podres top``."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING

from podres_exporter.top.rows import Sample

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


def samples_from_families(families: Iterable[Metric]) -> tuple[Sample, ...]:
    """Metric families (as collectors yield or the parser returns) as plain samples."""
    return tuple(
        Sample(s.name, dict(s.labels), float(s.value)) for fam in families for s in fam.samples
    )


_LABEL_SET = re.compile(
    r'(?:[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*=[ \t]*"(?:[^"\\]|\\.)*"[ \t]*,?)*[ \t]*'
)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")
_UNESCAPED = {"n": "\n", "\\": "\\", '"': '"'}


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _UNESCAPED.get(m.group(1), m.group(0)), value)


def _split_labels(inner: str) -> dict[str, str] | None:
    """``a="x",b="y"`` split by its quotes, or None unless that is certain to be right.

    Without a backslash every ``"`` delimits a value, so ``",`` ends one and ``="`` starts
    one: the common case (our exporter's own label sets), at a fraction of the regular
    expressions' cost.
    """
    if "\\" in inner or not inner:
        return None
    body = inner[:-1] if inner[-1] == "," else inner
    if not body or body[-1] != '"':
        return None
    flat = body[:-1].replace('",', '="').split('="')
    pairs = len(flat) // 2
    if len(flat) % 2 or inner.count('"') != len(flat):
        return None
    keys = flat[0::2]
    labels = dict(zip(keys, flat[1::2], strict=True))
    if len(labels) != pairs:
        return None
    names = tuple(keys)
    if names not in _GOOD_NAMES:
        if not all(k.isidentifier() and k.isascii() for k in names):
            return None
        if len(_GOOD_NAMES) < _GOOD_NAMES_KEPT:
            _GOOD_NAMES.add(names)
    return labels


# Label-name tuples already checked (a metric's series share theirs), up to a bound.
_GOOD_NAMES: set[tuple[str, ...]] = set()
_GOOD_NAMES_KEPT = 1024


def _labels(line: str, brace: int, close: int, number: int) -> dict[str, str]:
    """The label set between ``brace`` and ``close``, escapes and spacing allowed."""
    if not _LABEL_SET.fullmatch(line, brace + 1, close):
        raise ValueError(f"line {number}: bad labels in {line[:200]!r}")
    return {
        key: _unescape(value) if "\\" in value else value
        for key, value in _LABEL.findall(line, brace + 1, close)
    }


def _wanted_lines(text: str, wanted: Collection[str]) -> Iterator[tuple[int, str]]:
    """The lines of ``text`` that start with a name in ``wanted`` followed by ``{``, a
    space or the line's end, each with its offset in ``text``; found by one regular
    expression (a scan in C), not a Python loop over every line."""
    names = "|".join(re.escape(n) for n in sorted(wanted, key=len, reverse=True))
    for m in re.finditer(rf"^(?:{names})(?=[{{ ]|$).*", text, re.M):
        yield m.start(), m.group()


def _line_number(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def parse_exposition(text: str, wanted: Collection[str] | None = None) -> list[Sample]:
    """The samples of a Prometheus text exposition, those named in ``wanted`` only if given.

    Much faster than ``prometheus_client.parser`` on a large exporter's ``/metrics``: the
    lines of wanted metrics are found by one regular expression, and a line's label set
    is split at its quotes (or, with escapes, checked and split by two regular
    expressions). Comments and timestamps are ignored; a malformed sample line raises
    ValueError naming it.
    """
    out: list[Sample] = []
    lines: Iterable[tuple[int, str]]
    if wanted is None:
        lines = enumerate(text.split("\n"), 1)
        number: Callable[[int], int] = int
    else:
        lines = _wanted_lines(text, wanted)
        number = partial(_line_number, text)
    for where, line in lines:
        if not line or line[0] == "#" or line.isspace():
            continue
        brace, space = line.find("{"), line.find(" ")
        labels: dict[str, str] = {}
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
            if wanted is not None and name not in wanted:
                continue
            close = line.rfind("}")  # label values may hold "}"; the value after it cannot
            if close < brace:
                raise ValueError(f"line {number(where)}: bad labels in {line[:200]!r}")
            labels = _split_labels(line[brace + 1 : close]) or _labels(
                line, brace, close, number(where)
            )
            rest = line[close + 1 :]
        else:
            name = line[:space] if space != -1 else line
            if wanted is not None and name not in wanted:
                continue
            rest = line[len(name) :]
        fields = rest.split()
        if not name or not fields:
            raise ValueError(f"line {number(where)}: no value in {line[:200]!r}")
        try:
            value_f = float(fields[0])
        except ValueError:
            raise ValueError(f"line {number(where)}: bad value in {line[:200]!r}") from None
        out.append(Sample(name, labels, value_f))
    return out
