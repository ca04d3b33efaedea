"""The kubelet's rate limit on the pod-resources API: one global token bucket."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["RATE_LIMITED", "RATE_LIMIT_BURST", "RATE_LIMIT_QPS", "TokenBucket"]

# The kubelet's own words, and its figures: 100 qps, burst 10, shared by every method.
RATE_LIMITED = "rejected by rate limit"
RATE_LIMIT_QPS = 100.0
RATE_LIMIT_BURST = 10


class TokenBucket:
    """A token bucket like Go's ``rate.Limiter``: starts full, ``allow`` takes a token."""

    def __init__(
        self,
        rate: float = RATE_LIMIT_QPS,
        burst: int = RATE_LIMIT_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        """Take one token if there is one."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False
