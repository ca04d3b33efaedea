"""Just enough PromQL reading for the dashboard lint: selectors, range windows, aggregations.

A tokenizer and a few scans over its tokens, not a full parser: it finds every series selector
(metric name and label matchers), the window of every range-vector function call, and the
operand and grouping labels of every aggregation. Grafana's ``$variables`` may stand where
PromQL has a string or a duration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)(?![\w:])|\$\w+)
  | (?P<ident>[A-Za-z_:][\w:]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){},@])
    """,
    re.VERBOSE,
)
KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
     "and", "or", "unless", "atan2"}
)  # fmt: skip
AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
     "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
)  # fmt: skip
# Functions that take a range vector: their window is what the lint checks.
RANGE_FUNCTIONS = frozenset(
    {"rate", "irate", "increase", "delta", "idelta", "deriv", "changes", "resets",
     "predict_linear", "holt_winters", "avg_over_time", "min_over_time", "max_over_time",
     "sum_over_time", "count_over_time", "quantile_over_time", "stddev_over_time",
     "stdvar_over_time", "last_over_time", "present_over_time", "absent_over_time"}
)  # fmt: skip


class PromQLError(ValueError):
    """The text is not PromQL this reader understands."""


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    pos: int


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str


@dataclass(frozen=True)
class Selector:
    """A series selector: ``name`` ('' for ``{...}`` alone) and its matchers; ``start`` and
    ``end`` are token indices (end exclusive)."""

    name: str
    matchers: tuple[Matcher, ...]
    start: int
    end: int

    def matcher(self, label: str) -> Matcher | None:
        return next((m for m in self.matchers if m.label == label), None)


@dataclass(frozen=True)
class Call:
    """A function call or aggregation: its operand spans tokens ``[open_, close]`` (the
    parentheses), ``grouping`` the ``by`` labels (``None`` without a by clause)."""

    name: str
    open_: int
    close: int
    grouping: tuple[str, ...] | None
    without: bool


def tokenize(expr: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(expr):
        found = _TOKEN.match(expr, pos)
        if not found:
            raise PromQLError(f"cannot read {expr[pos : pos + 20]!r} at {pos} in {expr!r}")
        kind = found.lastgroup or ""
        if kind != "space":
            tokens.append(Token(kind, found.group(), pos))
        pos = found.end()
    return tokens


def _closing(tokens: list[Token], open_: int, left: str = "(", right: str = ")") -> int:
    depth = 0
    for i in range(open_, len(tokens)):
        if tokens[i].text == left:
            depth += 1
        elif tokens[i].text == right:
            depth -= 1
            if depth == 0:
                return i
    raise PromQLError(f"unbalanced {left} at {tokens[open_].pos}")


def _unquote(text: str) -> str:
    body = text[1:-1]
    return body if text[0] == "`" else re.sub(r"\\(.)", r"\1", body)


def _labels(tokens: list[Token], open_: int) -> tuple[tuple[str, ...], int]:
    close = _closing(tokens, open_)
    names = tuple(t.text for t in tokens[open_ + 1 : close] if t.kind == "ident")
    return names, close


def _matchers(tokens: list[Token], open_: int) -> tuple[tuple[Matcher, ...], int]:
    close = _closing(tokens, open_, "{", "}")
    inner = [t for t in tokens[open_ + 1 : close] if t.text != ","]
    if len(inner) % 3:
        raise PromQLError(f"bad label matchers at {tokens[open_].pos}")
    out = []
    for i in range(0, len(inner), 3):
        label, op, value = inner[i : i + 3]
        if (
            label.kind != "ident"
            or op.text not in ("=", "!=", "=~", "!~")
            or value.kind != "string"
        ):
            raise PromQLError(f"bad label matcher at {label.pos}")
        out.append(Matcher(label.text, op.text, _unquote(value.text)))
    return tuple(out), close


@dataclass(frozen=True)
class Expr:
    """What the lint needs to know of one expression."""

    text: str
    tokens: tuple[Token, ...]
    selectors: tuple[Selector, ...]
    calls: tuple[Call, ...]

    def ranges_of(self, call: Call) -> list[str]:
        """The windows (``5m``, ``$__rate_interval``) directly inside ``call``'s parentheses."""
        out = []
        depth = 0
        for tok in self.tokens[call.open_ : call.close + 1]:
            if tok.text == "(":
                depth += 1
            elif tok.text == ")":
                depth -= 1
            elif tok.kind == "range" and depth == 1:
                out.append(tok.text[1:-1].strip())
        return out

    def selectors_in(self, call: Call) -> list[Selector]:
        return [s for s in self.selectors if call.open_ < s.start and s.end <= call.close]


def parse(expr: str) -> Expr:
    tokens = tokenize(expr)
    selectors: list[Selector] = []
    calls: list[Call] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1].text if i + 1 < len(tokens) else ""
        if tok.kind == "ident" and tok.text in ("by", "without", "on", "ignoring",
                                                 "group_left", "group_right"):  # fmt: skip
            if nxt == "(":
                i = _labels(tokens, i + 1)[1] + 1
                continue
            i += 1
            continue
        if tok.kind == "ident" and tok.text in AGGREGATIONS and nxt in ("(", "by", "without"):
            grouping: tuple[str, ...] | None = None
            without = False
            j = i + 1
            if tokens[j].text in ("by", "without"):
                without = tokens[j].text == "without"
                grouping, close = _labels(tokens, j + 1)
                j = close + 1
            close = _closing(tokens, j)
            after = close + 1
            if after < len(tokens) and tokens[after].text in ("by", "without"):
                without = tokens[after].text == "without"
                grouping = _labels(tokens, after + 1)[0]
            calls.append(Call(tok.text, j, close, grouping, without))
            i = j
            continue
        if tok.kind == "ident" and nxt == "(" and tok.text not in KEYWORDS:
            calls.append(Call(tok.text, i + 1, _closing(tokens, i + 1), None, False))
            i += 1
            continue
        if tok.kind == "ident" and tok.text not in KEYWORDS:
            matchers: tuple[Matcher, ...] = ()
            end = i + 1
            if nxt == "{":
                matchers, close = _matchers(tokens, i + 1)
                end = close + 1
            selectors.append(Selector(tok.text, matchers, i, end))
            i = end
            continue
        if tok.text == "{":
            matchers, close = _matchers(tokens, i)
            name = next((m.value for m in matchers if m.label == "__name__" and m.op == "="), "")
            selectors.append(Selector(name, matchers, i, close + 1))
            i = close + 1
            continue
        i += 1
    return Expr(expr, tuple(tokens), tuple(selectors), tuple(calls))


def metric_names(selector: Selector) -> tuple[str, str]:
    """(exact name, ``__name__`` regex) of a selector; either may be empty."""
    regex = next((m.value for m in selector.matchers if m.label == "__name__" and m.op == "=~"), "")
    return selector.name, regex
