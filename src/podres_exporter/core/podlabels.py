"""Which pod labels are served, under which label names, within which bounds. Pure.

``--pod-labels`` is an allow-list, off by default (no pod label is served): exact label
keys (``team``, ``app.kubernetes.io/name``) and patterns in which ``*`` stands for any
run of characters (``app.kubernetes.io/*``; ``*`` alone allows every label), as
kube-state-metrics' ``--metric-labels-allowlist=pods=[...]`` takes them.

A key becomes a label name as kube-state-metrics names it: ``label_`` and the key with
every character outside ``[a-zA-Z0-9_]`` as ``_`` (``app.kubernetes.io/name`` ->
``label_app_kubernetes_io_name``). Two keys of one pod that give the same name
(``a.b`` and ``a_b``) are told apart the way kube-state-metrics does: in the keys'
sorted order, each of them gets ``_conflict1``, ``_conflict2`` ... appended. So a
label name always means one key on one pod; which key, only the pod's other keys decide.

Labels are what a pod's author writes, so they are bounded like every other peer input:
a key longer than any Kubernetes allows (317 characters) is left out, a value is cut to
:data:`MAX_VALUE_CHARS` (Kubernetes allows 63), at most :data:`MAX_LABELS_PER_POD` labels
of one pod are served (the first in key order), and at most :data:`MAX_LABEL_NAMES`
distinct label names on the whole node (the first in name order); what is left out is
counted. The exposition escapes what is left (quotes, backslashes, line breaks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from podres_exporter.core.printable import cut

MAX_KEY_CHARS = 317  # a 253-character DNS prefix, "/", a 63-character name
MAX_VALUE_CHARS = 256
MAX_LABELS_PER_POD = 64
MAX_LABEL_NAMES = 256
PREFIX = "label_"

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_PATTERN = re.compile(r"^[A-Za-z0-9._/*-]+$")


def parse_allowlist(text: str | list[str]) -> tuple[str, ...]:
    """The patterns of ``--pod-labels``: comma-separated (or a config file's array); empty
    for none. ValueError for a pattern with a character no label key has."""
    items = text if isinstance(text, list | tuple) else [text]
    patterns = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"expected label keys such as team,app.kubernetes.io/*, got {item!r}")
        for part in item.split(","):
            p = part.strip()
            if not p:
                continue
            if not _PATTERN.match(p) or len(p) > MAX_KEY_CHARS:
                raise ValueError(
                    f"{p!r} is no label key or pattern (letters, digits, '.', '-', '_', '/' "
                    "and '*' for any run of characters)"
                )
            patterns.append(p)
    return tuple(dict.fromkeys(patterns))


@dataclass(frozen=True, slots=True)
class Allowlist:
    """The allowed keys: ``exact`` ones and ``patterns`` with ``*`` (as one regex)."""

    exact: frozenset[str]
    pattern: re.Pattern[str] | None

    @classmethod
    def of(cls, patterns: Iterable[str]) -> Allowlist:
        """The allow-list of ``--pod-labels`` patterns (none: nothing allowed)."""
        exact: set[str] = set()
        wild: list[str] = []
        for p in patterns:
            if "*" in p:
                wild.append(".*".join(re.escape(part) for part in p.split("*")))
            else:
                exact.add(p)
        pattern = re.compile("(?:" + "|".join(wild) + r")\Z") if wild else None
        return cls(frozenset(exact), pattern)

    @property
    def empty(self) -> bool:
        """Whether no label is allowed (the default: no ``podres_pod_labels_info``)."""
        return not self.exact and self.pattern is None

    def allows(self, key: str) -> bool:
        """Whether the label ``key`` is served."""
        if key in self.exact:
            return True
        return self.pattern is not None and self.pattern.match(key) is not None


NOTHING = Allowlist(frozenset(), None)


@lru_cache(maxsize=4096)
def label_name(key: str) -> str:
    """kube-state-metrics' name of a pod label: ``label_`` and the key, every character
    outside ``[a-zA-Z0-9_]`` as ``_``. Remembered: the same few keys on thousands of pods
    share one name string."""
    return PREFIX + _INVALID.sub("_", key)


@dataclass(frozen=True, slots=True)
class Chosen:
    """One pod's served labels, (label name, value) sorted by name, and how many of its
    allowed labels were left out by the bounds."""

    labels: tuple[tuple[str, str], ...]
    dropped: int


NONE_CHOSEN = Chosen((), 0)


def choose(labels: Mapping[str, str], allow: Allowlist) -> Chosen:
    """The labels of one pod that ``allow`` lets through, named and bounded."""
    if allow.empty or not labels:
        return NONE_CHOSEN
    keys = sorted(k for k in labels if allow.allows(k))
    dropped = 0
    if len(keys) > MAX_LABELS_PER_POD:
        dropped += len(keys) - MAX_LABELS_PER_POD
        keys = keys[:MAX_LABELS_PER_POD]
    named: list[list[str]] = []  # [name, value], in key order
    first: dict[str, int] = {}  # a name -> the index of its first key
    count: dict[str, int] = {}  # a name -> how many keys gave it
    for key in keys:
        if len(key) > MAX_KEY_CHARS:
            dropped += 1
            continue
        name = label_name(key)
        value = cut(labels[key], MAX_VALUE_CHARS)
        n = count.get(name, 0)
        if n == 1:  # the first clash: the first key's name gets its suffix too
            named[first[name]][0] = f"{name}_conflict1"
        if n:
            count[name] = n + 1
            named.append([f"{name}_conflict{n + 1}", value])
        else:
            count[name] = 1
            first[name] = len(named)
            named.append([name, value])
    return Chosen(tuple(sorted((n, v) for n, v in named)), dropped)


__all__ = [
    "MAX_LABELS_PER_POD",
    "MAX_LABEL_NAMES",
    "MAX_VALUE_CHARS",
    "NOTHING",
    "Allowlist",
    "Chosen",
    "choose",
    "label_name",
    "parse_allowlist",
]
