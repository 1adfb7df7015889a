"""Per-token request rates: a token bucket for each token, in this API process.

Each token may send ``bucket_size`` requests at once and ``rate`` a minute sustained; a request
beyond that is refused with :class:`~cronbus.errors.RateLimitedError` (429) saying when the next
one would be admitted (``Retry-After``). Buckets live in memory: with several API processes each
admits the rate, which bounds the load per process, the purpose.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import RateLimitedError


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """Token buckets keyed by token id."""

    def __init__(
        self,
        per_minute: int,
        size: int,
        clock: Callable[[], float] = time.monotonic,
        max_buckets: int = 100_000,
    ) -> None:
        self.per_second = per_minute / 60.0
        self.size = float(max(1, size))
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._max_buckets = max_buckets

    def admit(self, key: str) -> None:
        """Take one request from ``key``'s bucket, or raise :class:`RateLimitedError`."""
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._max_buckets:
                self._forget_full(now)
            bucket = self._buckets[key] = _Bucket(self.size, now)
        else:
            bucket.tokens = min(self.size, bucket.tokens + (now - bucket.at) * self.per_second)
            bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return
        wait = (1.0 - bucket.tokens) / self.per_second
        raise RateLimitedError(
            f"too many requests for this token (at most {self.per_second * 60:g} a minute); "
            f"try again in {math.ceil(wait)} s",
            retry_after=wait,
        )

    def _forget_full(self, now: float) -> None:
        """Drop buckets that have refilled: they hold nothing a new bucket would not."""
        for key, bucket in list(self._buckets.items()):
            if bucket.tokens + (now - bucket.at) * self.per_second >= self.size:
                del self._buckets[key]
