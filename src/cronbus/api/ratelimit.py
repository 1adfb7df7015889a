"""Request rates in this API process: per token (:class:`RateLimiter`), and failed token
lookups per client address (:class:`FailureLimiter`).

Each token may send ``bucket_size`` requests at once and ``rate`` a minute sustained; a request
beyond that is refused with :class:`~cronbus.errors.RateLimitedError` (429) saying when the next
one would be admitted (``Retry-After``). Buckets live in memory: with several API processes each
admits the rate, which bounds the load per process, the purpose.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
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


class FailureLimiter:
    """Failed token lookups (API requests, console logins and sessions) per client address.

    Each address holds a bucket of ``burst`` failures, refilled at ``per_minute``; every failed
    lookup takes one. Once its bucket is empty, a request from the address is refused with
    :class:`RateLimitedError` *before* its token is looked up, so guesses cost neither a store
    read nor an answer that tells a good token from a bad one. A credential (token or session
    id) that was good in this process before is exempt: a shared address (a NAT, an office, a
    proxy not yet trusted) does not lock out the clients already working behind it while one
    of them guesses. Such a credential is still looked up, so revocation holds; a credential
    never seen good is refused like a guess, which it cannot be told apart from.

    At most ``max_addresses`` buckets and as many good credentials (by sha256) are kept; the
    least recently used go first. A bucket that has refilled holds nothing and is dropped.
    """

    def __init__(
        self,
        per_minute: int,
        burst: int,
        max_addresses: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_second = per_minute / 60.0
        self.size = float(max(1, burst))
        self._max = max(1, max_addresses)
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._good: OrderedDict[str, None] = OrderedDict()

    def check(self, address: str, credential: str | None) -> None:
        """Refuse a request from ``address`` whose bucket is empty, unless ``credential`` was
        good here before; raises :class:`RateLimitedError`."""
        bucket = self._refill(address)
        if bucket is None or bucket.tokens >= 1.0:
            return
        if credential is not None and _digest(credential) in self._good:
            return
        wait = (1.0 - bucket.tokens) / self.per_second
        raise RateLimitedError(
            f"too many failed token lookups from this address (at most "
            f"{self.per_second * 60:g} a minute); try again in {math.ceil(wait)} s",
            retry_after=wait,
        )

    def failed(self, address: str, credential: str | None = None) -> None:
        """Take one failure from ``address``'s bucket (and forget ``credential`` as good)."""
        if credential is not None:
            self._good.pop(_digest(credential), None)
        bucket = self._refill(address)
        if bucket is None:
            bucket = self._buckets[address] = _Bucket(self.size, self._clock())
            while len(self._buckets) > self._max:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(address)
        bucket.tokens = max(0.0, bucket.tokens - 1.0)

    def succeeded(self, credential: str) -> None:
        """Remember ``credential`` as good: it passes a blocked address from now on."""
        key = _digest(credential)
        self._good[key] = None
        self._good.move_to_end(key)
        while len(self._good) > self._max:
            self._good.popitem(last=False)

    def _refill(self, address: str) -> _Bucket | None:
        bucket = self._buckets.get(address)
        if bucket is None:
            return None
        now = self._clock()
        bucket.tokens = min(self.size, bucket.tokens + (now - bucket.at) * self.per_second)
        bucket.at = now
        if bucket.tokens >= self.size:
            del self._buckets[address]  # full again: as good as no bucket
            return None
        return bucket


def _digest(credential: str) -> str:
    # Kept by hash: the table never holds a usable token or session id.
    return hashlib.sha256(credential.encode()).hexdigest()
