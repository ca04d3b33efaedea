"""Exponential backoff: how long to wait after the n-th failure in a row. Pure.

The exporter's poller waits so between kubelet reads that failed; the device plugin
between its attempts to serve its socket and to register with the kubelet. The
caller counts the failures (and resets the count on its own rule); a
:class:`Backoff` says how long the next wait is.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final, TypeAlias

__all__ = ["HALF_JITTER", "NO_JITTER", "Backoff", "Jitter"]

Jitter: TypeAlias = tuple[float, float]
"""The range ``(low, high)`` of the random factor a wait is scaled by."""

HALF_JITTER: Final[Jitter] = (0.5, 1.0)
"""A wait anywhere between half the ceiling and the ceiling: clients that failed
together do not retry together."""

NO_JITTER: Final[Jitter] = (1.0, 1.0)
"""Exactly the ceiling, for retries nobody else competes with."""

# Past this many doublings every ceiling is max_s (and 2.0 ** 1024 would overflow).
_MAX_DOUBLINGS: Final = 1000


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff, with jitter unless ``jitter`` is :data:`NO_JITTER`.

    The n-th failure in a row waits a random time in [low * d, high * d] for
    ``jitter = (low, high)``, d = min(max_s, initial_s * 2^(n-1)) (the ceiling).
    The default, :data:`HALF_JITTER`, waits in [d/2, d].
    """

    initial_s: float = 1.0
    max_s: float = 30.0
    jitter: Jitter = HALF_JITTER

    def __post_init__(self) -> None:
        low, high = self.jitter
        if not 0 <= low <= high:
            raise ValueError(f"jitter must be (low, high) with 0 <= low <= high, not {self.jitter}")

    def ceiling(self, failures: int) -> float:
        """d for the ``failures``-th failure in a row (the first: ``initial_s``)."""
        doublings = min(max(failures - 1, 0), _MAX_DOUBLINGS)
        return min(self.max_s, self.initial_s * 2.0**doublings)

    def delay(self, failures: int, rng: random.Random) -> float:
        """The seconds to wait after the ``failures``-th failure in a row."""
        d = self.ceiling(failures)
        low, high = self.jitter
        if low == high:
            return d * low
        return rng.uniform(d * low, d * high)
